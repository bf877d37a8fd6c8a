"""Any other dLLM: the checkpoint's own modeling code, only on explicit opt-in.

`AutoModelForMaskedLM` / `AutoModel` / `AutoModelForCausalLM` `.from_pretrained(...,
trust_remote_code=True)` runs Python shipped with the checkpoint, so it happens only when
the user passes `--trust-remote-code` (or sets it in the config); otherwise loading stops
with a ModelError naming the flag. The wrapped model answers the Denoiser interface the
sampler uses: `logits`, `device`, `max_len`, `spec`, `tokenizer`; it has no KV cache.
Which token is the mask and whether logits are shifted come from the files when they say,
else from `--mask-id` / `--shift-logits`.
"""
from __future__ import annotations

import logging
from pathlib import Path

import torch

from . import untrusted
from .denoiser import ModelSpec, banned_token_ids, check_finite
from ..errors import ModelError
from .families import hf
from .loading import default_dtype, read_config
from ..tokenizer import Tokenizer

log = logging.getLogger(__name__)

FLAG = "--trust-remote-code"
MASK_NAMES = ("<|mask|>", "<|mdm_mask|>", "[MASK]", "<mask>")  # common spellings, tried in the tokenizer
# auto_map keys in order of preference: a masked LM head first, then a bare model with logits
AUTO_CLASSES = ("AutoModelForMaskedLM", "AutoModel", "AutoModelForCausalLM")


def refusal(path: Path, config: dict) -> ModelError:
    """The error for a checkpoint that only runs through its own code, without the opt-in."""
    return ModelError(
        f"{path} (model_type={config.get('model_type')!r}) is not a native family and runs only through its "
        f"own Python code; pass {FLAG} if you trust it"
    )


class RemoteDenoiser:
    """A transformers model with its own code, seen through the Denoiser interface."""

    supports_cache = False

    def __init__(self, model: torch.nn.Module, tokenizer: Tokenizer, spec: ModelSpec, max_len: int) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.spec = spec
        self.max_len = max_len
        self._check_finite = True  # NaN or infinite logits on the first pass stop the run (denoiser.check_finite)
        head = model.get_output_embeddings()
        self.vocab_size = (head.weight.shape[0] if head is not None else None) or getattr(model.config, "vocab_size", None) or tokenizer.vocab_size
        spec.check(self.vocab_size)

    @property
    def device(self) -> torch.device:
        return self.model.get_input_embeddings().weight.device

    @property
    def banned_ids(self) -> torch.Tensor:
        """Ids a slot must never receive, as for native models (mask, stray specials, control bytes)."""
        return banned_token_ids(self.tokenizer, self.spec, self.vocab_size).to(self.device)

    @torch.inference_mode()
    def logits(self, x: torch.Tensor, want: torch.Tensor | None = None, run: torch.Tensor | None = None, cache=None) -> torch.Tensor:
        """x [B, T] -> logits [B, W, V] float32 for positions `want` (default all); always a full pass."""
        if run is not None or cache is not None:
            raise ModelError("this model runs through its own code and has no KV cache")
        out = self.model(input_ids=x)
        logits = (out.logits if hasattr(out, "logits") else out[0]).float()  # [B, T, V]
        if self.spec.shift_logits:
            logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
        if want is not None:
            logits = logits[:, want.to(logits.device)]
        if self._check_finite:  # its first pass, once (one host read): as for the native backbone
            self._check_finite = False
            check_finite(logits)
        return logits.to(x.device)

    def new_cache(self, batch: int, length: int):
        raise ModelError("this model runs through its own code and has no KV cache")

    def source_positions(self, want: list[int]) -> list[int]:
        return list(want)  # logits come shifted into place already (see logits)


def _tokenizer(path: Path) -> Tokenizer:
    if (path / "tokenizer.json").exists() or (path / "vocab.json").exists():
        return Tokenizer.from_directory(path)
    from transformers import AutoTokenizer

    try:
        slow_or_fast = AutoTokenizer.from_pretrained(str(path), trust_remote_code=True, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot load the tokenizer of {path}: {str(exc).splitlines()[0]}") from None
    if not getattr(slow_or_fast, "is_fast", False):
        raise ModelError(f"the tokenizer of {path} has no fast (tokenizer.json) form, which sharpen needs")
    return Tokenizer(slow_or_fast.backend_tokenizer)


def _auto_classes(config: dict) -> list[str]:
    auto_map = config.get("auto_map") or {}
    named = [name for name in AUTO_CLASSES if name in auto_map]
    return named or ["AutoModelForMaskedLM"]  # a transformers built-in masked LM (no code of its own)


def load_remote(
    path: str | Path,
    *,
    trust_remote_code: bool,
    device: str = "cpu",
    dtype: torch.dtype | None = None,
    mask_id: int | None = None,
    shift_logits: bool | None = None,
    device_map: str | dict | None = None,
    max_memory: dict | None = None,
) -> RemoteDenoiser:
    """Load a checkpoint through its own modeling code; refused unless `trust_remote_code`."""
    path = Path(path)
    config = read_config(path)
    if not trust_remote_code:
        raise refusal(path, config)
    untrusted.check_directory(path)  # transformers opens the files itself: no FIFO or device among them
    import transformers

    torch_device = torch.device(device)
    dtype = dtype or default_dtype(torch_device)
    kwargs = {"trust_remote_code": True, "local_files_only": True, "dtype": dtype}
    if device_map is not None:
        kwargs.update(device_map=device_map, max_memory=max_memory)
    errors = []
    model = None
    for name in _auto_classes(config):
        try:
            model = getattr(transformers, name).from_pretrained(str(path), **kwargs)
            break
        except (OSError, ValueError, ImportError, KeyError, RuntimeError, AttributeError, TypeError) as exc:
            errors.append(f"{name}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    if model is None:
        raise ModelError(f"cannot load {path} through its own code ({'; '.join(errors)})")
    if device_map is None:
        model = model.to(torch_device)
    tokenizer = _tokenizer(path)
    spec = remote_spec(path, config, tokenizer, mask_id, shift_logits)
    max_len = next((config[k] for k in ("max_sequence_length", "max_position_embeddings", "n_positions") if isinstance(config.get(k), int)), 4096)
    log.info("loaded %s through its own code (%s, %s)", path, device_map or torch_device, dtype)
    return RemoteDenoiser(model, tokenizer, spec, max_len)


def remote_spec(path: Path, config: dict, tokenizer: Tokenizer, mask_id: int | None, shift_logits: bool | None) -> ModelSpec:
    """Special ids from the files, overridden by what the user said."""
    seen = {**config, hf.TOKENIZER_CONFIG_KEY: hf.read_tokenizer_config(path), hf.GENERATION_CONFIG_KEY: hf.read_generation_config(path)}
    ids = hf.special_ids(seen, tokenizer, mask_names=MASK_NAMES, turn_end_names=("<|im_end|>", "<|eot_id|>"))
    if mask_id is not None:
        ids["mask_id"] = mask_id
    if ids["mask_id"] is None:
        raise ModelError(f"the files of {path} do not say which token is the mask; pass --mask-id N")
    if shift_logits is None:
        shift_logits = config.get("shift_logits")
    if shift_logits is None:
        log.warning("the files of %s do not say whether logits are shifted; assuming not (pass --shift-logits if they are)", path)
        shift_logits = False
    return ModelSpec(
        family=f"remote:{config.get('model_type', '?')}",
        mask_id=int(ids["mask_id"]),
        pad_id=ids["pad_id"],
        eos_id=ids["eos_id"],
        shift_logits=bool(shift_logits),
        chat_template=ids["chat_template"],
        name=config.get("name", path.name),
        other_end_ids=tuple(ids["end_ids"]),
    )
