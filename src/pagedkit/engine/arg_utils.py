"""vLLM's ``vllm.engine.arg_utils`` path: ``from pagedkit.engine.arg_utils
import EngineArgs`` as in a vLLM script (the class lives in `pagedkit.engine.args`)."""

from .args import EngineArgs

__all__ = ["EngineArgs"]
