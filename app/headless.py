"""`sharpen FILE --apply-edit SPEC`: the engine without a screen.

stdout carries only the result (new text, a unified diff, or JSON); progress and errors
go to stderr. The input file is written only with --in-place, only after the whole edit
succeeded, and atomically. Imports no textual; torch is imported only once the input and
the SPEC have been checked, so bad input fails fast.
"""
from __future__ import annotations

import difflib
import json
import signal
import sys
import time
from argparse import Namespace
from pathlib import Path

from ..core.errors import UsageError
from ..core.files import TextFile, atomic_write, decode_bytes, read_text_file
from ..core.spans import Span, validate_spans
from .specs import LineIndex, format_range, parse_edit_list, parse_spec


def read_input(file_arg: str) -> TextFile:
    if file_arg == "-":
        text, bom = decode_bytes(sys.stdin.buffer.read(), "<stdin>")
        return TextFile(None, text, bom)
    return read_text_file(file_arg)


def read_spans(args: Namespace, source: TextFile) -> list[Span]:
    spec = args.apply_edit
    if spec == "-" or spec.startswith("@"):
        if spec == "-":
            if args.file == "-":
                raise UsageError("FILE and SPEC cannot both be read from stdin")
            payload, name = sys.stdin.read(), "<stdin>"
        else:
            name = spec[1:]
            try:
                payload = Path(name).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"cannot read edit list {name}: {getattr(exc, 'strerror', None) or exc}") from None
        spans = parse_edit_list(payload, source.text, name)
    else:
        options = {"strength": args.strength, "max_tokens": args.max_tokens, "instruction": args.instruction}
        spans = parse_spec(spec, source.text, mode=args.mode, **options)
    return validate_spans(source.text, spans)


def sampler_settings(args: Namespace):
    from ..core.sampler import SamplerSettings

    try:
        return SamplerSettings(
            steps=args.steps,
            policy=args.policy,
            schedule=args.schedule,
            threshold=args.threshold,
            block_size=args.block_size,
            cache=args.cache,
            kernels=args.kernels,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            seed=args.seed,
            samples=args.samples,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


class Progress:
    """A one-line step counter on stderr, only when stderr is a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def update(self, frame) -> None:
        if self.enabled:
            rate = f"{(frame.total_steps and (frame.step / max(frame.elapsed, 1e-9))):.1f} steps/s"
            sys.stderr.write(f"\rsharpen: step {frame.step}/{frame.total_steps}, {frame.masked} masked, {rate}  ")
            sys.stderr.flush()

    def finish(self, result) -> None:
        if self.enabled:
            rate = result.tokens / max(result.seconds, 1e-9)
            sys.stderr.write(f"\rsharpen: {result.tokens} tokens in {result.steps} steps, {result.seconds:.2f}s ({rate:.0f} tok/s)\n")


def run_headless(args: Namespace) -> int:
    signal.signal(signal.SIGTERM, _raise_interrupt)  # SIGTERM ends like Ctrl+C: file untouched, 130
    if args.in_place and args.file == "-":
        raise UsageError("--in-place needs a file, not stdin")
    source = read_input(args.file)
    spans = read_spans(args, source)
    settings = sampler_settings(args)

    from ..core.engine import run_edit  # torch loads here, after input and SPEC are known good
    from .model_choice import load_model

    denoiser = load_model(args)
    progress = Progress(sys.stderr.isatty() and not args.quiet)
    started = time.perf_counter()
    result = None
    for update in run_edit(denoiser, source.text, spans, settings, context_tokens=args.context_tokens):
        progress.update(update.frame)
        result = update.result or result
    progress.finish(result)
    write_result(args, source, spans, result, denoiser, time.perf_counter() - started)
    return 0


def write_result(args: Namespace, source: TextFile, spans: list[Span], result, denoiser, seconds: float) -> None:
    if args.in_place:
        atomic_write(source.path, source.encode(result.text))
    elif args.diff:
        name = str(source.path or "<stdin>")
        diff = difflib.unified_diff(
            source.text.splitlines(keepends=True), result.text.splitlines(keepends=True), f"a/{name}", f"b/{name}"
        )
        sys.stdout.write("".join(_terminated(diff)))
    elif args.json:
        index = LineIndex.of(source.text)
        payload = {
            "file": str(source.path) if source.path else "-",
            "model": denoiser.spec.name,
            "steps": result.steps,
            "tokens": result.tokens,
            "seconds": round(seconds, 4),
            "denoise_seconds": round(result.seconds, 4),
            "tokens_per_second": round(result.tokens / max(result.seconds, 1e-9), 2),
            "spans": [
                {
                    "range": format_range(index, r.span.start, r.span.end),
                    "mode": r.span.mode,
                    "text": r.text,
                    "steps": result.steps,
                    "tokens": r.tokens,
                    "seconds": round(result.seconds, 4),
                    "alternatives": list(r.alternatives[1:]),
                }
                for r in result.spans
            ],
            "text": result.text,
        }
        sys.stdout.write(json.dumps(payload, ensure_ascii=False, indent=2) + "\n")
    else:
        sys.stdout.buffer.write(source.encode(result.text))
    sys.stdout.flush()


def _terminated(lines):
    # A diff line without a newline (last line of a file) gets the standard marker.
    for line in lines:
        if line.endswith("\n"):
            yield line
        else:
            yield line + "\n\\ No newline at end of file\n"
