"""The vLLM-shaped front door: `LLM`, `LLMEngine`, `SamplingParams` and outputs."""

from ..sampling_params import SamplingParams
from .args import EngineArgs
from .llm import LLM
from .llm_engine import KVCacheTooSmallWarning, LLMEngine
from .offline_beam import BeamSearchOutput, BeamSearchParams, BeamSearchSequence
from .outputs import CompletionOutput, Logprob, RequestOutput, ScheduledInfo, StepOutput

__all__ = ["LLM", "BeamSearchOutput", "BeamSearchParams", "BeamSearchSequence",
           "CompletionOutput", "EngineArgs", "KVCacheTooSmallWarning", "LLMEngine", "Logprob",
           "RequestOutput", "SamplingParams", "ScheduledInfo", "StepOutput"]
