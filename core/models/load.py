"""The load policy: a ModelRequest in, a denoiser out (route, fit check, placement, threads, compile, name).

Everything that decides how a model loads lives here, in core, so the editor, the headless
runner, the servers, benches and worker processes load a model the same way without app/.

`--model` is a checkpoint directory or a Hugging Face hub id resolved from the local
cache only: nothing is downloaded here (that is `sharpen download REPO_ID`). Native
families load into the core backbone; anything else needs --trust-remote-code. A model
bigger than the GPU, or any model with --device-map auto / --max-memory, is placed by
accelerate and the plan is one of the load's notes.

Notes: a load says a few things a person should see (the device plan, compile progress, an
int8 layer running eagerly). They go to `notes`, one line per call: the command line passes
a writer to stderr, the editor and the servers leave the default, the log.
"""
from __future__ import annotations

import logging
import os
import re
from typing import Callable
from dataclasses import replace
from pathlib import Path

from ..errors import ModelError, UsageError
from ..settings import ModelRequest, parse_device

_log = logging.getLogger(__name__)

DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16"}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def resolve_device(requested: str | None) -> str:
    import torch

    if requested in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parse_device(requested)  # doctor's --device comes here unchecked: meta cannot run a model
    except ValueError as exc:
        raise UsageError(f"--device {exc}") from None
    if requested.startswith("cuda") and not torch.cuda.is_available():
        why = "this torch is a CPU build" if torch.version.cuda is None else "no CUDA GPU is visible"
        raise UsageError(f"--device {requested}: {why}; use --device cpu (or auto)")
    return requested


def resolve_dtype(name: str | None, device: str):
    """--dtype: bf16 on GPUs and float32 on CPU unless the user says otherwise."""
    import torch

    if name in (None, "auto"):
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if name not in DTYPES:
        raise UsageError(f"unknown --dtype {name!r}; known: auto, {', '.join(sorted(set(DTYPES.values())))}")
    return getattr(torch, DTYPES[name])


def resolve_model_path(model: str | None, cache_dir: str | Path | None = None) -> tuple[Path | None, str | None]:
    """(checkpoint directory, hub id or None); None for the embedded model. Never downloads."""
    if model is None:
        return None, None
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelError(f"--model {model} is a file; give the checkpoint directory")
        return path, None
    if not _HUB_ID.match(model) or model.startswith(("./", "../")):
        raise ModelError(f"model directory not found: {model}")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError:
        raise ModelError(f"model directory not found: {model} (huggingface_hub is not installed to look in the cache)") from None
    try:
        return Path(snapshot_download(model, local_files_only=True, cache_dir=cache_dir)), model
    except (LocalEntryNotFoundError, OSError, ValueError):
        raise ModelError(
            f"model {model!r} is neither a directory nor in the local Hugging Face cache; "
            f"download it with: sharpen download {model}"
        ) from None


def placement_for(request: ModelRequest, cfg, dtype, device: str):
    """A DevicePlan when the model must (or was asked to) span devices, else None."""
    import torch

    from . import placement

    spec = request.max_memory
    max_memory = placement.parse_max_memory(spec) if spec else None
    if max_memory and any(isinstance(d, int) for d in max_memory) and not torch.cuda.is_available():
        raise UsageError("--max-memory names a GPU, but no CUDA GPU is available; leave it out, or use only cpu=SIZE")
    asked = request.device_map == "auto" or max_memory is not None
    if not asked:
        if request.device != "auto" or not device.startswith("cuda"):
            return None
        free, _ = torch.cuda.mem_get_info(0)
        if placement.fits_one_device(cfg, dtype, free, quantize=request.quantize):
            return None
    return placement.plan(cfg, dtype, max_memory, request.quantize)  # sized as loaded: quantized when asked


SMALL_MODEL = 50_000_000  # parameters: below this a CPU step is too small for threads to pay (bench/threads.py)


def cpu_threads(request: ModelRequest, parameters: int, editor: bool) -> int:
    """How many torch threads a run uses on the CPU: the request's, else the measured default."""
    if request.threads is not None:
        return request.threads
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if parameters < SMALL_MODEL:
        return 1
    return max(1, cores - 1) if editor else cores


Notes = Callable[[str], None]


def load_model(request: ModelRequest = ModelRequest(), notes: Notes | None = None, editor: bool = False):
    """The denoiser the request asks for (a Denoiser, or a RemoteDenoiser on opt-in).

    `notes`: where the load's lines for a person go (default: the log, so that a screen or a
    server's output is not written over). `editor`: the
    run shares the machine with the editor's UI (one core is left to it). A package that does
    not import (accelerate, torchao, a broken CUDA build) is one ModelError line, exit 4.
    """
    try:
        return _load_model(request, notes or _log.warning, editor)
    except ImportError as exc:
        what = exc.name or "a package the model needs"
        raise ModelError(f"cannot load the model: {what} does not import ({str(exc).splitlines()[0] if str(exc) else 'ImportError'})") from None


def _load_model(request: ModelRequest, notes: Notes, editor: bool):
    import torch

    from . import families
    from .loading import embedded_model_path, load_denoiser, model_config, read_config, require_torch
    from .memory_fit import parameter_split
    from .quantize import check_quantization, int8_needs_compile

    require_torch()  # DiffusionGemma's loader too
    device = resolve_device(request.device)
    path, repo_id = resolve_model_path(request.model)
    config = read_config(path or embedded_model_path())
    route = families.route(config, request.trust_remote_code)  # which loader, decided in core from config.json
    if path is not None and route.loader == "transformers":
        denoiser = _load_gemma(request, path, config, device, notes, editor, repo_id)
        if repo_id:
            denoiser.spec = replace(denoiser.spec, name=repo_id)
        return denoiser
    native = route.loader == "backbone"
    dtype = resolve_dtype(request.dtype, device)
    try:
        if native:
            _, cfg = model_config(path or embedded_model_path(), config)
            torch.set_num_threads(cpu_threads(request, sum(parameter_split(cfg)), editor))
            if request.quantize is not None:
                check_quantization(request.quantize, torch.device(device))
            if not request.force_load:
                check_fit(cfg, request, dtype, device, repo_id or str(path or "the embedded model"))
            plan = placement_for(request, cfg, dtype, device)
            if plan is not None:
                notes("sharpen: device plan (accelerate):\n" + "\n".join(f"  {line}" for line in plan.describe().splitlines()))
                dtype = resolve_dtype(request.dtype, str(plan.main_device))
            denoiser = load_denoiser(path, device=device, dtype=dtype, device_map=plan.device_map if plan else None, quantize=request.quantize)
        else:
            denoiser = _load_remote(request, path, device, dtype)
    except (RuntimeError, ValueError) as exc:  # torch's device errors, e.g. CUDA unavailable
        raise ModelError(f"cannot load the model on {device}: {str(exc).splitlines()[0]}") from None
    if repo_id:
        denoiser.spec = replace(denoiser.spec, name=repo_id)
    if request.compile != "off":
        if hasattr(denoiser, "compile"):
            denoiser.compile(request.compile, notify=notes, progress=notes)  # progress and a fallback to eager: a note each
        elif request.compile != "auto":
            raise UsageError("--compile needs a natively supported model (not --trust-remote-code)")
    eager_int8 = int8_needs_compile(request.quantize, getattr(denoiser, "device", torch.device(device)), request.compile)
    if eager_int8:
        notes(f"sharpen: {eager_int8}")
    return denoiser


def check_fit(cfg, request: ModelRequest, dtype, device: str, name: str) -> None:
    """Refuse, before any weight is read, a load that cannot fit this machine (core/models/memory_fit.py),
    with the setting that would make it fit; --force-load skips the check."""
    from . import memory_fit
    from .placement import human

    precision = request.quantize or str(dtype).removeprefix("torch.")
    need = memory_fit.footprint(cfg, precision).total
    machine = memory_fit.this_machine()
    if device.startswith("cuda"):
        room = sum(free for _, free, _ in machine.gpus) + machine.ram_available  # accelerate offloads the rest
        where = "the GPUs and CPU memory"
    else:
        room, where = machine.ram_available, "CPU memory"
    if memory_fit.verdict(need, room) == "does not fit":
        raise ModelError(f"{name} needs {human(need)} as {precision} (weights and cache), more than the {human(room)} free in "
                         f"{where}; it fits {memory_fit.advice(cfg, machine)}; --force-load tries anyway")


def _load_remote(request: ModelRequest, path: Path, device: str, dtype):
    from . import placement
    from .remote_code import load_remote

    spec = request.max_memory
    device_map = "auto" if request.device_map == "auto" or spec else None
    return load_remote(
        path,
        trust_remote_code=True,
        device=device,
        dtype=dtype,
        mask_id=request.mask_id,
        shift_logits=request.shift_logits,
        device_map=device_map,
        max_memory=placement.parse_max_memory(spec) if spec else None,
    )


def _load_gemma(request: ModelRequest, path: Path, config: dict, device: str, notes: Notes, editor: bool, repo_id: str | None):
    """DiffusionGemma through transformers' own class (core/models/families/diffusion_gemma.py): threads, the fit check
    and placement as for the native families; accelerate spreads it when one GPU is too small."""
    import torch

    from . import memory_fit
    from .families import diffusion_gemma as gemma
    from .placement import human
    from .quantize import check_quantization

    if request.quantize is not None:
        check_quantization(request.quantize, torch.device(device))
    if request.compile not in ("off", "auto"):
        raise UsageError("--compile does not reach DiffusionGemma yet; leave it off")
    dtype = resolve_dtype(request.dtype, device)
    gemma.check_config(path, config)  # against the weights' headers, before transformers builds anything (even on meta)
    try:
        parameters = gemma.parameter_count(config)
    except (TypeError, ValueError, KeyError) as exc:
        raise ModelError(f"{path}/config.json is not a DiffusionGemma config transformers accepts: {str(exc).splitlines()[0]}") from None
    torch.set_num_threads(cpu_threads(request, parameters, editor))
    if request.quantize is None:
        need = int(parameters * torch.finfo(dtype).bits / 8)
    else:  # quantized weights plus their scales (about 1/16 more at int4); the embedding stays bfloat16
        embedding = config["text_config"].get("vocab_size", 0) * config["text_config"].get("hidden_size", 0)
        need = int((parameters - embedding) * memory_fit.BYTES[request.quantize] * 1.07 + embedding * 2)
    machine = memory_fit.this_machine()
    spread = request.device_map == "auto" or request.max_memory is not None
    if device.startswith("cuda") and not spread and need * 1.2 > machine.best_gpu_free:
        spread = True  # as for the native families: accelerate places what one GPU cannot hold
    if not request.force_load:
        room = (sum(free for _, free, _ in machine.gpus) + machine.ram_available) if device.startswith("cuda") else machine.ram_available
        if memory_fit.verdict(need, room) == "does not fit":
            name = repo_id or str(path)
            precision = request.quantize or str(dtype).removeprefix('torch.')
            raise ModelError(f"{name} needs {human(need)} as {precision}, more than the {human(room)} free here; the release "
                             "fits a 96 GB card in bfloat16, two 48 GB cards with --device-map auto, or 24 GB with --quantize int4; "
                             "--force-load tries anyway")
    max_memory = None
    if request.max_memory:
        from . import placement

        max_memory = placement.parse_max_memory(request.max_memory)
    if spread:
        notes(f"sharpen: DiffusionGemma spread over the devices by accelerate (device_map=auto{', max_memory ' + request.max_memory if max_memory else ''})")
    try:
        return gemma.load_gemma(path, device=device, dtype=dtype, device_map="auto" if spread else None, max_memory=max_memory,
                                quantize=request.quantize)
    except (RuntimeError, ValueError) as exc:
        raise ModelError(f"cannot load the model on {device}: {str(exc).splitlines()[0]}") from None
