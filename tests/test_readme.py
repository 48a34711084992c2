"""The README's first snippet runs as printed and shows a figure that means
something after the run: the peak blocks in use, not kv_usage (1.0 once every
block is back, which reads as "100% used")."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_first_python_snippet_prints_the_peak_blocks(capsys):
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    out = capsys.readouterr().out
    peak = re.search(r"peak (\d+) of 256 KV blocks in use", out)
    assert peak, out
    stats = namespace["llm"].llm_engine.memory_stats()
    assert stats["used_blocks"] == 0 and stats["kv_usage"] == 1.0  # why the peak is shown
    prompt = len(namespace["out"][0].prompt_token_ids)
    generated = len(namespace["out"][0].outputs[0].token_ids)
    # the last sampled token is never written to the cache: p + g - 1 tokens in blocks of 16
    assert int(peak.group(1)) == -(-(prompt + generated - 1) // 16) == stats["peak_used_blocks"]
