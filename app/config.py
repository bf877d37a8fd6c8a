"""The editor's settings: a TOML file in the platform's config directory, read into a dataclass.

    # ~/.config/sharpen/config.toml  (`sharpen --print-config-path` says where)
    model = "/models/dream-coder"      # a checkpoint directory; leave out for the embedded model
    device = "auto"
    theme = "sharpen-dark"
    [sampling]
    steps = 32
    policy = "confidence"
    [keymap]
    infill = "f5"                      # binding id = key(s), comma separated

Pure data and a loader, no textual: the TUI and the tests build a Config from a file or by hand.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from ..core.errors import UsageError

APP_NAME = "sharpen"
POLICIES = ("confidence", "margin", "entropy", "random")
SCHEDULES = ("fixed", "threshold")
# The engine's names, repeated here because importing core.engine or core.sampler imports torch.
LENGTHS = ("fixed", "adaptive")
CACHES = ("none", "prefix", "dual")
REFRESHES = ("canvas", "block")
KERNELS = ("auto", "reference", "triton")
DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class Sampling:
    """How the engine denoises in the editor (the same knobs as the CLI's --steps, --policy, ...)."""

    steps: int | None = None  # at most this many steps; None: up to one per token
    policy: str = "confidence"  # which tokens commit first
    schedule: str = "threshold"  # fixed quota per step, or also every token above `threshold`
    threshold: float = 0.9  # Fast-dLLM's parallel-commit confidence
    block_size: int = 8  # semi-autoregressive blocks of slots, left to right; 0: one block over every slot
    temperature: float = 0.0  # 0 is greedy
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0
    samples: int = 1  # > 1: alternatives to cycle with Alt+] / Alt+[
    context_tokens: int = 1024  # text around the spans the model sees
    length: str = "fixed"  # infill length: the slot budget, or "adaptive" (grow while a span fills up)
    candidates: int = 1  # > 1: that many infill lengths in one batch, ranked by parse then confidence
    cache: str = "dual"  # KV cache per block: none is exact, dual the fastest
    refresh: str = "block"  # cache refresh at each new block: block (the finished one only) or canvas (whole, Fast-dLLM)
    kernels: str = "auto"  # per-step kernels: triton on CUDA, the torch reference elsewhere

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; known: {', '.join(POLICIES)}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r}; known: {', '.join(SCHEDULES)}")
        for name, value, known in (("length", self.length, LENGTHS), ("cache", self.cache, CACHES), ("refresh", self.refresh, REFRESHES), ("kernels", self.kernels, KERNELS)):
            if value not in known:
                raise ValueError(f"unknown {name} {value!r}; known: {', '.join(known)}")
        if not 1 <= self.candidates <= 16:
            raise ValueError("candidates must be between 1 and 16")
        if self.block_size < 0:
            raise ValueError("block_size must be at least 0 (0: one block)")
        if self.steps is not None and self.steps < 1:
            raise ValueError("steps must be at least 1")
        if self.samples < 1:
            raise ValueError("samples must be at least 1")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError("threshold must be in (0, 1]")


@dataclass(frozen=True)
class Config:
    model: str | None = None  # checkpoint directory; None: the embedded model
    device: str = "auto"  # auto, cpu, cuda, cuda:1, ...
    dtype: str = "auto"  # weights: bfloat16 on GPU, float32 on CPU, unless set
    theme: str = "sharpen-dark"  # a shipped theme or one in <config dir>/themes
    infill_tokens: int = 32  # slot budget for an infill at a bare cursor (pad/eos trims it)
    rewrite_strength: float = 0.5  # share of a selection a rewrite re-noises
    soft_wrap: bool = False
    frame_rate: int = 30  # preview redraws per second at most; frames in between are skipped
    min_step_ms: int = 0  # pace fast models so each step stays visible this long (0: never wait)
    sampling: Sampling = field(default_factory=Sampling)
    keymap: dict[str, str] = field(default_factory=dict)  # binding id -> keys

    def __post_init__(self) -> None:
        if not 0.0 < self.rewrite_strength <= 1.0:
            raise ValueError("rewrite_strength must be in (0, 1]")
        if not 1 <= self.infill_tokens <= 4096:
            raise ValueError("infill_tokens must be between 1 and 4096")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; known: {', '.join(DTYPES)}")
        if self.frame_rate < 1:
            raise ValueError("frame_rate must be at least 1")
        if self.min_step_ms < 0:
            raise ValueError("min_step_ms must be 0 or more")


def config_dir() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir(APP_NAME, appauthor=False))


def default_config_path() -> Path:
    return config_dir() / "config.toml"


def user_themes_dir(config_path: Path | None = None) -> Path:
    """Themes live beside the config file (so `--config` also moves them)."""
    return (config_path.parent if config_path else config_dir()) / "themes"


def _build(cls, table: dict, where: str):
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise UsageError(f"{where}: unknown setting {unknown[0]!r}; known: {', '.join(sorted(known))}")
    try:
        return cls(**table)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{where}: {exc}") from None


def parse_config(text: str, where: str = "config") -> Config:
    """TOML text -> Config; every error names the file and what is wrong."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{where}: {exc}") from None
    sampling = data.pop("sampling", {})
    keymap = data.pop("keymap", {})
    if not isinstance(sampling, dict) or not isinstance(keymap, dict):
        raise UsageError(f"{where}: [sampling] and [keymap] must be tables")
    bad_keys = [k for k, v in keymap.items() if not isinstance(v, str)]
    if bad_keys:
        raise UsageError(f"{where}: keymap.{bad_keys[0]} must be a string of keys, e.g. \"f5\" or \"alt+i,f5\"")
    return _build(Config, {**data, "sampling": _build(Sampling, sampling, f"{where} [sampling]"), "keymap": keymap}, where)


def load_config(path: Path | None = None) -> Config:
    """Read the config file; a missing default file means defaults, a missing --config is an error."""
    explicit = path is not None
    path = path or default_config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if explicit:
            raise UsageError(f"config file not found: {path}") from None
        return Config()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read config {path}: {exc}") from None
    return parse_config(text, str(path))


# Command-line options that override the config when given (argparse dest -> where it goes).
_TOP_LEVEL_OPTIONS = ("model", "device", "dtype", "theme")
_SAMPLING_OPTIONS = ("steps", "policy", "schedule", "threshold", "block_size", "temperature", "top_k", "top_p", "seed",
                     "samples", "context_tokens", "length", "candidates", "cache", "refresh", "kernels")


def merge_args(config: Config, args, defaults: dict) -> Config:
    """Options typed on the command line win over the config; argparse defaults do not."""

    def given(name: str) -> bool:
        return hasattr(args, name) and getattr(args, name) != defaults.get(name)

    top = {name: getattr(args, name) for name in _TOP_LEVEL_OPTIONS if given(name)}
    sampling = {name: getattr(args, name) for name in _SAMPLING_OPTIONS if given(name)}
    try:
        return replace(config, **top, sampling=replace(config.sampling, **sampling))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
