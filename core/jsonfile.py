"""A checkpoint's small JSON files (generation_config.json, tokenizer_config.json, ...)."""
from __future__ import annotations

import json
from pathlib import Path

from .errors import ModelError


def read_json_object(file: Path) -> dict:
    """The JSON object in `file`: {} when the file is absent or holds no object; unreadable is a ModelError."""
    if not file.exists():
        return {}
    try:
        loaded = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {file}: {exc}") from None
    return loaded if isinstance(loaded, dict) else {}
