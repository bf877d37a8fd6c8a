"""Models bigger than one GPU: a device plan from accelerate, then dispatch with hooks.

The plan maps backbone modules (`embed`, `layers.3`, `norm`, `output`) to a GPU index,
"cpu" (offloaded: kept in host memory, run on the main GPU) or "disk". A block is never
split across devices. The denoiser's tensors live on the embedding's device (the main
device); accelerate's hooks move activations between devices, and each layer's KV cache
is allocated where that layer runs, so in-place cache writes stay in place.
"""
from __future__ import annotations

import logging
import re
import shutil
import tempfile
import weakref
from dataclasses import dataclass

import torch

from ..errors import ModelError
from .model import ModelConfig, Transformer, on_meta_device
from ..settings import parse_max_memory, parse_size  # noqa: F401  (the placement API: sizes as users write them)

log = logging.getLogger(__name__)

NO_SPLIT = ["Block"]  # a transformer block stays on one device
def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GiB"


@dataclass(frozen=True)
class DevicePlan:
    device_map: dict[str, int | str]  # module name -> GPU index, "cpu" or "disk"
    sizes: dict[str, int]  # module name -> bytes at the load dtype

    @property
    def main_device(self) -> torch.device:
        """The embedding's device: the denoiser keeps its canvas and sampler tensors there."""
        where = self.device_map.get("embed", self.device_map.get(""))
        return torch.device(f"cuda:{where}") if isinstance(where, int) else torch.device("cpu")

    def _where(self, module: str) -> int | str | None:
        name = module
        while name not in self.device_map and "." in name:
            name = name.rsplit(".", 1)[0]
        return self.device_map.get(name, self.device_map.get(""))

    def execution_device(self, module: str) -> torch.device:
        """Where a module's computation runs: its GPU, or the main device when offloaded."""
        where = self._where(module)
        return torch.device(f"cuda:{where}") if isinstance(where, int) else self.main_device

    def storage_device(self, module: str) -> torch.device:
        """Where a module's weights are put at load: its GPU, else host memory ("disk" too:
        accelerate writes those out from there when it dispatches)."""
        where = self._where(module)
        return torch.device(f"cuda:{where}") if isinstance(where, int) else torch.device("cpu")

    def describe(self) -> str:
        """One line per device: which modules, how many bytes; offloaded ones say so."""
        groups: dict[int | str, list[str]] = {}
        for module, where in self.device_map.items():
            groups.setdefault(where, []).append(module or "(whole model)")
        lines = []
        for where in sorted(groups, key=lambda d: (not isinstance(d, int), str(d))):
            modules = groups[where]
            size = sum(self.sizes.get(m if m != "(whole model)" else "", 0) for m in modules)
            label = f"cuda:{where}" if isinstance(where, int) else where
            note = " (offloaded, runs on the main GPU)" if where in ("cpu", "disk") and self.main_device.type == "cuda" else ""
            lines.append(f"{label}: {_compact(modules)} = {human(size)}{note}")
        return "\n".join(lines)


def _compact(modules: list[str]) -> str:
    """['embed', 'layers.0', 'layers.1', 'layers.2', 'norm'] -> 'embed, layers.0-2, norm'."""
    out, run = [], []
    for name in modules + [""]:
        m = re.fullmatch(r"layers\.(\d+)", name)
        if m and (not run or int(m.group(1)) == run[-1] + 1):
            run.append(int(m.group(1)))
            continue
        if run:
            out.append(f"layers.{run[0]}" + (f"-{run[-1]}" if len(run) > 1 else ""))
            run = []
        if m:
            run = [int(m.group(1))]
        elif name:
            out.append(name)
    return ", ".join(out)


def normalise(device_map: dict[str, int | str], cfg: ModelConfig) -> dict[str, int | str]:
    """One entry per top-level module and per block, the embedding never offloaded.

    accelerate may answer {"": "disk"} or {"layers": 1}; the sampler's tensors live on the
    embedding's device, so the embedding (and a head tied to it) goes to the first GPU of
    the plan, or stays on the CPU when there is none.
    """
    modules = ["embed", *(f"layers.{i}" for i in range(cfg.n_layers)), "norm", "output"]
    out: dict[str, int | str] = {}
    for module in modules:
        name = module
        while name not in device_map and name:
            name = name.rsplit(".", 1)[0] if "." in name else ""
        if name not in device_map:
            raise ModelError(f"the device map places no device for {module}")
        out[module] = device_map[name]
    gpus = sorted(d for d in out.values() if isinstance(d, int))
    if not isinstance(out["embed"], int):
        out["embed"] = gpus[0] if gpus else "cpu"
    if cfg.tie_embeddings:
        out["output"] = out["embed"]
    return out


def available_memory(reserve: float = 0.9) -> dict[int | str, int]:
    """Free memory per GPU (a share kept for activations) and the host's available RAM."""
    out: dict[int | str, int] = {}
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            free, _ = torch.cuda.mem_get_info(i)
            out[i] = int(free * reserve)
    out["cpu"] = int(host_available_bytes() * reserve)
    return out


def host_available_bytes() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        import os

        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def meta_backbone(cfg: ModelConfig, quantize: str | None = None, device: torch.device | None = None) -> Transformer:
    """The backbone on the meta device, its linears quantized as the loader would quantize them
    for `device`, so that accelerate sizes what will be loaded, not the float model."""
    with on_meta_device():
        model = Transformer(cfg)
        if quantize is not None:
            from .quantize import quantized_linear

            kernel = "cuda" if device is not None and device.type == "cuda" else "cpu"
            for name, linear in list(model.named_modules()):
                if isinstance(linear, torch.nn.Linear):
                    q = quantized_linear(quantize, linear, model.embed.weight.dtype, "meta", kernel)
                    if q is not None:
                        parent, _, leaf = name.rpartition(".")
                        setattr(model.get_submodule(parent), leaf, q)
    return model


def plan(cfg: ModelConfig, dtype: torch.dtype, max_memory: dict[int | str, int] | None = None, quantize: str | None = None) -> DevicePlan:
    """accelerate's `device_map="auto"` for the backbone of `cfg` under `max_memory`, sized as
    loaded: at `dtype`, its linears quantized when `quantize` says so."""
    from accelerate import infer_auto_device_map
    from accelerate.utils import compute_module_sizes

    max_memory = dict(max_memory) if max_memory is not None else available_memory()
    gpu = torch.device("cuda") if any(isinstance(d, int) for d in max_memory) else None
    model = meta_backbone(cfg, quantize, gpu)
    device_map = infer_auto_device_map(model, max_memory=max_memory, no_split_module_classes=NO_SPLIT, dtype=dtype)
    sizes = dict(compute_module_sizes(model, dtype=dtype))
    return DevicePlan(normalise(device_map, cfg), sizes)


def fits_one_device(cfg: ModelConfig, dtype: torch.dtype, free_bytes: int, headroom: float = 1.2, quantize: str | None = None) -> bool:
    """Whether the weights (plus a share for activations and caches) fit in `free_bytes`."""
    from accelerate.utils import compute_module_sizes

    model = meta_backbone(cfg, quantize, torch.device("cuda"))
    return compute_module_sizes(model, dtype=dtype)[""] * headroom <= free_bytes


def dispatch(model: Transformer, device_map: dict[str, int | str]) -> Transformer:
    """Spread a loaded `model` (each module's tensors already on its storage device, see
    DevicePlan.storage_device) over `device_map`'s devices with accelerate's hooks."""
    from accelerate import dispatch_model

    device_map = normalise(device_map, model.cfg)
    sizes: dict[str, int] = {}
    for key, tensor in model.named_parameters():  # a tied head counted once
        module = _module_of(device_map, key)
        sizes[module] = sizes.get(module, 0) + tensor.nbytes
    plan_ = DevicePlan(dict(device_map), sizes)
    main = plan_.main_device
    main_arg = "cpu" if main.type == "cpu" else main  # accelerate compares with the string "cpu"
    cfg = model.cfg
    offload_dir = tempfile.mkdtemp(prefix="sharpen-offload-") if "disk" in device_map.values() else None
    # accelerate warns that offloaded parameters sit on the meta device: the plan above already says
    # where each module lives, and stderr is the user's (a stray line per run).
    accelerate_log = logging.getLogger("accelerate.big_modeling")
    level = accelerate_log.level
    accelerate_log.setLevel(logging.ERROR)
    try:
        model = dispatch_model(model, device_map=dict(device_map), main_device=main_arg, offload_dir=offload_dir)
    except (RuntimeError, ValueError) as exc:
        if offload_dir is not None:
            shutil.rmtree(offload_dir, ignore_errors=True)
        raise ModelError(f"cannot place the model on {sorted(set(map(str, device_map.values())))}: {str(exc).splitlines()[0]}") from None
    finally:
        accelerate_log.setLevel(level)
    if offload_dir is not None:
        # accelerate re-opens the offloaded weights' files at every pass, so they live as long as the
        # model; then (or at exit) they go: a model's worth of gigabytes per run was left in $TMPDIR.
        weakref.finalize(model, shutil.rmtree, offload_dir, ignore_errors=True)
    # Each layer's cache lives where the layer runs, and the denoiser calls `hidden` /
    # `project` rather than forward (which accelerate's top-level hook covers): the
    # backbone reads both from these two attributes.
    model.layer_devices = [plan_.execution_device(f"layers.{i}") for i in range(cfg.n_layers)]
    model.output_device = main
    log.info("device plan:\n%s", plan_.describe())
    return model


def _module_of(device_map: dict[str, int | str], key: str) -> str:
    """The device_map entry that holds parameter `key` ('' is the whole model)."""
    name = key
    while name and name not in device_map:
        name = name.rsplit(".", 1)[0] if "." in name else ""
    if name not in device_map:
        raise ModelError(f"the device map places no module holding {key}")
    return name
