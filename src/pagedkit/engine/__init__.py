"""The vLLM-shaped front door: `LLM`, `LLMEngine`, `SamplingParams` and outputs."""

from ..sampling_params import SamplingParams
from .llm import LLM
from .llm_engine import LLMEngine
from .outputs import CompletionOutput, RequestOutput, ScheduledInfo, StepOutput

__all__ = ["LLM", "CompletionOutput", "LLMEngine", "RequestOutput", "SamplingParams",
           "ScheduledInfo", "StepOutput"]
