"""`sharpen models`, `sharpen doctor`, `sharpen download`: what is here, what works, fetch more.

models:   the usable checkpoints found locally (embedded, Hugging Face cache, dirs given),
          with family, parameters, stored dtype, size and place; the unusable ones with why.
doctor:   torch, CUDA and GPUs, free memory, the model that would load, what is missing.
download: the one command that touches the network (huggingface_hub, with progress).
Results go to stdout; errors are SharpenErrors that cli.py prints as one line.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
from importlib import metadata
from pathlib import Path

from ..core.errors import ModelError, UsageError
from . import stop


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


def run_subcommand(name: str, argv: list[str]) -> int:
    return {"models": models, "doctor": doctor, "download": download, "serve": serve, "lsp": lsp}[name](argv)


SUBCOMMANDS = ("models", "doctor", "download", "serve", "lsp")  # `sharpen NAME ...`; a file with one of these names: open it as ./NAME


def serve(argv: list[str]) -> int:
    """`sharpen serve`: one model over HTTP (app/serve/)."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise UsageError("sharpen serve needs its web stack: pip install 'sharpen[serve]'") from None
    from .serve.main import serve as run

    if signal.getsignal(signal.SIGINT) is stop.stop_at_once:  # the console script's: a server has nothing to write
        stop.install(_server_stopped)
    return run(argv)


def _server_stopped(signum, frame) -> None:  # noqa: ARG001 (a signal handler's arguments)
    """Ctrl+C or SIGTERM on `sharpen serve` (while it loads, or re-raised by uvicorn once it has
    shut down): one line and exit 130, without the editing commands' "nothing was written"."""
    try:
        os.write(2, b"sharpen serve: stopped\n")
    except OSError:
        pass
    os._exit(stop.INTERRUPTED_EXIT)


def lsp(argv: list[str]) -> int:
    """`sharpen lsp`: a language server on stdio answering inline completions (app/lsp.py)."""
    try:
        import pygls  # noqa: F401
    except ImportError:
        raise UsageError("sharpen lsp needs pygls: pip install 'sharpen[serve]'") from None
    from .lsp import main as run

    return run(argv)


# -- models -------------------------------------------------------------------------------


def models(argv: list[str]) -> int:
    parser = _Parser(prog="sharpen models", description="List the checkpoints found locally and whether they load.")
    parser.add_argument("dirs", nargs="*", metavar="DIR", help="checkpoint directories, or folders holding them")
    parser.add_argument("--json", action="store_true", help="one JSON list on stdout")
    parser.add_argument("--all", action="store_true", help="also list the checkpoints that cannot load, with why")
    args = parser.parse_args(argv)
    from ..core.models.catalog import find_checkpoints

    found = find_checkpoints([Path(d) for d in args.dirs])
    if args.json:
        sys.stdout.write(json.dumps([c.to_dict() for c in found], indent=2) + "\n")
        return 0
    usable = [c for c in found if c.usable]
    sys.stdout.write(format_table(usable) if usable else "no usable checkpoints found\n")
    if usable:
        sys.stdout.write("\n" + fit_report([(c.name, _backbone_config(c.path)) for c in usable]))
    broken = [c for c in found if not c.usable]
    if broken and args.all:
        sys.stdout.write("\nnot usable:\n" + "".join(f"  {c.path}: {c.problem}\n" for c in broken))
    elif broken:
        sys.stdout.write(f"\n{len(broken)} more found that cannot load (sharpen models --all says why)\n")
    return 0


def format_table(infos) -> str:
    from ..core.models.catalog import human_count
    from ..core.models.placement import human

    rows = [("NAME", "FAMILY", "PARAMS", "DTYPE", "SIZE", "WHERE")]
    for c in infos:
        family = (c.family or "?") + (" (instruct)" if c.instruct else "")
        where = f"{c.source}: {c.path}" + (f"  [{c.note}]" if c.note else "")
        rows.append((c.name, family, human_count(c.params), c.dtype, human(c.size_bytes), where))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return "".join("  ".join(cell.ljust(w) for cell, w in zip(r, widths)) + "  " + r[5] + "\n" for r in rows)


def _backbone_config(path):
    """The backbone dimensions of a native checkpoint, or None (remote code: unknown here)."""
    from ..core.models.loading import model_config, read_config

    try:
        return model_config(Path(path), read_config(Path(path)))[1]
    except ModelError:
        return None


def fit_report(entries, machine=None, context_tokens: int = 1024) -> str:
    """Per model and precision: weights + KV cache (batch 1, `context_tokens` of context) against
    this machine's best GPU and its RAM, fits / tight / does not fit, and the setting that fits."""
    from ..core.models import memory_fit
    from ..core.models.placement import human

    machine = machine or memory_fit.this_machine()
    gpu = f"best GPU {human(machine.best_gpu_free)} free" if machine.gpus else "no GPU"
    lines = [f"memory at {context_tokens} tokens of context ({gpu}, {human(machine.ram_available)} RAM available):"]
    rows = [("MODEL", *(p.upper() for p in memory_fit.PRECISIONS), "RUNS HERE")]
    for name, cfg in entries:
        if cfg is None:
            rows.append((name, *("?" for _ in memory_fit.PRECISIONS), "not sharpen's backbone: size from `sharpen doctor --model`"))
            continue
        cells = []
        for precision, need, on_gpu, on_cpu in memory_fit.fit_table(cfg, machine, context_tokens):
            where = on_gpu if machine.gpus else on_cpu
            cells.append(f"{human(need.total)} {'ok' if where == 'fits' else where}")
        if isinstance(cfg, memory_fit.WeightsOnly):  # not sharpen's backbone: weights alone, a floor
            active = f", {cfg.active / 1e9:.1f}B active" if cfg.active else ""
            name = f"{name} ({cfg.params / 1e9:.1f}B{active}; weights only)"
        elif cfg.moe is not None:  # memory is the total size; a step's speed follows the active one
            name = f"{name} ({sum(memory_fit.parameter_split(cfg)) / 1e9:.1f}B, {memory_fit.active_parameters(cfg) / 1e9:.1f}B active)"
        rows.append((name, *cells, memory_fit.advice(cfg, machine, context_tokens)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows]
    where = "on the best GPU" if machine.gpus else "in RAM"
    return "\n".join(lines) + f"\n  (each cell: memory needed, and whether it fits {where}: ok / tight / does not fit)\n"


# -- doctor -------------------------------------------------------------------------------


def doctor(argv: list[str]) -> int:
    parser = _Parser(prog="sharpen doctor", description="What sharpen can use here, and what is missing.")
    parser.add_argument("--model", metavar="M", help="checkpoint directory or cached hub id (default: the embedded model)")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default auto)")
    parser.add_argument("--dtype", default="auto", help="auto, float32, bfloat16, float16")
    parser.add_argument("--trust-remote-code", action="store_true", help="count models with their own code as loadable")
    args = parser.parse_args(argv)
    out, missing = [], []
    say = out.append

    say(f"sharpen {_version('sharpen')} on Python {platform.python_version()} ({platform.system()} {platform.machine()})")
    import torch

    from ..core.models.placement import available_memory, host_available_bytes, human

    cuda = torch.cuda.is_available()
    say(f"torch {torch.__version__}, CUDA {'available (' + str(torch.version.cuda) + ')' if cuda else 'not available'}")
    if cuda:
        for i in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(i)
            say(f"  GPU {i}: {torch.cuda.get_device_name(i)}, {human(free)} free of {human(total)}")
    else:
        missing.append("no CUDA GPU: models run on the CPU in float32 (fine for the embedded model, slow for 7-8B ones)")
    say(f"host memory: {human(host_available_bytes())} available")
    for package in ("transformers", "accelerate", "safetensors", "tokenizers", "huggingface_hub", "textual"):
        version = _version(package)
        say(f"  {package} {version or 'MISSING'}")
        if version is None:
            missing.append(f"python package {package} is not installed")
    from huggingface_hub import constants

    from ..core.models.catalog import hf_cache_checkpoints, safely_inspected

    cached = hf_cache_checkpoints()
    say(f"Hugging Face cache: {constants.HF_HUB_CACHE} ({len(cached)} models with a config.json)")

    from ..core.models.load import resolve_device, resolve_dtype, resolve_model_path
    from ..core.models.loading import embedded_model_path

    ok = True
    try:
        path, repo_id = resolve_model_path(args.model)
        info = safely_inspected(path or embedded_model_path(), repo_id or (None if path else "embedded"),
                                "hf-cache" if repo_id else ("dir" if path else "embedded"))
    except ModelError as exc:
        info, ok = None, False
        say(f"model: {args.model}: {exc}")
        missing.append(str(exc))
    if info is not None:
        device = resolve_device(args.device)
        dtype = resolve_dtype(args.dtype, device)
        say(f"model: {info.name} ({info.path})")
        if info.problem:
            ok = False
            say(f"  cannot load: {info.problem}")
            missing.append(f"the model cannot load: {info.problem}")
        else:
            kind = f"family {info.family}" + (", instruct (chat template)" if info.instruct else "")
            say(f"  {kind}, {info.params:,} parameters, stored as {info.dtype}, {human(info.size_bytes)}")
            need = info.params * torch.tensor([], dtype=dtype).element_size()
            room = sum(v for k, v in available_memory(1.0).items() if k != "cpu") if device.startswith("cuda") else host_available_bytes()
            where = "the GPUs" if device.startswith("cuda") else "host memory"
            say(f"  would load on {device} as {str(dtype).removeprefix('torch.')}: {human(need)} of weights, {human(room)} free in {where}")
            if need > room and device.startswith("cuda"):
                say("  bigger than the GPUs: accelerate would offload the rest to CPU memory (slower)")
            elif need > room:
                ok = False
                missing.append(f"not enough memory for the model: {human(need)} needed, {human(room)} available")
            if info.family == "remote" and info.note and not args.trust_remote_code:
                ok = False
                missing.append(f"the model {info.note}")
    from ..core.models.memory_fit import KNOWN_RELEASES

    from ..core.models.memory_fit import WeightsOnly

    entries = []
    if info is not None and not info.problem:  # --model itself first: sharpen's backbone, or its weights alone (DiffusionGemma)
        entries.append((info.name, WeightsOnly(info.params) if info.family == "diffusion_gemma" else _backbone_config(info.path)))
    # By hub id (owner/name): the name pastes into `sharpen download` and --model as it is.
    entries += [(f"{repo} (release)" if repo.endswith("/" + name) else f"{repo} (release: {name})", cfg)
                for name, (repo, cfg) in KNOWN_RELEASES.items()]
    say(fit_report(entries).rstrip("\n"))
    say("missing:" if missing else "nothing missing")
    out.extend(f"  - {m}" for m in missing)
    sys.stdout.write("\n".join(out) + "\n")
    return 0 if ok else ModelError.exit_code


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


# -- download -----------------------------------------------------------------------------

# What sharpen reads from a checkpoint: config, weights, tokenizer files, chat template,
# and the modeling code that --trust-remote-code may run.
ALLOW = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.py", "*.md"]


def download(argv: list[str]) -> int:
    parser = _Parser(prog="sharpen download", description="Download a checkpoint from the Hugging Face hub into the local cache.")
    parser.add_argument("repo_id", metavar="REPO_ID", help="e.g. GSAI-ML/LLaDA-8B-Instruct")
    parser.add_argument("--revision", help="branch, tag or commit (default main)")
    parser.add_argument("--cache-dir", help="cache directory (default: the Hugging Face cache)")
    args = parser.parse_args(argv)
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError
    except ImportError:
        raise ModelError("huggingface_hub is not installed; pip install huggingface_hub") from None
    from ..core.models.memory_fit import KNOWN_RELEASES, footprint
    from ..core.models.placement import human

    size = next((footprint(cfg, "bfloat16", 0).weights for repo, cfg in KNOWN_RELEASES.values() if repo.lower() == args.repo_id.lower()), None)
    about = f", about {human(size)}" if size else ""
    sys.stderr.write(f"sharpen: downloading {args.repo_id} (safetensors, config, tokenizer files{about})\n")
    try:
        # huggingface_hub draws its progress bars on stderr; stdout gets only the path
        path = snapshot_download(args.repo_id, revision=args.revision, cache_dir=args.cache_dir, allow_patterns=ALLOW)
    except RepositoryNotFoundError:
        raise ModelError(f"no model {args.repo_id!r} on the hub (or it is gated and you are not logged in)") from None
    except Exception as exc:  # huggingface_hub's errors, OSError, and the HTTP library's own (httpx.ConnectError)
        what = f"{type(exc).__name__}: {exc}".lower()
        if any(word in what for word in ("connecterror", "connection", "name or service not known", "timed out", "timeout")):
            raise ModelError(f"cannot reach the Hugging Face hub to download {args.repo_id} (no network?); "
                             "copy the checkpoint directory to this machine and pass --model DIR") from None
        if isinstance(exc, (HfHubHTTPError, OSError, ValueError)):
            raise ModelError(f"cannot download {args.repo_id}: {str(exc).splitlines()[0]}") from None
        raise
    sys.stdout.write(f"{path}\n")
    return 0
