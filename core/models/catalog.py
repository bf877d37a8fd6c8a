"""What checkpoints are here, and could they load? Answered from file headers, not tensors.

A checkpoint is inspected from config.json, the safetensors headers (names, shapes and
dtypes; a file shorter than its header promises is truncated) and the tokenizer files,
which is enough to say its family, parameter count, stored dtype and size, and what would
stop it from loading. Used by `sharpen models` and `sharpen doctor`.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from . import untrusted
from .denoiser import takes_instructions
from ..errors import ModelError
from .families import TRANSFORMERS_FAMILIES
from .families.hf import TOKENIZER_CONFIG_KEY, read_tokenizer_config
from .loading import check_against_weights, embedded_model_path, model_config, read_config, weight_files

# safetensors dtype names -> torch's
_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64", "I64": "int64",
           "I32": "int32", "I8": "int8", "U8": "uint8", "BOOL": "bool", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


@dataclass(frozen=True)
class CheckpointInfo:
    name: str  # repo id for cache entries, else the directory name
    path: str
    source: str  # embedded | hf-cache | dir
    family: str | None = None  # registry name, "remote" (own code), or None when unreadable
    params: int = 0
    dtype: str = "?"  # dtype most of the stored bytes have
    size_bytes: int = 0
    instruct: bool = False  # has a chat template
    problem: str | None = None  # why it cannot load as is; None: usable
    note: str | None = None  # usable, with a condition (e.g. needs --trust-remote-code)

    @property
    def usable(self) -> bool:
        return self.problem is None

    def to_dict(self) -> dict:
        return {**asdict(self), "usable": self.usable}


def read_header(file: Path) -> dict:
    """The JSON header of a safetensors file, checked (core/models/untrusted.py); truncated is a ModelError."""
    return untrusted.safetensors_header(file, _DTYPES)


def weight_summary(path: Path) -> tuple[int, str, int]:
    """(parameter count, dominant dtype, bytes) over every safetensors file of a checkpoint."""
    params, size, by_dtype = 0, 0, Counter()
    for file in weight_files(path):
        for name, entry in read_header(file).items():
            if name == "__metadata__":
                continue
            count = 1
            for dim in entry["shape"]:
                count *= dim
            nbytes = entry["data_offsets"][1] - entry["data_offsets"][0]
            params += count
            size += nbytes
            by_dtype[_DTYPES.get(entry["dtype"], entry["dtype"].lower())] += nbytes
    return params, (by_dtype.most_common(1)[0][0] if by_dtype else "?"), size


def inspect_checkpoint(path: Path, name: str | None = None, source: str = "dir") -> CheckpointInfo:
    """Everything `sharpen models` shows about one directory, and what would stop it loading."""
    path = Path(path)
    base = {"name": name or path.name, "path": str(path), "source": source}
    try:
        config = read_config(path)
    except ModelError as exc:
        return CheckpointInfo(**base, problem=str(exc))
    try:
        params, dtype, size = weight_summary(path)
    except ModelError as exc:
        return CheckpointInfo(**base, family=config.get("model_type"), problem=str(exc))
    tok_cfg = read_tokenizer_config(path)
    info = {**base, "params": params, "dtype": dtype, "size_bytes": size}
    if config.get("model_type") in TRANSFORMERS_FAMILIES:  # DiffusionGemma: transformers' own class, no mask token
        try:
            from .families.diffusion_gemma import check_config
            from ..tokenizer import Tokenizer

            check_config(path, config)  # the checks loading makes before transformers builds it
            untrusted.check_directory(path)  # and before it opens the files itself
            Tokenizer.from_directory(path)
        except ModelError as exc:
            return CheckpointInfo(**info, family=config["model_type"], problem=str(exc))
        return CheckpointInfo(**info, family=config["model_type"], instruct=bool(tok_cfg.get("chat_template")),
                              note="random-token diffusion through transformers' own class (no fit table: not sharpen's backbone)")
    try:
        family, cfg = model_config(path, config)
    except ModelError as exc:
        if config.get("auto_map"):
            return CheckpointInfo(**info, family="remote", instruct=bool(tok_cfg.get("chat_template")),
                                  note="runs its own code: needs --trust-remote-code")
        return CheckpointInfo(**info, family=config.get("model_type"), problem=str(exc))
    try:
        from ..tokenizer import Tokenizer

        # What loading checks before building: the layer count and embedding against the headers.
        shapes = {name: tuple(entry["shape"]) for file in weight_files(path) for name, entry in read_header(file).items()
                  if name != "__metadata__"}
        check_against_weights(family, cfg, shapes, path)

        tokenizer = Tokenizer.from_directory(path)
        ids = family.special_ids({**config, TOKENIZER_CONFIG_KEY: tok_cfg}, tokenizer)
    except ModelError as exc:
        return CheckpointInfo(**info, family=family.name, problem=str(exc))
    problem = None if ids.get("mask_id") is not None else "no mask token in config.json or the tokenizer"
    return CheckpointInfo(**info, family=family.name, instruct=takes_instructions(ids.get("chat_template"), ids.get("instruct")),
                          problem=problem)


def hf_cache_checkpoints(cache_dir: str | Path | None = None) -> list[tuple[str, Path]]:
    """(repo id, snapshot dir) of every model in the local Hugging Face cache with a config.json."""
    try:
        from huggingface_hub import scan_cache_dir
        from huggingface_hub.errors import CacheNotFound
    except ImportError:
        return []
    try:
        cache = scan_cache_dir(cache_dir)
    except (CacheNotFound, OSError, ValueError):
        return []
    out = []
    for repo in sorted(cache.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model":
            continue
        # the revision `main` points at, else the newest one
        revisions = sorted(repo.revisions, key=lambda r: ("main" in r.refs, r.last_modified), reverse=True)
        for revision in revisions[:1]:
            if (revision.snapshot_path / "config.json").exists():
                out.append((repo.repo_id, revision.snapshot_path))
    return out


def checkpoint_dirs(root: Path) -> list[Path]:
    """`root` itself when it is a checkpoint, else its subdirectories that are."""
    if (root / "config.json").exists():
        return [root]
    if not root.is_dir():
        return [root]  # inspected anyway, so the problem is reported
    return sorted(p for p in root.iterdir() if (p / "config.json").exists())


def find_checkpoints(dirs: list[Path] = (), cache_dir: str | Path | None = None, embedded: bool = True) -> list[CheckpointInfo]:
    """The embedded model, the Hugging Face cache's models and the checkpoints under `dirs`."""
    found = []
    if embedded and (embedded_model_path() / "config.json").exists():
        found.append(safely_inspected(embedded_model_path(), "embedded", "embedded"))
    for repo_id, snapshot in hf_cache_checkpoints(cache_dir):
        found.append(safely_inspected(snapshot, repo_id, "hf-cache"))
    for root in dirs:
        found.extend(safely_inspected(p) for p in checkpoint_dirs(Path(root).expanduser()))
    return found


def safely_inspected(path: Path, name: str | None = None, source: str = "dir") -> CheckpointInfo:
    """inspect_checkpoint, where whatever a broken checkpoint raises lists it as not usable, with why:
    one bad directory (in the cache, say) never takes the whole listing down."""
    try:
        return inspect_checkpoint(path, name, source)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, ArithmeticError, RecursionError, OSError, MemoryError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else ""
        return CheckpointInfo(name or Path(path).name, str(path), source, problem=f"cannot be read: {type(exc).__name__}: {reason}")


def human_count(n: int) -> str:
    for unit, size in (("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)

