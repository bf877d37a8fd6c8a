"""Tiny random checkpoints written in real on-disk layouts, for tests (no hub, no downloads)."""
from __future__ import annotations

from pathlib import Path

import torch

from sharpen.core.models.loading import save_checkpoint
from sharpen.core.models.model import Transformer, preset
from sharpen.core.tokenizer import train_byte_bpe

TRAINING_TEXT = [
    "def add(a, b):\n    return a + b\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "for i in range(10):\n\tprint(i)\r\n",
    "import os\nimport sys\n\nif __name__ == '__main__':\n    main()\n",
    "Plain prose, with commas; and unicode: café, naïve, 東京, ☃.\n",
] * 20


def write_tiny_sharpen(out: Path, seed: int = 0, vocab_size: int = 400, **overrides) -> Path:
    """Our own family: random weights of the `test` preset and a small byte-level BPE."""
    tokenizer = train_byte_bpe(TRAINING_TEXT, vocab_size)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.hf.save(str(out / "tokenizer.json"))
    torch.manual_seed(seed)
    model = Transformer(preset("test", vocab_size=tokenizer.vocab_size, **overrides))
    return save_checkpoint(model, out / "tokenizer.json", out, {"name": "tiny-random"})
