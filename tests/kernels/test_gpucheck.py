"""`python -m pagedkit gpucheck` where it can be tested without a GPU: the refusal
without CUDA, argument parsing, and the table / JSON built from (made-up) checks.
The checks themselves need a GPU; the oracle they compare against is tested here."""

import json
import os
import subprocess
import sys

import pytest
import torch

from pagedkit import gpucheck

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")


def run_cli(*args):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-m", "pagedkit", *args], capture_output=True,
                          text=True, env=env, timeout=300)


@NO_CUDA
def test_without_cuda_it_says_so_and_exits_3(tmp_path):
    """Not 2, argparse's status for a usage error (newcomer 36): a script tells
    "no GPU here" from a mistyped option."""
    out = run_cli("gpucheck", "--json", str(tmp_path / "out.json"))
    assert out.returncode == 3
    assert "gpucheck needs a CUDA GPU, and torch sees none here" in out.stderr
    assert "Nothing was checked" in out.stderr
    assert not (tmp_path / "out.json").exists()


def test_it_is_a_registered_command_with_its_own_usage():
    out = run_cli("--help")
    assert out.returncode == 0 and "gpucheck" in out.stdout
    out = run_cli("gpucheck", "--help")
    assert out.returncode == 0 and "--json PATH" in out.stdout and "--quick" in out.stdout
    out = run_cli("gpucheck", "--bogus")
    assert out.returncode == 2 and "unrecognized arguments: --bogus" in out.stderr


def fake_checks():
    return [
        gpucheck.Check("kernels", "decode bfloat16 32q/8kv d128 splits=1",
                       "max |err| 1.2e-02 (tol 3e-02)", True, {"max_abs_err": 0.012}),
        gpucheck.Check("kernels", "prefill float16 32q/1kv d64", "max |err| nan (tol 4e-03)",
                       False, {"max_abs_err": float("nan")}),
        gpucheck.Check("benchmark", "decode 64 x 8192 float16", "3900 GB/s (81% of peak)",
                       None, {"pct": 81.0}),
    ]


def test_table_marks_pass_fail_and_measurements():
    text = gpucheck.table(fake_checks())
    lines = text.splitlines()
    assert lines[0].split() == ["section", "check", "result", "value"]
    assert "PASS" in lines[1] and "decode bfloat16" in lines[1]
    assert "FAIL" in lines[2] and "max |err| nan" in lines[2]
    assert lines[3].split()[0] == "benchmark" and " - " in lines[3]
    assert lines[-1] == "1 passed, 1 failed, 1 measured"


def test_report_is_strict_json_with_the_verdict():
    report = gpucheck.build_report({"name": "fake"}, {"torch": "x"}, fake_checks(), 12.34)
    text = json.dumps(report, allow_nan=False)  # NaN became null
    back = json.loads(text)
    assert back["ok"] is False and back["seconds"] == 12.3
    assert back["failed"] == ["kernels: prefill float16 32q/1kv d64"]
    assert back["checks"][1]["detail"]["max_abs_err"] is None
    assert [gpucheck.Check(**c).ok for c in back["checks"]] == [True, False, None]
    passing = gpucheck.build_report({}, {}, [fake_checks()[0], fake_checks()[2]], 1.0)
    assert passing["ok"] is True and passing["failed"] == []


def test_compare_fails_on_nan_and_on_error_over_tolerance():
    truth = torch.zeros(2, 3, dtype=torch.float64)
    ok = gpucheck._compare("x", torch.full((2, 3), 1e-3), truth, torch.float16)
    assert ok.ok is True
    assert gpucheck._compare("x", torch.full((2, 3), 1e-2), truth, torch.float16).ok is False
    bad = gpucheck._compare("x", torch.full((2, 3), float("nan")), truth, torch.float32)
    assert bad.ok is False and bad.detail["max_abs_err"] is None


def test_the_oracle_is_causal_softmax_attention_with_window_softcap_and_sinks():
    """Against a loop written out per query row and head (no shared code)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(5, 4, 8, generator=g), torch.randn(9, 2, 8, generator=g),
               torch.randn(9, 2, 8, generator=g))
    sinks = torch.randn(4, generator=g)
    got = gpucheck.oracle(q, k, v, 0.3, 4, sliding_window=3, softcap=2.0, sinks=sinks)
    for i in range(5):
        p = 4 + i
        for h in range(4):
            keys = range(max(0, p - 2), p + 1)
            s = [2.0 * torch.tanh(0.3 * (q[i, h].double() @ k[j, h // 2].double()) / 2.0)
                 for j in keys]
            top = max(max(s), sinks[h].double())
            w = [torch.exp(x - top) for x in s]
            denom = sum(w) + torch.exp(sinks[h].double() - top)
            want = sum(wj * v[j, h // 2].double() for wj, j in zip(w, keys, strict=True)) / denom
            torch.testing.assert_close(got[i, h], want)


def test_kernel_checks_pass_in_the_interpreter(triton_kernels, device):
    """The GPU's kernel section, small and in float32, on this machine's device (the
    interpreter on CPU): its calls, oracle and positions line up, every line passes.
    (That a wrong result fails a line: test_compare_fails_on_nan_and_on_error_over_...)"""
    checks = gpucheck.kernel_checks(device, dtypes=(torch.float32,), lens=(1, 20, 45, 70),
                                    q_lens=(1, 20, 5, 9), window=16)
    assert len(checks) == (4 + 4) * 4  # (shapes + options) x (2 decodes, reference, prefill)
    assert {c.name.split()[0] for c in checks} == {"decode", "reference", "prefill"}
    assert [c.name for c in checks if not c.ok] == []


def _small_llama(dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, max_position_embeddings=256)
    return LlamaForCausalLM(config).to(dtype).eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_rounding_verdict_accepts_the_engines_tokens_and_refuses_other_ones(dtype):
    """gpucheck's bfloat16 engine check, run here on a small model on the CPU:
    the engine's greedy tokens pass; a sequence with one token swapped for the
    least likely one (what a wrong K/V or position gives) does not."""
    from pagedkit import LLM, SamplingParams

    model = _small_llama(dtype)
    prompt = torch.randint(0, 256, (37,), generator=torch.Generator().manual_seed(3)).tolist()
    llm = LLM(model, dtype=str(dtype).removeprefix("torch."), block_size=8)
    tokens = llm.generate({"prompt_token_ids": prompt},
                          SamplingParams(temperature=0, max_tokens=12, ignore_eos=True),
                          use_tqdm=False)[0].outputs[0].token_ids
    verdict = gpucheck.rounding_verdict(model, prompt, tokens)
    assert verdict["ok"], verdict
    assert 0 <= verdict["gap"] <= 2 * verdict["noise"]
    for i in (0, 5, 11):
        logits = gpucheck._logits(model, prompt, tokens, "sdpa")
        wrong = [*tokens[:i], int(logits[i].argmin()), *tokens[i + 1:]]
        bad = gpucheck.rounding_verdict(model, prompt, wrong)
        assert not bad["ok"] and bad["gap"] > 2 * bad["noise"], (i, bad)
