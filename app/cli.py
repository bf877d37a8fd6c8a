"""The `sharpen` command: opens the editor, or runs headless with --apply-edit.

Only argparse is imported at the top so that `sharpen --help` answers at once; torch,
the engine and textual load when they are needed.
"""
from __future__ import annotations

import argparse
import os
import sys

EXIT_CODES = """exit codes:
  0    done
  2    usage error or bad SPEC (overlapping, reversed or out-of-range spans)
  3    input/output error (missing, unreadable, binary or non-UTF-8 file; cannot write)
  4    model or runtime error (weights missing or corrupt, unknown family, out of memory)
  130  interrupted (Ctrl+C or SIGTERM); the file is left untouched
"""

SPEC_HELP = """SPEC forms (1-based lines and columns, end exclusive):
  L:C-L:C          a character range, e.g. 3:5-3:20; equal ends mean an insertion point
  L-L, L           whole lines (their content; the last line break stays)
  A,B,...          several spans, filled together in one denoising run
  @edits.json, -   a JSON list of {"range", "mode", "instruction", "max_tokens", "strength"}
  body@L, node@L:C the body of the function/block at line L ("Fill body"); the syntax node at L:C
                   (also expr@, stmt@, block@, func@; see app/syntax_specs.py)
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one plain line, documented exit code
        sys.stderr.write(f"sharpen: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sharpen",
        description="A terminal editor with a local diffusion language model: select, infill, rewrite, watch it sharpen.",
        epilog=SPEC_HELP + "\n" + EXIT_CODES + "\nother commands: sharpen models | sharpen doctor | sharpen download REPO_ID",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("files", nargs="*", metavar="FILE", help="files to open; with --apply-edit exactly one (or - for stdin)")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument("--config", metavar="PATH", help="editor config file (default: see --print-config-path)")
    parser.add_argument("--print-config-path", action="store_true", help="print where the editor's config file is read from and exit")
    parser.add_argument("--theme", metavar="NAME", help="editor theme (sharpen-dark, sharpen-light, sharpen-dusk, or one of yours)")

    edit = parser.add_argument_group("headless editing")
    edit.add_argument("--apply-edit", metavar="SPEC", help="edit FILE without a screen and print the result")
    out = edit.add_mutually_exclusive_group()
    out.add_argument("--in-place", action="store_true", help="write the result back to FILE (atomically)")
    out.add_argument("--diff", action="store_true", help="print a unified diff instead of the new text")
    out.add_argument("--json", action="store_true", help="print JSON: per span the new text, steps, tokens and time")
    edit.add_argument("--mode", choices=("infill", "rewrite"), default="infill", help="what the spans of a plain SPEC do (default infill)")
    edit.add_argument("--max-tokens", type=int, metavar="N", help="infill slot budget per span (pad/eos trims it)")
    edit.add_argument("--strength", type=float, default=0.5, metavar="F", help="rewrite: share of the span re-noised (default 0.5)")
    edit.add_argument("--instruction", metavar="TEXT", help="rewrite instruction (instruct checkpoints only)")
    edit.add_argument("--quiet", "-q", action="store_true", help="no progress line on stderr")

    model = parser.add_argument_group("model and sampling")
    model.add_argument("--model", metavar="M", help="checkpoint directory or a hub id already in the local Hugging Face cache (default: the embedded model)")
    model.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default auto)")
    model.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16"), help="weights dtype (default: bfloat16 on GPU, float32 on CPU)")
    model.add_argument("--device-map", choices=("auto",), help="spread a big model over the GPUs and CPU memory (accelerate); automatic when it does not fit one GPU")
    model.add_argument("--max-memory", metavar="SPEC", help="memory per device for --device-map, e.g. 0=20GiB,1=20GiB,cpu=64GiB")
    model.add_argument("--trust-remote-code", action="store_true", help="allow checkpoints of other families to run their own Python modeling code")
    model.add_argument("--mask-id", type=int, metavar="ID", help="mask token id, for --trust-remote-code models whose files do not say")
    model.add_argument("--shift-logits", action=argparse.BooleanOptionalAction, default=None, help="whether logits at i predict token i+1, when the files do not say")
    model.add_argument("--steps", type=int, metavar="N", help="at most N denoising steps (default: up to one per token)")
    model.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (same seed, same result)")
    model.add_argument("--policy", default="confidence", choices=("confidence", "margin", "entropy", "random"), help="which tokens commit first")
    model.add_argument("--schedule", default="threshold", choices=("fixed", "threshold"), help="fixed quota per step, or also every token above --threshold")
    model.add_argument("--threshold", type=float, default=0.9, metavar="P", help="confidence for parallel commits (default 0.9)")
    model.add_argument("--block-size", type=int, default=8, metavar="N", help="semi-autoregressive blocks of N slots, left to right (default 8; 0: one block)")
    model.add_argument("--cache", default="dual", choices=("none", "prefix", "dual"), help="KV cache per block: none is exact; dual (default) is fastest")
    model.add_argument("--refresh", default="block", choices=("block", "canvas"), help="cache refresh at each new block: only the finished block (default) or the whole canvas (Fast-dLLM)")
    model.add_argument("--kernels", default="auto", choices=("auto", "reference", "triton"), help="step kernels: auto is triton on CUDA")
    model.add_argument("--compile", default="off", choices=("off", "default", "reduce-overhead", "max-autotune"),
                       help="torch.compile the model; reduce-overhead records CUDA graphs (GPU). Each new shape compiles once: worth it for long runs, not one quick edit")
    model.add_argument("--temperature", type=float, default=0.0, metavar="T", help="0 is greedy (default)")
    model.add_argument("--top-k", type=int, metavar="K")
    model.add_argument("--top-p", type=float, metavar="P")
    model.add_argument("--samples", type=int, default=1, metavar="N", help="alternatives denoised together (best first)")
    model.add_argument("--context-tokens", type=int, default=1024, metavar="N", help="fixed context around the spans (default 1024)")
    # Syntax-aware infilling (core/candidates.py, core/length.py; wired in app/syntax_specs.py).
    model.add_argument("--candidates", type=int, default=1, metavar="N", help="N candidate lengths per infill span in one batch, ranked by parse validity then confidence (default 1: off)")
    model.add_argument("--length", default="fixed", choices=("fixed", "adaptive"), help="adaptive: re-run with a longer span while the model fills it up (default fixed)")
    return parser


# Line breaks and other control characters (say, in a hostile file name) are escaped so
# that an error is always exactly one line on stderr.
_ONE_LINE = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, 0x85]} | {0x2028: "\\u2028", 0x2029: "\\u2029"}


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"sharpen: {message.translate(_ONE_LINE)}\n")
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return _fail("interrupted; nothing was written", 130)
    except BrokenPipeError:
        return 0


COMMANDS = ("models", "doctor", "download")  # a file with one of these names: open it as ./NAME


def _main(argv: list[str]) -> int:
    if argv and argv[0] in COMMANDS:
        from ..core.errors import SharpenError
        from .commands import run_command

        try:
            return run_command(argv[0], argv[1:])
        except SharpenError as exc:
            return _fail(str(exc), exc.exit_code)
    args = build_parser().parse_args(argv)
    if args.version:
        from importlib.metadata import version

        print(f"sharpen {version('sharpen')}")
        return 0
    if args.print_config_path:
        from .config import default_config_path

        print(args.config or default_config_path())
        return 0
    from ..core.errors import SharpenError

    try:
        if args.apply_edit is not None:
            if len(args.files) != 1:
                return _fail("error: --apply-edit needs exactly one FILE (or - for stdin)", 2)
            args.file = args.files[0]
            from .headless import run_headless

            return run_headless(args)
        if args.in_place or args.diff or args.json:
            return _fail("error: --in-place, --diff and --json go with --apply-edit", 2)
        return _open_editor(args)
    except SharpenError as exc:
        return _fail(str(exc), exc.exit_code)
    except MemoryError:
        return _fail(f"out of memory; try {_smaller(args)}", 4)
    except Exception as exc:  # torch raises its OOM as a RuntimeError subclass
        if type(exc).__name__ == "OutOfMemoryError":
            return _fail(f"out of GPU memory; try {_smaller(args)}, or --device cpu", 4)
        if args.apply_edit is None or os.environ.get("SHARPEN_DEBUG"):
            raise
        # Headless callers get the documented contract even for a bug: one line, exit 4.
        return _fail(f"internal error: {type(exc).__name__}: {exc} (SHARPEN_DEBUG=1 shows the traceback)", 4)


def _smaller(args: argparse.Namespace) -> str:
    """The settings that shrink a run's memory, from the ones it used."""
    hints = [f"--context-tokens {max(64, args.context_tokens // 2)}"]
    if args.samples > 1:
        hints.append("--samples 1")
    return ", ".join(hints)


def _open_editor(args: argparse.Namespace) -> int:
    try:
        from .tui.editor_app import run_editor
    except ImportError:
        return _fail("error: the editor is not available in this build; use --apply-edit", 2)
    return run_editor(args)


if __name__ == "__main__":
    sys.exit(main())
