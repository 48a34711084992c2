"""vLLM's ``vllm.outputs`` path: ``from pagedkit.outputs import RequestOutput``
as a vLLM script writes ``from vllm.outputs import RequestOutput`` (the
classes live in `pagedkit.engine.outputs`)."""

from .engine.outputs import CompletionOutput, RequestOutput

__all__ = ["CompletionOutput", "RequestOutput"]
