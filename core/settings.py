"""Every setting a user can change, declared once: type, default, choices, bounds and help.

Three requests, each a frozen dataclass whose fields are the settings:

    Sampling   how the denoising loop runs        CLI --steps, --threshold, ...   TOML [sampling]
    Editing    what an edit asks of the engine    CLI --candidates, --length, ... TOML [edit]
    ModelRequest which weights, where, how        CLI --model, --device, ...      TOML [model]

The command line's flags (app/cli.py) and the config file's keys (app/config.py) are derived
from these declarations, and so is every check: adding a setting is one line here plus its
use. This module imports no torch (nor anything heavy), so `sharpen --help` and the editor's
first paint can read it, and bad values are refused before the model loads.

A value that breaks a rule raises SettingError naming the field; each front end spells the
field its own way in the message (`--top-p`, `[sampling] top_p`).
"""
from __future__ import annotations

import functools
import math
import re
import typing
from dataclasses import dataclass, field, fields, replace
from fractions import Fraction
from typing import Any, ClassVar


class SettingError(ValueError):
    """A setting's value breaks its rule: `name` is the field, `rule` what it must be."""

    def __init__(self, name: str, rule: str) -> None:
        super().__init__(f"{name} {rule}")
        self.name, self.rule = name, rule


@dataclass(frozen=True)
class Rule:
    """What one setting accepts and how it is explained (kept in the dataclass field's metadata)."""

    help: str
    choices: tuple[str, ...] | None = None
    low: float | None = None  # inclusive bound, or exclusive with low_open
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    metavar: str | None = None
    flag: bool = True  # a command-line flag exists (--name-with-dashes); False: config file only
    parse: typing.Callable[[typing.Any], object] | None = None  # a value with syntax of its own: raises ValueError(rule)

    def describe(self) -> str:
        """The rule in words, as it appears after the setting's name in an error."""
        if self.choices:
            return f"must be one of: {', '.join(self.choices)}"
        low, high = _number(self.low), _number(self.high)
        if self.high == math.inf:
            return "must be a finite number, at least 0" if self.low == 0 else f"must be a finite number above {low}"
        if self.low is not None and self.high is not None:
            if self.low_open or self.high_open:
                return f"must be in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
            return f"must be between {low} and {high}"
        if self.low is not None:
            return f"must be above {low}" if self.low_open else f"must be at least {low}"
        return "is out of range"


def _number(x: float | None) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}" if x is not None else ""


def setting(default: Any, help: str, **rule: Any):
    """A dataclass field that is a user setting."""
    return field(default=default, metadata={"rule": Rule(help, **rule)})


def rule_of(f) -> Rule:
    return f.metadata["rule"]


@functools.cache
def _hints(cls) -> dict[str, Any]:
    # Once per class: get_type_hints evaluates every string annotation (this module's
    # `from __future__ import annotations`), 0.3 ms a field, and every Sampling a server
    # request builds is checked field by field.
    return typing.get_type_hints(cls)


def value_type(cls, name: str) -> tuple[type, bool]:
    """(the value's type, whether None is allowed) from the field's annotation."""
    hint = _hints(cls)[name]
    args = typing.get_args(hint)
    if type(None) in args:
        return next(a for a in args if a is not type(None)), True
    return hint, False


def check(request) -> None:
    """Every field of `request` against its declared type and rule (SettingError on the first bad one)."""
    for f in fields(request):
        value, rule = getattr(request, f.name), rule_of(f)
        kind, optional = value_type(type(request), f.name)
        if value is None:
            if optional:
                continue
            raise SettingError(f.name, "must be set")
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if kind is bool and not isinstance(value, bool):
            raise SettingError(f.name, "must be true or false")
        if kind is int and not (is_number and isinstance(value, int)):
            raise SettingError(f.name, "must be a whole number")
        if kind is float and not is_number:
            raise SettingError(f.name, "must be a number")
        if kind is str and not isinstance(value, str):
            raise SettingError(f.name, "must be a string")
        if typing.get_origin(kind) is tuple and not (isinstance(value, tuple) and all(isinstance(v, str) for v in value)):
            raise SettingError(f.name, "must be a list of strings")
        if rule.choices and value not in rule.choices:
            raise SettingError(f.name, rule.describe())
        if rule.parse is not None:
            try:
                rule.parse(value)
            except ValueError as exc:
                raise SettingError(f.name, str(exc)) from None
        if is_number:
            # Compare before any float(): a 400-digit integer would overflow it.
            too_low = rule.low is not None and (value <= rule.low if rule.low_open else value < rule.low)
            too_high = rule.high is not None and (value >= rule.high if rule.high_open else value > rule.high)
            if too_low or too_high or (isinstance(value, float) and math.isnan(value)):
                raise SettingError(f.name, rule.describe())


class Request:
    """Base of the three requests: checked on construction; `section` names its TOML table."""

    section: ClassVar[str]

    def __post_init__(self) -> None:
        check(self)

    def updated(self, values: dict[str, Any]):
        """A copy with `values` (field -> value) applied; None values mean "not given" and are skipped."""
        # A list (a repeated flag, a TOML array, JSON) is kept as a tuple: requests stay hashable values.
        return replace(self, **{k: tuple(v) if isinstance(v, list) else v for k, v in values.items() if v is not None})


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str) -> int:
    """'20GiB', '512MB', '1000000' -> bytes (ValueError with the rule otherwise)."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"has a bad memory size {text.strip()!r} (use e.g. 20GiB, 512MB)")
    # Exact arithmetic: float() of a 400-digit number is infinity, and int(infinity) raises.
    size = int(Fraction(match.group(1)) * _UNITS[(match.group(2) or "B").lower()])
    if size > MAX_MEMORY_BYTES:
        raise ValueError(f"has a memory size beyond any machine ({text.strip()[:40]!r}; at most 1 EiB)")
    return size


_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:[0-9]{1,4})?)$")


def parse_device(text: str) -> str:
    """A device a model can run on; torch accepts more names (meta, a bare index) that cannot run a model."""
    if not _DEVICE.match(text):
        raise ValueError(f"must be auto, cpu, cuda, cuda:N or mps, not {text[:40]!r}")
    return text


MAX_MEMORY_BYTES = 2**60  # 1 EiB: beyond any machine, still an exact float and a C int64 for accelerate


def parse_max_memory(spec: str) -> dict[int | str, int]:
    """'0=20GiB,1=20GiB,cpu=64GiB' -> {0: ..., 1: ..., 'cpu': ...} (GPU indices, cpu, disk)."""
    out: dict[int | str, int] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        device, sep, size = part.partition("=")
        device = device.strip().lower().removeprefix("cuda:")
        if not sep or not (device.isdigit() or device in ("cpu", "disk")):
            raise ValueError(f"has a bad entry {part!r} (use DEVICE=SIZE with DEVICE 0, 1, ..., cpu or disk)")
        if device.isdigit() and len(device) > 4:  # an index no machine has (and past a C int for torch)
            raise ValueError(f"has a GPU index beyond any machine ({device[:20]!r})")
        out[int(device) if device.isdigit() else device] = parse_size(size)
    if not out:
        raise ValueError("is empty")
    return out


# The loop's named choices (core/loops/masked.py and kernels/ implement them).
POLICIES = ("confidence", "margin", "entropy", "random")
SCHEDULES = ("fixed", "threshold")
CACHES = ("none", "prefix", "dual")
REFRESHES = ("canvas", "block")
KERNELS = ("auto", "reference", "triton")
LENGTHS = ("fixed", "adaptive")
# How an edit reaches a block-causal model, which cannot see the text after its block: the
# release's documented form (auto), its chat template, or fill-in-the-middle tokens (core/prompted.py).
PROMPT_FORMS = ("auto", "chat", "fim")
# Models that edit their own committed tokens (LLaDA2.1, core/loops/editing.py): the release's two
# modes (quality: threshold 0.7, editing 0.5; speed: 0.5, 0.0), or no editing.
EDITING = ("quality", "speed", "off")
DTYPES = ("auto", "float32", "bfloat16", "float16")
COMPILE_MODES = ("auto", "off", "default", "reduce-overhead", "max-autotune")


# Block size when none is set, by device and model size. On a GPU a cached step costs about
# the same for 8 rows as for 32 (it reads every weight once either way; bench/gpu_ready.py), so
# fewer, bigger blocks mean fewer steps per token: models of BIG_MODEL parameters and more take
# the published settings for 7-8B models there (LLaDA's and Fast-dLLM's blocks of 32, threshold
# 0.9, whole-canvas refresh per block: each family's default_refresh). On a CPU a step's cost
# grows with its rows, and blocks of 8 measured fastest at equal accuracy and parse rate on the
# embedded model (bench/speed.py, docs/speed.md); small models keep 8 on a GPU too, the size
# they were measured at. The threshold (0.9) and refresh do not change with the device.
MASKED_THRESHOLD = 0.9  # the masked loop's parallel-commit confidence when --threshold is unset
CPU_BLOCK_SIZE = 8
GPU_BLOCK_SIZE = 32
BIG_MODEL = 1_000_000_000  # parameters


def default_block_size(device_type: str, parameters: int) -> int:
    return GPU_BLOCK_SIZE if device_type == "cuda" and parameters >= BIG_MODEL else CPU_BLOCK_SIZE


@dataclass(frozen=True)
class Sampling(Request):
    """How the denoising loop commits tokens."""

    section: ClassVar[str] = "sampling"

    steps: int | None = setting(None, "at most N denoising steps (default: up to one per token)", low=1, metavar="N")
    policy: str = setting("confidence", "which tokens commit first", choices=POLICIES)
    schedule: str = setting("threshold", "fixed quota per step, or also every token above --threshold", choices=SCHEDULES)
    # Fast-dLLM's parallel-commit confidence; lower commits more per step and breaks syntax first (README).
    # Unset: MASKED_THRESHOLD for masked models, the release's own for block-causal ones (docs/models.md).
    threshold: float | None = setting(None, "confidence for parallel commits (default: 0.9, or the release's own for block-causal models)", low=0.0, high=1.0, low_open=True, metavar="P")
    # Unset: per device and model size (default_block_size).
    block_size: int | None = setting(None, "semi-autoregressive blocks of N slots, left to right (0: one block; default: 32 for big models on a GPU, 8 elsewhere; block-causal models: the release's block length)", low=0, metavar="N")
    cache: str = setting("dual", "KV cache per block: none is exact; dual is fastest", choices=CACHES)
    # Unset: the model's own (ModelSpec.default_refresh): Fast-dLLM's whole-canvas refresh for
    # released checkpoints, whose accuracy is published; block refresh for the embedded model.
    refresh: str | None = setting(None, "cache refresh at each new block: only the finished block, or the whole canvas (Fast-dLLM; the default for released checkpoints)", choices=REFRESHES)
    kernels: str = setting("auto", "per-step kernels: auto is triton on CUDA, the torch reference elsewhere", choices=KERNELS)
    temperature: float = setting(0.0, "0 is greedy", low=0.0, high=math.inf, high_open=True, metavar="T")
    top_k: int | None = setting(None, "sample among the K likeliest tokens", low=1, metavar="K")
    top_p: float | None = setting(None, "sample within probability mass P (after temperature)", low=0.0, high=1.0, low_open=True, metavar="P")
    # torch.Generator.manual_seed takes up to 2**64 - 1.
    seed: int = setting(0, "random seed (same seed, same result)", low=0, high=2**64 - 1, metavar="S")
    # Alternatives are one batch: more would only run out of memory.
    samples: int = setting(1, "alternatives denoised together (best first)", low=1, high=64, metavar="N")
    # LLaDA's reference generate (cfg_scale): a second, unconditional pass with the prompt masked,
    # logits = un + (S + 1) * (cond - un). Families whose reference has no such knob refuse it (core/loops/guidance.py).
    cfg_scale: float = setting(0.0, "classifier-free guidance as LLaDA's reference generate does it (0: off; each step then runs the model twice); LLaDA only", low=0.0, high=math.inf, high_open=True, metavar="S")
    # LLaDA2.1's default is its quality mode; speed commits and edits more per step.
    editing: str = setting("quality", "models that edit their own tokens (LLaDA2.1): quality (0.7 / 0.5), speed (0.5 / 0.0), or off", choices=EDITING)
    # Unset: the --editing mode's (core/loops/editing.py EDIT_MODES).
    editing_threshold: float | None = setting(None, "models that edit their own tokens (LLaDA2.1): probability above which a committed token is replaced (default: the --editing mode's)", low=0.0, high=1.0, metavar="P")


@dataclass(frozen=True)
class Editing(Request):
    """What an edit asks of the engine beyond the loop: context, lengths, strength."""

    section: ClassVar[str] = "edit"

    context_tokens: int = setting(1024, "fixed context around the spans, in tokens", low=0, metavar="N")
    length: str = setting("fixed", "infill length: the slot budget, or adaptive (grow while the model fills the span)", choices=LENGTHS)
    candidates: int = setting(1, "N candidate lengths per infill span in one batch, ranked by parse validity then confidence (1: off)", low=1, high=16, metavar="N")
    strength: float = setting(0.5, "rewrite: share of the span re-noised (0: none)", low=0.0, high=1.0, metavar="F")
    # A bare cursor has no selection to size the slots by; pad/eos trims what is not used.
    infill_tokens: int = setting(32, "slots for an infill at a bare cursor", low=1, high=4096, flag=False)
    # Block-causal models (SDAR, Fast-dLLM v2) cannot see the text after a span: it reaches them
    # through the prompt (core/prompted.py). auto: the form the release documents (docs/models.md).
    prompt: str = setting("auto", "block-causal models: how the text around a span reaches them: the release's own form, its chat template, or fill-in-the-middle tokens", choices=PROMPT_FORMS)
    # Constraints on every span's text (core/constraints/), kept at every denoising step; an edit
    # list (@edits.json) may give each span its own. At most one of regex / json_schema / grammar.
    regex: str | None = setting(None, "every span's text matches this regular expression (steered at every step)", metavar="PATTERN")
    json_schema: str | None = setting(None, "every span's text is JSON that this JSON schema file accepts", metavar="FILE")
    grammar: str | None = setting(None, "every span's text is a sentence of this Lark grammar file (docs/constraints.md: the subset)", metavar="FILE")
    require: tuple[str, ...] | None = setting(None, "a word every span's text must contain (repeat the flag for more)", metavar="WORD")
    forbid: tuple[str, ...] | None = setting(None, "a word no span's text may contain (repeat the flag for more)", metavar="WORD")


@dataclass(frozen=True)
class ModelRequest(Request):
    """Which checkpoint, on which device, in which form."""

    section: ClassVar[str] = "model"

    model: str | None = setting(None, "checkpoint directory or a hub id already in the local Hugging Face cache (default: the embedded model)", metavar="M")
    device: str = setting("auto", "cpu, cuda, cuda:1, ... (auto: cuda when there is one)", metavar="DEVICE", parse=parse_device)
    dtype: str = setting("auto", "weights dtype (auto: bfloat16 on GPU, float32 on CPU)", choices=DTYPES)
    device_map: str | None = setting(None, "spread a big model over the GPUs and CPU memory (accelerate); automatic when it does not fit one GPU", choices=("auto",))
    max_memory: str | None = setting(None, "memory per device for --device-map, e.g. 0=20GiB,1=20GiB,cpu=64GiB", metavar="SPEC", parse=parse_max_memory)
    trust_remote_code: bool = setting(False, "allow checkpoints of other families to run their own Python modeling code")
    mask_id: int | None = setting(None, "mask token id, for --trust-remote-code models whose files do not say", low=0, metavar="ID")
    shift_logits: bool | None = setting(None, "whether logits at i predict token i+1, when the files do not say")
    # auto: CUDA graphs for native families on CUDA, compiled before the first edit (the eager step is
    # launch-bound there: bench/gpu_ready.py estimates 1.2-2.0x an 8B model's memory floor on an H100,
    # 14-23x a 0.5B's); eager on a CPU, where compiling costs a minute and saves about 15% (docs/speed.md).
    compile: str = setting("auto", "torch.compile the model's step: auto is reduce-overhead (CUDA graphs) on CUDA for native models, off on a CPU; canvas sizes are bucketed, so a session compiles a handful of graphs", choices=COMPILE_MODES)
    # Weight-only, on PyTorch's own kernels (core/models/quantize.py): an 8B model in about 8 GiB (int8) or 5 GiB (int4).
    quantize: str | None = setting(None, "weight-only quantization, done as the weights load: int8 or int4 (CPU, or CUDA; int4 needs sm80+)",
                                   choices=("int8", "int4"))
    # Unset: 1 thread for small models (below SMALL_MODEL parameters), where torch's per-op
    # thread start-up costs more than it saves and fights anything else on the cores (measured:
    # bench/threads.py); all cores for big ones, one left to the UI in the editor.
    threads: int | None = setting(None, "torch CPU threads (default: 1 for small models, every core for big ones; the editor leaves one to the UI)", low=1, high=1024, metavar="N")
    # The fit check (core/models/memory_fit.py) refuses a load that cannot fit this machine.
    force_load: bool = setting(False, "load even when the fit check says the model does not fit this machine")


REQUESTS = (Sampling, Editing, ModelRequest)


@dataclass(frozen=True)
class Settings:
    """One of each request: what a run (headless or in the editor) was asked to do."""

    sampling: Sampling = field(default_factory=Sampling)
    editing: Editing = field(default_factory=Editing)
    model: ModelRequest = field(default_factory=ModelRequest)

    def part(self, request_type):
        return {Sampling: self.sampling, Editing: self.editing, ModelRequest: self.model}[request_type]

    def layered(self, values: dict[str, dict[str, Any]]) -> "Settings":
        """These settings with `values` ({section: {field: value}}) on top; None means not given."""
        return Settings(*(self.part(r).updated(values.get(r.section, {})) for r in REQUESTS))
