"""A kernel setting that cannot run is said as itself, with what to do
(newcomer 18, findings 3-5, a macOS learner without Triton).

``PAGEDKIT_KERNELS=triton`` without Triton, or ``PAGEDKIT_KERNELS=bogus``, made
``LLM("tiny")`` refuse the *model* ("pagedkit cannot serve LlamaForCausalLM:
... serve it with transformers' generate"): the support probe wrapped every
error of the forward pass. `python -m pagedkit demo` printed a 36-frame
traceback, or blamed --model. The forced-Triton error named what was missing
but not what to do; ``backend("cpu").reason`` advertised the Triton kernels
where Triton is not installed; the Triton modules' ImportError named the
torch references, where the batched path runs by default.

CI has Triton: these tests take it away (`ops._triton_import_error`, or
``sys.modules["triton"] = None``, which `import` and `find_spec` both obey)."""

import importlib
import importlib.util
import sys

import pytest

from pagedkit import ops

NOT_INSTALLED = "Triton is not installed (No module named 'triton')"
INSTALL = "install it (Linux only: pip install triton; Colab has it), or "
#: each setting that cannot run here: (how it is set, its value, the error it must raise)
SETTINGS = [
    ("env", "bogus",
     "PAGEDKIT_KERNELS must be one of auto, native, batched, torch, triton; got 'bogus'"),
    ("env", "triton", "PAGEDKIT_KERNELS=triton forces the Triton kernels, but " + NOT_INSTALLED
     + "; " + INSTALL + "unset PAGEDKIT_KERNELS (auto runs what works here), or set it "
     "to batched or torch"),
    ("set_backend", "triton", "set_backend('triton') forces the Triton kernels, but "
     + NOT_INSTALLED + "; " + INSTALL + "call set_backend('batched') or set_backend('torch') "
     "for a torch path"),
]
IDS = [f"{how}-{value}" for how, value, _ in SETTINGS]


@pytest.fixture
def setting(monkeypatch):
    """Apply a setting, without Triton; back to the default afterwards."""
    monkeypatch.setattr(ops, "_triton_import_error", lambda: NOT_INSTALLED)
    monkeypatch.delenv(ops.ENV_VAR, raising=False)

    def apply(how: str, value: str) -> None:
        if how == "env":
            monkeypatch.setenv(ops.ENV_VAR, value)
        else:
            ops.set_backend(value)

    yield apply
    ops.set_backend(None)


@pytest.mark.parametrize("how, value, error", SETTINGS, ids=IDS)
def test_the_backend_says_the_setting_and_what_to_do(setting, how, value, error):
    setting(how, value)
    with pytest.raises((RuntimeError, ValueError)) as raised:
        ops.backend("cpu")
    assert str(raised.value) == error


@pytest.mark.parametrize("how, value, error", SETTINGS, ids=IDS)
def test_llm_raises_the_settings_own_error_not_a_refusal_of_the_model(setting, how, value,
                                                                        error):
    from pagedkit import LLM

    setting(how, value)
    with pytest.raises(Exception) as raised:
        LLM("tiny")
    assert type(raised.value) in (RuntimeError, ValueError), repr(raised.value)
    assert str(raised.value) == error


@pytest.mark.parametrize("value", ["bogus", "triton"])
def test_the_demo_says_the_setting_in_one_line(setting, capsys, value):
    from pagedkit import demo

    error = next(e for how, v, e in SETTINGS if how == "env" and v == value)
    setting("env", value)
    with pytest.raises(SystemExit) as raised:
        demo.main(["--no-progress", "--max-tokens", "2"])
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == f"python -m pagedkit demo: {error}", err
    assert "Traceback" not in err and "usage:" not in err and "--model" not in err


def test_the_cpu_reason_offers_no_triton_kernels_where_triton_is_not_installed(monkeypatch):
    monkeypatch.delenv(ops.ENV_VAR, raising=False)
    monkeypatch.setitem(sys.modules, "triton", None)
    reason = ops.backend("cpu").reason
    assert reason.endswith("the per-sequence reference with PAGEDKIT_KERNELS=torch; the Triton "
                           "kernels need Triton, which is not installed here)"), reason


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_the_cpu_reason_offers_the_triton_kernels_where_triton_is_installed(monkeypatch):
    monkeypatch.delenv(ops.ENV_VAR, raising=False)
    assert ops.backend("cpu").reason.endswith(
        "the per-sequence reference with PAGEDKIT_KERNELS=torch; the Triton kernels with "
        "PAGEDKIT_KERNELS=triton and TRITON_INTERPRET=1)")


def test_the_triton_modules_import_error_names_the_batched_default(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.language", None)
    monkeypatch.delitem(sys.modules, "pagedkit.kernels.triton_support", raising=False)
    with pytest.raises(ImportError) as raised:
        importlib.import_module("pagedkit.kernels.triton_support")
    assert str(raised.value) == (
        "the pagedkit.kernels Triton modules need Triton, which installs on Linux only; "
        "pagedkit.ops runs its torch paths without it (by default the batched one, "
        "pagedkit.kernels.batched; the per-sequence reference is pagedkit.kernels.reference)")


@pytest.mark.parametrize("error", [RuntimeError("the setting's own words"),
                                   ValueError("the setting's own words")],
                         ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("where", ["demo", "LLM"])
def test_the_demo_and_the_engine_check_the_setting_in_one_place(monkeypatch, capsys, where,
                                                                error):
    """The demo asked `ops.backend` itself, beside the engine's own check in
    `check_supported`: two places to keep alike. Both run `support.check_kernel_setting`
    now; the demo before it loads the model (the LLM is never built), in one line."""
    import pagedkit
    from pagedkit import demo
    from pagedkit.model import support

    def refuse(device):
        raise error

    monkeypatch.setattr(support, "check_kernel_setting", refuse)
    if where == "LLM":
        with pytest.raises(type(error)) as raised:
            pagedkit.LLM("tiny")
        assert raised.value is error
        return
    monkeypatch.setattr(pagedkit, "LLM", lambda *a, **k: pytest.fail("the model was loaded"))
    with pytest.raises(SystemExit) as raised:
        demo.main(["--no-progress", "--max-tokens", "2"])
    assert raised.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"python -m pagedkit demo: {error}"
