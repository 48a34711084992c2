"""Where vLLM's CPU step goes, split as `profile_pagedkit` splits pagedkit's.

``python -m pagedkit bench engine --systems pagedkit,vllm --profile`` runs
each system once more with timers around the parts of its step and prints the
two splits side by side (issue #25). vLLM's parts, in its V1 objects (0.32,
in this process):

* ``scheduling``: ``Scheduler.schedule`` and ``update_from_output``;
* ``packing``: the model runner's ``execute_model`` less the model's forward
  (input batch updates, positions, slot mapping, attention metadata);
* ``linear layers``: every ``UnquantizedLinearMethod.apply`` (oneDNN or
  packed GEMMs on CPU, fused QKV and gate-up projections, the LM head);
* ``attention``: every ``Attention`` layer's forward (its CPU attention
  kernels, the KV store included);
* ``model other``: the rest of the forward and of ``compute_logits`` (norms,
  rotary embedding, activations, module calls);
* ``sampling``: ``sample_tokens``;
* ``bookkeeping``: the rest of the engine core's step (outputs, KV events);
* ``outside steps``: what the front end does around the steps (requests in,
  outputs out).

The timers cost a little themselves; the split, not the total, is the point.
"""

from __future__ import annotations

from .engine import PROFILE_PARTS, Workload, run_vllm
from .timers import PartTimers


def profile_vllm(engine, work: Workload) -> dict:
    """Run `work` on `engine` (a `pagedkit.vllm.compare.VllmEngine`) once with
    timers on; seconds and shares per part of `PROFILE_PARTS`."""
    from vllm.model_executor.layers.attention.attention import Attention
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod

    core = engine.llm.llm_engine.engine_core.engine_core  # in this process only
    runner = core.model_executor.driver_worker.worker.model_runner
    timers = PartTimers()
    timers.wrap(core, "step_fn", "step")
    timers.wrap(core.scheduler, "schedule", "scheduling")
    timers.wrap(core.scheduler, "update_from_output", "scheduling")
    timers.wrap(runner, "execute_model", "execute")
    timers.wrap(runner, "sample_tokens", "sampling")
    timers.wrap(runner.model, "forward", "forward")
    timers.wrap(runner.model, "compute_logits", "forward")
    timers.wrap(UnquantizedLinearMethod, "apply", "linear layers")
    timers.wrap(Attention, "forward", "attention")
    try:
        result, _ = run_vllm(engine, work)
    finally:
        timers.restore()
    s = timers.seconds
    parts = {
        "scheduling": s["scheduling"],
        "packing": s["execute"] - s["forward"],  # compute_logits runs in execute_model
        "linear layers": s["linear layers"],
        "attention": s["attention"],
        "model other": s["forward"] - s["linear layers"] - s["attention"],
        "sampling": s["sampling"],
    }
    parts["bookkeeping"] = s["step"] - sum(parts.values())
    parts["outside steps"] = result.seconds - s["step"]
    return {"total_s": result.seconds, "tokens_per_s": result.tokens_per_s,
            "seconds": {part: parts[part] for part in PROFILE_PARTS},
            "share": {part: parts[part] / result.seconds for part in PROFILE_PARTS}}
