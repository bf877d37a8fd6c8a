"""The headless result on stdout, in the format --output asks for: the new text, a unified diff
(coloured on a terminal), or the --json report.

Moved out of app/headless.py: the formats are what a script reading sharpen's stdout depends
on, apart from how the run is driven; headless.write_result writes the file itself
(--in-place) and hands every other output here.
"""
from __future__ import annotations

import difflib
import json
import os
import sys

from ..core.errors import InputError
from ..core.files import TextFile
from .specs import LineIndex, format_range
from .syntax_specs import colour_diff


def print_result(output: str, source: TextFile, done, new_text: str, seconds: float) -> None:
    """`done` (a core.run.Done) as `output` ("diff", "json", else the new text) on stdout."""
    if sys.stdout is None:
        raise InputError("cannot write the result: standard output is closed")
    if output == "diff":
        name = display_name(source.path) if source.path else "<stdin>"
        # git's a/ b/ prefixes, except before an absolute path (no "a//tmp/f.py").
        old_label, new_label = (name, name) if name.startswith("/") else (f"a/{name}", f"b/{name}")
        diff = difflib.unified_diff(source.text.splitlines(keepends=True), new_text.splitlines(keepends=True), old_label, new_label)
        _write_stdout(colour_diff("".join(_terminated(diff)), sys.stdout).encode("utf-8", "surrogateescape"))  # colour on a terminal only
    elif output == "json":
        _write_stdout((json.dumps(json_report(done, source, seconds), ensure_ascii=False, indent=2) + "\n").encode("utf-8"))
    else:
        _write_stdout(source.encode(new_text))


def json_report(done, source: TextFile, seconds: float) -> dict:
    """--json: the run's shared JSON form (core.run.Done.to_json, what the server sends too)
    plus what only a file has: its name, line:column ranges, the whole new text."""
    shared = done.to_json()
    index = LineIndex.of(source.text)
    denoise = shared["denoise_seconds"]
    return {
        "file": display_name(source.path) if source.path else "-",
        "model": shared["model"],
        "steps": shared["steps"],
        "tokens": shared["tokens"],
        "prompt_tokens": shared["prompt_tokens"],  # the text around the spans the model read (what fit its canvas)
        "context_cut": shared["context_cut"],  # some text around the spans did not fit the canvas
        "seconds": round(seconds, 4),
        "denoise_seconds": denoise,
        "tokens_per_second": shared["tokens_per_second"],
        # How the canvas starts: "mask" (masked diffusion) or "random" (DiffusionGemma: noise
        # re-drawn every step). sharp_per_step[k]: slots sharp after step k (0: the start).
        "noise": shared["noise"],
        "sharp_per_step": shared["sharp_per_step"],
        "settings": shared["settings"],  # what the loop ran with: steps, block size, thresholds (per kind)
        "spans": [
            {"range": format_range(index, s["start"], s["end"]), "mode": s["mode"], "text": s["text"], "steps": shared["steps"],
             "tokens": s["tokens"], "seconds": denoise, "alternatives": s["alternatives"],
             **{k: s[k] for k in ("commits", "edits") if k in s}}  # a loop that edits its own tokens (LLaDA2.1)
            for s in shared["spans"]
        ],
        "text": done.result.changes().apply(source.text),
    }


def display_name(path) -> str:
    """A path as valid UTF-8 text: bytes that are not UTF-8 (Linux allows any) show as \\xNN."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _write_stdout(data: bytes) -> None:
    """The result to stdout; a closed or full stdout is an I/O error (exit 3), not a crash."""
    if sys.stdout is None:
        raise InputError("cannot write the result: standard output is closed")
    try:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise InputError(f"cannot write the result to standard output ({exc.strerror or exc})") from None


def _terminated(lines):
    # A diff line without a newline (last line of a file) gets the standard marker.
    for line in lines:
        if line.endswith("\n"):
            yield line
        else:
            yield line + "\n\\ No newline at end of file\n"
