"""DiffusionGemma: random-token block diffusion, run through transformers' own model class.

Google's DiffusionGemma is an encoder-decoder: a causal encoder reads the context once and
keeps its keys and values; a bidirectional decoder refines a canvas (256 tokens in the
release) against that cache, fed its own previous logits (self-conditioning). Its canvas
starts from random tokens, not masks. transformers implements the model natively
(`model_type: diffusion_gemma`), so it loads without remote code; sharpen drives it step by
step (core/loops/random_token.py) instead of calling the opaque `generate`, so every step is a frame.

`GemmaDenoiser` holds the model and answers the two calls the loop makes: `encode` (the
context, once) and `canvas_logits` (one decoder pass). Its `schedule` comes from the
checkpoint's generation_config.json, with transformers' own defaults where it is silent.
Concurrent runs share passes (core/batch.py): `encode_pass`, `canvas_pass` and `run_passes` are
the batcher's hooks, the packed forward itself is diffusion_gemma_packed.py.
"""
from __future__ import annotations

import contextlib
import logging
import math
import re
import threading
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path

import torch

from ..denoiser import ModelSpec, check_finite
from .diffusion_gemma_packed import Context, EncodePass, canvas_pass, encode_pass, layers_shared, run_alone, run_packed
from ...errors import ModelError
from .hf import read_generation_config, read_tokenizer_config
from ...tokenizer import Tokenizer

log = logging.getLogger(__name__)

FAMILY = "diffusion_gemma"
MODEL_TYPES = ("diffusion_gemma",)
NEEDS_TRANSFORMERS = "5.24"  # the release whose loop core/loops/random_token.py follows step for step (5.24 renamed past_key_values to cache)
END_NAMES = ("<turn|>", "<end_of_turn>", "<eos>")  # tokens that end the model's answer (Gemma 4, Gemma 3, both)
PLACEHOLDER_NAMES = ("<mask>",)  # a layout placeholder for the slots; the model never sees it


@contextlib.contextmanager
def quiet_imports():
    """transformers imports torchao when it is installed, and torchao logs on stderr about CUDA
    kernels a CPU machine lacks (and torch about an enum it registers); transformers logs its
    loading notes. None of it is news to the user, and stderr is the user's."""
    loggers = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree", "transformers")]
    levels = [one.level for one in loggers]
    for one in loggers:
        one.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for one, level in zip(loggers, levels):
            one.setLevel(level)


def is_diffusion_gemma(config: dict) -> bool:
    return config.get("model_type") in MODEL_TYPES


@dataclass(frozen=True)
class Schedule:
    """The diffusion settings of generation_config.json (transformers' defaults where it is silent)."""

    max_steps: int = 48  # max_denoising_steps
    entropy_bound: float = 0.1  # sampler_config.entropy_bound: how much joint entropy a step may accept
    t_min: float = 0.4  # temperature at the last step
    t_max: float = 0.8  # temperature at the first step
    stability: int = 1  # stability_threshold: steps the argmax canvas must repeat to stop early
    confidence: float = 0.005  # confidence_threshold: mean entropy below which a stable canvas stops

    def temperature(self, steps_left: torch.Tensor, max_steps: int) -> torch.Tensor:
        """The linear schedule, computed as transformers computes it (an int32 step tensor, so
        the division rounds the same and sampling matches its `generate` bit for bit)."""
        return self.t_min + (self.t_max - self.t_min) * (steps_left / max_steps)


# A step bound far above the release's 48: a stop rule that never fires must still end in minutes, not days.
MAX_DENOISING_STEPS = 4096


def _number(value, whole: bool = False) -> bool:
    kinds = (int,) if whole else (int, float)
    return isinstance(value, kinds) and not isinstance(value, bool) and math.isfinite(value)


# Schedule field -> the key generation_config.json spells it with (errors name the file's key).
FILE_KEYS = {"max_steps": "max_denoising_steps", "entropy_bound": "sampler_config.entropy_bound",
             "stability": "stability_threshold", "confidence": "confidence_threshold"}


def read_schedule(generation_config: dict) -> Schedule:
    """generation_config.json's diffusion keys over transformers' defaults; each checked for type and range."""
    default = Schedule()
    sampler = generation_config.get("sampler_config") or {}
    values = {
        "max_steps": generation_config.get("max_denoising_steps"),
        "entropy_bound": sampler.get("entropy_bound") if isinstance(sampler, dict) else None,
        "t_min": generation_config.get("t_min"),
        "t_max": generation_config.get("t_max"),
        "stability": generation_config.get("stability_threshold"),
        "confidence": generation_config.get("confidence_threshold"),
    }
    chosen = {k: (v if v is not None else getattr(default, k)) for k, v in values.items()}
    for key, value in chosen.items():
        if not _number(value, whole=key in ("max_steps", "stability")):
            raise ModelError(f"generation_config.json: {FILE_KEYS.get(key, key)} is {value!r}, not a "
                             f"{'whole ' if key in ('max_steps', 'stability') else ''}number")
    schedule = Schedule(**chosen)
    if not (0 < schedule.max_steps <= MAX_DENOISING_STEPS and 0 < schedule.entropy_bound <= 1e6 and 0 <= schedule.t_min < schedule.t_max <= 1e3
            and 0 <= schedule.stability <= MAX_DENOISING_STEPS and 0 < schedule.confidence <= 1e6):
        raise ModelError(f"generation_config.json has diffusion settings sharpen cannot use: {schedule} "
                         f"(steps and stability 0..{MAX_DENOISING_STEPS}, 0 <= t_min < t_max <= 1000, bounds and confidence in (0, 1e6])")
    return schedule


class GemmaDenoiser:
    """A DiffusionGemmaForBlockDiffusion seen through what core/loops/random_token.py needs (NoiseDenoiserLike)."""

    supports_cache = False  # the masked loop's partial-canvas cache does not apply

    def __init__(self, model: torch.nn.Module, tokenizer: Tokenizer, spec: ModelSpec, schedule: Schedule) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.spec = spec
        self.schedule = schedule
        self.vocab_size = model.config.text_config.vocab_size
        self.canvas_length = model.config.canvas_length
        self.bos_id = model.config.text_config.bos_token_id
        self.passes = 0  # decoder passes so far, a run's step each, packed or not (measured in tests and bench/)
        self._counting = threading.Lock()  # packs of concurrent runs may run side by side (core/batch.py)
        self._check_finite = True  # the first decoder pass after each encode is checked
        # Rows one packed decoder pass holds (core/batch.py): four whole canvases. Every step is a whole
        # canvas, and packing them pays (the expert loop and the weight reads run once for the pack):
        # on the tiny fixture four 256-row canvases packed take 0.60x the four alone, four 48-row 0.32x.
        self.rows_per_pass = 4 * self.canvas_length

    @property
    def device(self) -> torch.device:
        return self.model.model.decoder.embed_tokens.weight.device

    @property
    def max_len(self) -> int:
        return self.model.config.text_config.max_position_embeddings

    @cached_property
    def banned_ids(self) -> torch.Tensor:
        """Sampling bans nothing (the reference does not); these ids are dropped from the text a run
        writes (core/engine.py): special tokens other than the ends, control bytes, padded rows."""
        from ..denoiser import banned_token_ids

        return banned_token_ids(self.tokenizer, self.spec, self.vocab_size).to(self.device)

    @property
    def embedding_dtype(self) -> torch.dtype:
        return self.model.model.decoder.embed_tokens.weight.dtype

    def encode(self, ids: torch.Tensor, canvas_length: int) -> Context:
        """One encoder pass over `ids` [B, L]; the cache the decoder reads for every step."""
        self._check_finite = True  # a new run
        return self.run_passes([encode_pass(ids, canvas_length)])[0]

    def canvas_logits(self, canvas: torch.Tensor, self_conditioning: torch.Tensor | None, context: Context) -> torch.Tensor:
        """One decoder pass: canvas [B, C] (+ the previous step's logits) -> logits [B, C, V] float32."""
        logits = self.run_passes([canvas_pass(canvas, self_conditioning, context)])[0]
        if self._check_finite:  # one host read per run: NaN logits would otherwise fail inside torch.multinomial
            self._check_finite = False
            check_finite(logits)
        return logits

    # Continuous batching (core/batch.py): a run's view hands `encode_pass` and `canvas_pass` to the
    # batcher, which runs a pack of them by `run_passes`.

    @property
    def packs(self) -> bool:
        """Whether concurrent runs may share passes (core.batch.batchable): the model on one device
        (int8 experts too: packed equal to alone, tests/test_batching_random.py). A model spread by
        device_map moves its rows between devices layer by layer: one run at a time."""
        devices = set((getattr(self.model, "hf_device_map", None) or {}).values())
        return len(devices) <= 1

    def encode_pass(self, ids: torch.Tensor, canvas_length: int) -> EncodePass:
        return encode_pass(ids, canvas_length)

    def canvas_pass(self, canvas: torch.Tensor, self_conditioning: torch.Tensor | None, context: Context):
        return canvas_pass(canvas, self_conditioning, context)

    def run_passes(self, passes: list) -> list:
        """Each pass's result (an encoder pass's Context, a decoder pass's logits [B, C, V] float32):
        one pass is the model's own call, several one packed forward (diffusion_gemma_packed.py)."""
        with self._counting:
            self.passes += sum(not isinstance(p, EncodePass) for p in passes)
        if not self.layers_shared:  # encoder rows cannot ride the decoder's layers: its passes run alone
            done = {id(p): run_alone(self.model, p) for p in passes if isinstance(p, EncodePass)}
            steps = [p for p in passes if not isinstance(p, EncodePass)]
            done |= dict(zip(map(id, steps), run_packed(self.model, steps) if len(steps) > 1 else map(partial(run_alone, self.model), steps)))
            return [done[id(p)] for p in passes]
        return run_packed(self.model, passes) if len(passes) > 1 else [run_alone(self.model, passes[0])]

    @cached_property
    def layers_shared(self) -> bool:
        """Whether a pack may run encoder rows through the decoder's layers (diffusion_gemma_packed.layers_shared)."""
        return layers_shared(self.model)


def _transformers_class(name: str):
    """A DiffusionGemma class from transformers, or one line saying which release is needed: an
    older one either lacks the family or takes its cache under another keyword."""
    import transformers

    installed = tuple(int(part) for part in transformers.__version__.split(".")[:2] if part.isdigit())
    needed = tuple(int(part) for part in NEEDS_TRANSFORMERS.split("."))
    if installed < needed:
        raise ModelError(f"DiffusionGemma needs transformers {NEEDS_TRANSFORMERS} or newer (installed: "
                         f"{transformers.__version__}): pip install -U transformers")
    with quiet_imports():
        return getattr(transformers, name)


def _token(tokenizer: Tokenizer, names: tuple[str, ...]) -> int | None:
    for name in names:
        if (found := tokenizer.token_id(name)) is not None:
            return found
    return None


def _ids(value) -> list[int]:
    """An id or a list of ids from a config; anything else (a string, a float, a bool) is one line."""
    values = [] if value is None else value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise ModelError(f"a token id in the checkpoint's config is {value!r}, not a whole number or a list of them")
    return list(values)


def check_pad_ids(where: str, found: dict, prefix: str = "") -> None:
    """A pad is one token. Ends may be a list (generation_config.json's eos_token_id is), a pad
    may not: a list there is a file that lies, refused in one line rather than read as its first id."""
    value = found.get("pad_token_id")
    if isinstance(value, list):
        raise ModelError(f"{where}: {prefix}pad_token_id={value!r} must be one token id, not a list")


def gemma_spec(path: Path, config: dict, tokenizer: Tokenizer, generation: dict) -> ModelSpec:
    """Special ids from the files: end tokens from generation_config.json and config.json, the
    end-of-turn token the chat template closes an answer with, the template itself."""
    text = config.get("text_config") or {}
    check_pad_ids(f"{path}/generation_config.json", generation)
    vocab = int(text.get("vocab_size", tokenizer.vocab_size))
    ends = _ids(generation.get("eos_token_id")) or _ids(text.get("eos_token_id"))
    turn_end = _token(tokenizer, END_NAMES)
    pad = generation.get("pad_token_id", text.get("pad_token_id"))
    pad = _ids(pad)[0] if _ids(pad) else None
    placeholder = _token(tokenizer, PLACEHOLDER_NAMES)
    if placeholder is None or placeholder in (pad, *ends):
        placeholder = vocab - 1
    template = read_tokenizer_config(path).get("chat_template")
    others = tuple(i for i in dict.fromkeys([*ends, *([turn_end] if turn_end is not None else [])]) if i != pad)
    return ModelSpec(
        family=FAMILY,
        mask_id=placeholder,
        pad_id=int(pad) if pad is not None else None,
        eos_id=ends[0] if ends else None,
        chat_template=template if isinstance(template, str) else None,
        name=config.get("name", path.name),
        other_end_ids=others,
        loop="random-token",  # the canvas starts from random tokens (core/loops/random_token.py), not masks
    )


# text_config sizes far beyond the release (26B-A4B: 30 layers, hidden 2816, vocab 262144), far below
# what would exhaust a machine before a weight is read; the canvas at most the positions the model has.
LIMITS = {"num_hidden_layers": 1024, "hidden_size": 65536, "intermediate_size": 1 << 20, "num_attention_heads": 1024,
          "vocab_size": 1 << 22, "max_position_embeddings": 1 << 24}
LAYER_KEY = re.compile(r"model\.decoder\.layers\.(\d+)\.")
EMBEDDING_KEY = "model.decoder.embed_tokens.weight"
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2")  # safetensors names a weight may be stored in
SAFETENSORS_DTYPES = (*FLOAT_DTYPES, "I64", "I32", "I16", "I8", "U8", "BOOL")  # what a header may name at all


def check_config(path: Path, config: dict) -> None:
    """config.json against what a DiffusionGemma can be and against its weights' headers, before
    transformers builds anything: a layer count or hidden size the weights do not have, a canvas
    of 0 tokens, sizes no machine could build. As the native families are checked (core/models/loading.py)."""
    from .. import untrusted
    from ..loading import weight_files

    text = config.get("text_config")
    if not isinstance(text, dict):
        raise ModelError(f"{path}/config.json has no text_config; it is not a DiffusionGemma release")
    untrusted.check_numbers(config, f"{path}/config.json")
    check_pad_ids(f"{path}/config.json", config)
    check_pad_ids(f"{path}/config.json", text, "text_config.")
    for key, limit in LIMITS.items():
        value = text.get(key)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= limit):
            raise ModelError(f"{path}/config.json: text_config.{key}={value!r} must be a whole number from 1 to {limit}")
    for key in ("dtype", "torch_dtype"):  # transformers looks the name up on torch
        if key in config and config[key] not in (None, "auto", "float32", "bfloat16", "float16", "float64"):
            raise ModelError(f"{path}/config.json: {key}={config[key]!r} is not a dtype (float32, bfloat16, float16)")
    canvas = config.get("canvas_length", 1)
    if not (isinstance(canvas, int) and not isinstance(canvas, bool) and 1 <= canvas <= LIMITS["max_position_embeddings"]):
        raise ModelError(f"{path}/config.json: canvas_length={canvas!r} must be a whole number of at least 1")
    for key, value in text.items():  # ids, counts, windows: whole numbers a C int64 (and torch) can take
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value < 2**31:
            raise ModelError(f"{path}/config.json: text_config.{key}={value} is out of range")
    vocab = text.get("vocab_size")
    for key in [k for k in text if k.endswith("_token_id")]:
        ids = text[key] if isinstance(text[key], list) else [text[key]]
        if isinstance(vocab, int) and any(isinstance(i, int) and not 0 <= i < vocab for i in ids):
            raise ModelError(f"{path}/config.json: text_config.{key}={text[key]!r} is outside the vocabulary of {vocab}")
    for key in ("num_key_value_heads", "sliding_window", "top_k_experts", "num_experts"):
        if isinstance(text.get(key), int) and text[key] < 1:
            raise ModelError(f"{path}/config.json: text_config.{key}={text[key]} must be at least 1")
    experts, top_k = text.get("num_experts"), text.get("top_k_experts")
    if isinstance(experts, int) and (top_k is None or (isinstance(top_k, int) and top_k > experts)):
        raise ModelError(f"{path}/config.json: text_config.top_k_experts={top_k!r} must be from 1 to num_experts={experts}")
    if not isinstance(text.get("per_layer_config", {}), (dict, type(None))):
        raise ModelError(f"{path}/config.json: text_config.per_layer_config must be an object")
    layers, types = text.get("num_hidden_layers"), text.get("layer_types")
    if isinstance(types, list) and layers is not None and len(types) != layers:
        raise ModelError(f"{path}/config.json: num_hidden_layers is {layers} but layer_types names {len(types)} layers")
    _check_with_transformers(path, config)
    shapes: dict[str, tuple[int, ...]] = {}
    for file in weight_files(path):
        for name, entry in untrusted.safetensors_header(file, SAFETENSORS_DTYPES).items():
            if name == "__metadata__":
                continue
            if entry["dtype"] not in FLOAT_DTYPES:  # every tensor of the release is floating: F32 bytes declared I32 would load as integers
                raise ModelError(f"weights file {file.name}: tensor {name} is stored as {entry['dtype']}, not a floating-point weight")
            shapes[name] = tuple(entry["shape"])
    found = {int(m.group(1)) for key in shapes if (m := LAYER_KEY.match(key))}
    if layers is not None and found and max(found) + 1 != layers:
        raise ModelError(f"{path}/config.json says {layers} layers, but the weights hold {max(found) + 1}")
    vocab, hidden = text.get("vocab_size"), text.get("hidden_size")
    if EMBEDDING_KEY in shapes and vocab is not None and hidden is not None and shapes[EMBEDDING_KEY] != (vocab, hidden):
        raise ModelError(f"{path}/config.json says a {vocab} x {hidden} embedding, but the weights hold {shapes[EMBEDDING_KEY]}")


def load_gemma(path: Path, device: str = "cpu", dtype: torch.dtype | None = None, device_map=None, max_memory=None,
               quantize: str | None = None) -> GemmaDenoiser:
    """Load a DiffusionGemma checkpoint directory through transformers' own class.

    `quantize` ("int8" | "int4"): torchao weight-only, the experts' 3-D weights included
    (core/models/quantize.py); the experts then run one by one, as torchao's tensors need."""
    DiffusionGemmaForBlockDiffusion = _transformers_class("DiffusionGemmaForBlockDiffusion")
    from ..loading import read_config
    from ..untrusted import check_directory

    config = read_config(path)  # regular, bounded, finite (core/models/untrusted.py)
    check_config(path, config)
    check_directory(path)  # transformers opens the files itself: no FIFO or device among them
    tokenizer = Tokenizer.from_directory(path)  # a ModelError naming what is missing
    vocab = config["text_config"].get("vocab_size")
    if isinstance(vocab, int) and tokenizer.vocab_size > vocab:
        raise ModelError(f"the tokenizer of {path} has {tokenizer.vocab_size} tokens, more than the model's {vocab}-row embedding")
    generation = read_generation_config(path)
    spec = gemma_spec(path, config, tokenizer, generation)
    schedule = read_schedule(generation)
    kwargs = {"dtype": dtype or torch.float32}
    if quantize is not None:
        kwargs["experts_implementation"] = "eager"
    if device_map is not None:
        kwargs["device_map"] = device_map
        if max_memory:
            kwargs["max_memory"] = max_memory
    try:
        with quiet_imports():
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # its loading bar is not the user's business
            model = DiffusionGemmaForBlockDiffusion.from_pretrained(str(path), local_files_only=True, **kwargs)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"cannot load DiffusionGemma from {path}: {str(exc).splitlines()[0]}") from None
    if device_map is None:
        model = model.to(device)
    if quantize is not None:
        from ..quantize import quantize_experts_model

        try:
            quantize_experts_model(model, quantize)
        except (NotImplementedError, RuntimeError, ValueError) as exc:
            raise ModelError(f"cannot quantize DiffusionGemma to {quantize} here: {str(exc).splitlines()[0]}") from None
    spec.check(model.config.text_config.vocab_size)
    log.info("loaded DiffusionGemma from %s (%s, %s)", path, device_map or device, kwargs["dtype"])
    return GemmaDenoiser(model, tokenizer, spec, schedule)


_NOT_CONFIG_ARGUMENTS = ("architectures", "transformers_version", "dtype", "torch_dtype", "model_type")


def _check_with_transformers(path: Path, config: dict) -> None:
    """transformers' own validation of the config (types of every field), as one line: its strict
    dataclasses raise their own error classes, not TypeError or ValueError."""
    DiffusionGemmaConfig = _transformers_class("DiffusionGemmaConfig")
    try:
        DiffusionGemmaConfig(**{k: v for k, v in config.items() if k not in _NOT_CONFIG_ARGUMENTS})
    except Exception as exc:  # whatever the library's validation raises is the config's fault
        raise ModelError(f"{path}/config.json is not a DiffusionGemma config transformers accepts: "
                         f"{str(exc).splitlines()[-1].strip() if str(exc).strip() else type(exc).__name__}") from None


def parameter_count(config: dict) -> int:
    """Exact parameter count of the checkpoint's model, built on the meta device (no memory)."""
    from accelerate import init_empty_weights

    DiffusionGemmaConfig = _transformers_class("DiffusionGemmaConfig")
    DiffusionGemmaForBlockDiffusion = _transformers_class("DiffusionGemmaForBlockDiffusion")

    cfg = DiffusionGemmaConfig(**{k: v for k, v in config.items() if k not in _NOT_CONFIG_ARGUMENTS})
    with init_empty_weights():
        model = DiffusionGemmaForBlockDiffusion(cfg)
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
