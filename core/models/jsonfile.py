"""A checkpoint's small JSON files (generation_config.json, tokenizer_config.json, ...)."""
from __future__ import annotations

from pathlib import Path

from . import untrusted


def read_json_object(file: Path) -> dict:
    """The JSON object in `file`: {} when the file is absent or holds no object; a file that is not
    regular, too large or not JSON is a ModelError (core/models/untrusted.py)."""
    return untrusted.read_json_object(file)
