"""What ships in pagedkit/models/tiny/: the files from_pretrained needs, small enough
to live in the package, and documented with the losses that training actually logged."""

import json
from pathlib import Path

from pagedkit.models import TINY_DIR

ROOT = Path(__file__).resolve().parents[2]
NEEDED = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
          "generation_config.json"]


def test_the_saved_pretrained_files_are_all_there():
    missing = [name for name in NEEDED if not (TINY_DIR / name).is_file()]
    assert not missing, f"missing from {TINY_DIR}: {missing}"


def test_the_model_folder_is_at_most_8_mb():
    size = sum(p.stat().st_size for p in TINY_DIR.iterdir() if p.is_file())
    assert size <= 8 * 1024 * 1024, f"{TINY_DIR} holds {size:,} bytes"


def test_the_weights_are_stored_in_float16():
    header_len = int.from_bytes((TINY_DIR / "model.safetensors").read_bytes()[:8], "little")
    with open(TINY_DIR / "model.safetensors", "rb") as f:
        header = json.loads(f.read(8 + header_len)[8:])
    dtypes = {v["dtype"] for k, v in header.items() if k != "__metadata__"}
    assert dtypes == {"F16"}


def test_the_doc_quotes_the_logged_losses():
    log = json.loads((TINY_DIR / "train_log.json").read_text())
    doc = (ROOT / "docs" / "tiny_model.md").read_text()
    for key in ("final_train_loss", "final_val_loss"):
        assert f"{log[key]:.3f}" in doc, f"docs/tiny_model.md does not quote {key} {log[key]}"
