"""A loaded model ready for the sampler: backbone + tokenizer + the ids that matter.

`DenoiserLike` declares what the sampler needs of any model; `Denoiser` (sharpen's own
backbone), `remote.RemoteDenoiser` (a checkpoint's own code) and `candidates.ExactRows`
(a view that bans pad inside candidate rows) each provide it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Protocol, runtime_checkable

import torch

from .compiled import CompiledSampler, CompiledStep
from ..errors import ModelError
from ..newlines import CONTROL_CHARACTERS
from .kv_cache import FULL, Attend, KVCache
from .model import Transformer
from ..settings import PROMPT_FORMS, default_block_size
from ..tokenizer import Tokenizer

# A model declares the kind of denoising loop it runs in ModelSpec.loop ("masked", "random-token",
# "block-causal", ...); the kinds and what each one runs are the table in core/loops/kinds.py,
# which refuses a kind it does not hold when a run starts.


@dataclass(frozen=True)
class BlockRule:
    """How a block-causal release denoises, from its config.json and its reference generate loop."""

    size: int  # tokens per block (config.json block_size / bd_size): bidirectional inside, causal across
    threshold: float | None  # low-confidence-dynamic: every masked token above this commits (None: the scheduled share only)
    prompt: str = "chat"  # the edit form the release documents (PROMPT_FORMS, not "auto")
    # How the reference draws a token: "multinomial" (SDAR generate.py: temperature, top-k, top-p,
    # a multinomial draw, confidence of the drawn token) or "gumbel" (LLaDA's: Gumbel-max in
    # float64 at the temperature, confidence from the untempered softmax).
    sampler: str = "multinomial"
    # What a block's per-step shares divide: "block" (its size, SDAR) or "masks" (the masks it
    # starts with; a step whose share is 0 is skipped, Stable-DiffCoder's generate_block).
    schedule: str = "block"
    # Whether the last block is filled up to the block size with masks that are denoised and
    # dropped (SDAR generate.py) or ends where the slots end (Stable-DiffCoder's generate_block).
    pad_last: bool = True
    # Fast-dLLM v2: each block is decoded in sub-blocks of this many, left to right, and a block's
    # first token comes from the pass before it (core/loops/subblock.py). None: the whole block.
    sub_block: int | None = None
    edits: bool = False  # the release's decode edits its own committed tokens (LLaDA2.1: core/loops/editing.py)
    # The reference returns the answer up to its first end token (LLaDA2's and Stable-DiffCoder's
    # generate): tokens committed after it in the same block are dropped, not written.
    cut_at_end: bool = False
    # The reference clamps the steps per block to the answer's length (LLaDA2.0's generate:
    # `steps = min(steps, gen_length)`), which changes the schedule of every answer shorter than a block.
    steps_within_answer: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.size, int) and self.size >= 1):
            raise ValueError(f"block size {self.size!r} must be a whole number of at least 1")
        if self.prompt not in PROMPT_FORMS[1:]:
            raise ValueError(f"unknown prompt form {self.prompt!r}; known: {', '.join(PROMPT_FORMS[1:])}")
        if self.sampler not in ("multinomial", "gumbel") or self.schedule not in ("block", "masks"):
            raise ValueError(f"unknown sampler {self.sampler!r} or schedule {self.schedule!r}")


def takes_instructions(chat_template: str | None, instruct: bool | None) -> bool:
    """Whether an edit may carry an instruction: a chat template to write it in, and a model tuned
    to follow it (ModelSpec.instruct; None: it is when it has a template)."""
    return bool(chat_template) and instruct is not False


@dataclass(frozen=True)
class ModelSpec:
    family: str  # registry name, e.g. "sharpen", "llada", "dream"
    mask_id: int  # the token every masked slot holds
    pad_id: int | None  # written by the model where a variable-length span ends early
    eos_id: int | None  # also deleted inside infill spans
    shift_logits: bool = False  # Dream family: logits at i predict token i+1, so shift right by one
    chat_template: str | None = None  # how a conversation is written for it (the chat endpoints, instructions)
    name: str = ""  # where it came from, for status bars and --json
    # Every other id the checkpoint's files declare as an end or pad (config.json, generation_config.json,
    # the tokenizer): they end a span too, and none of them may be banned. DiffuCoder pads with
    # <|dlm_pad|> while its config.json names <|endoftext|>.
    other_end_ids: tuple[int, ...] = ()
    # How the family's reference ranks commits at temperature > 0: by the probability the token was
    # drawn from (after temperature and top-p/top-k: Dream, Open-dLLM) or the model's plain one (LLaDA).
    tempered_scores: bool = False
    # The cache refresh a run uses unless the user sets one (Sampling.refresh): Fast-dLLM's published
    # whole-canvas refresh for released checkpoints; block refresh was measured only on the embedded model.
    default_refresh: str = "canvas"
    loop: str = "masked"  # which denoising loop runs this model (a key of core/loops/kinds.py KINDS)
    # Whether it was tuned to follow instructions (an edit's instruction; the editor asks for one
    # before a rewrite). None: it was when it has a chat template, as released checkpoints ship one
    # exactly when they are. sharpen's own models say False: the embedded model's template writes a
    # chat down as comments for a model that never saw one.
    instruct: bool | None = None
    block: BlockRule | None = None  # block-causal models only: block size, commit rule, prompt form

    def __post_init__(self) -> None:
        if not (isinstance(self.loop, str) and self.loop):
            raise ValueError(f"a loop kind must be a name, not {self.loop!r}")
        if (self.loop == "block-causal") != (self.block is not None):
            raise ValueError("a block-causal model needs a BlockRule, and only a block-causal model has one")

    def check(self, vocab_size: int) -> None:
        """Refuse specs that would silently corrupt a run (collisions, ids out of range)."""
        for label, value in (("mask", self.mask_id), ("pad", self.pad_id), ("eos", self.eos_id)):
            if value is not None and not 0 <= value < vocab_size:
                raise ModelError(f"{label} token id {value} is outside the vocabulary of {vocab_size}")
        # Every id the files declare as an end (generation_config.json lists) becomes a tensor: check them too.
        outside = [i for i in self.other_end_ids if not 0 <= i < vocab_size]
        if outside:
            raise ModelError(f"end token id {outside[0]} is outside the vocabulary of {vocab_size}")
        if self.mask_id in (self.pad_id, self.eos_id):
            raise ModelError(f"mask token id {self.mask_id} collides with pad/eos; the checkpoint's special tokens are inconsistent")

    @property
    def takes_instructions(self) -> bool:
        return takes_instructions(self.chat_template, self.instruct)

    @property
    def end_ids(self) -> tuple[int, ...]:
        """Ids deleted from a finished infill span (variable length); the pad filler first."""
        ids = [i for i in (self.pad_id, self.eos_id, *self.other_end_ids) if i is not None and i != self.mask_id]
        return tuple(dict.fromkeys(ids))


@runtime_checkable
class DenoiserLike(Protocol):
    """What the denoising loop (core/loops/) and the engine read from a model."""

    spec: ModelSpec  # mask/pad/eos ids, logit shift, chat template
    tokenizer: Tokenizer
    supports_cache: bool  # False: new_cache raises and every step is a full pass

    @property
    def device(self) -> torch.device: ...

    @property
    def max_len(self) -> int: ...  # the longest canvas the model takes

    @property
    def banned_ids(self) -> torch.Tensor: ...  # [K] ids no slot may receive

    def logits(self, x: torch.Tensor, want: torch.Tensor | None = None, run: torch.Tensor | None = None,
               cache: KVCache | None = None) -> torch.Tensor: ...  # [B, T] -> [B, W, V] float32

    def source_positions(self, want: list[int]) -> list[int]: ...  # the rows that score `want`

    def new_cache(self, batch: int, length: int) -> KVCache: ...


def check_finite(logits: torch.Tensor) -> None:
    """ModelError when a pass's logits hold NaN or infinity: the model is broken, not the input."""
    if not bool(torch.isfinite(logits).all()):
        raise ModelError("the model's first step gave logits that are not finite (NaN or infinity): its weights or "
                         "config.json are broken; nothing was written")


class Denoiser:
    """`logits(ids) -> [B, T, V]` over a canvas, with the family's conventions applied."""

    def __init__(self, model: Transformer, tokenizer: Tokenizer, spec: ModelSpec) -> None:
        spec.check(model.cfg.vocab_size)
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.spec = spec
        self._static_caches = False  # set by compile: see new_cache
        self._kept_cache: KVCache | None = None
        self._scores = model.scores  # a step's pass and projection; compile() swaps in the compiled one
        self._step: CompiledStep | None = None  # set by compile: bucketed shapes, eager fallback
        self._samplers: dict = {}  # the loop's sampling math, compiled alongside (compiled_sampler)
        self._check_finite = True  # the next pass is checked (first after loading, first of each cached run)

    @property
    def device(self) -> torch.device:
        return self.model.embed.weight.device

    @property
    def max_len(self) -> int:
        return self.model.cfg.max_seq_len

    @property
    def compiled(self) -> bool:
        """Its passes run through torch.compile (compile()): bucketed shapes, which runs cannot pack."""
        return self._step is not None

    supports_cache = True  # the native backbone can run chunks against a KV cache

    @cached_property
    def banned_ids(self) -> torch.Tensor:
        """Ids a slot must never receive: see `banned_token_ids`."""
        return banned_token_ids(self.tokenizer, self.spec, self.model.cfg.vocab_size).to(self.device)

    @torch.inference_mode()
    def logits(
        self,
        x: torch.Tensor,
        want: torch.Tensor | None = None,
        run: torch.Tensor | None = None,
        cache: KVCache | None = None,
        attend: Attend = FULL,
    ) -> torch.Tensor:
        """Logits for canvas positions `want` (default all): x [B, T] -> [B, W, V] float32.

        Row j scores the token at position want[j]. `run` (sorted positions) recomputes only
        those positions against `cache` (which holds the rest of the canvas); it must hold
        every row that scores `want` (`source_positions`: want itself, or for shifted families,
        where the backbone's row p-1 predicts position p, the positions before it). Without
        `run` the whole canvas is computed, and written into `cache` when one is given. Only
        the wanted rows are projected to the vocabulary, which is most of the cost for large
        vocabularies. `attend` is the backbone's attention policy (core/models/kv_cache.py Attend): the
        block-causal loop passes its masks and read-only cache through it.
        """
        T = x.shape[1]
        want = torch.arange(T, device=x.device) if want is None else want
        source = (want - 1).clamp_min(0) if self.spec.shift_logits else want  # [W] rows that predict `want`
        if run is not None and cache is None:
            raise ValueError("a partial run needs a cache holding the rest of the canvas")
        try:
            if run is None:
                return self._finite(self._scores(x, None, cache, source, attend))  # [B, W, V]
            rows = torch.searchsorted(run, source)  # no host read: the caller sized `run`
            return self._finite(self._scores(x[:, run], run, cache, rows, attend))  # [B, W, V]
        except torch.OutOfMemoryError:
            raise ModelError(OUT_OF_MEMORY) from None

    def _finite(self, logits: torch.Tensor) -> torch.Tensor:
        """A run's first pass is checked once (one host read): NaN or infinite logits (all-NaN weights,
        a broken config) stop the run with one line instead of filling the span with token 0."""
        if self._check_finite:
            self._check_finite = False
            check_finite(logits)
        return logits

    def source_positions(self, want: list[int]) -> list[int]:
        """The canvas rows whose hidden states score positions `want` (see `logits`)."""
        return [max(p - 1, 0) for p in want] if self.spec.shift_logits else list(want)

    def new_cache(self, batch: int, length: int) -> KVCache:
        """Keys/values for a [batch, length] canvas.

        Once compiled, the same buffers come back for the same shape, marked as static
        addresses. A CUDA graph must not write into any other input (torch.compile then
        skips the graph, and a cached step, which writes its keys and values into the
        cache, would run kernel by kernel), and a run can replay the graphs an earlier run
        of that shape recorded. Reuse needs no clearing: every run's first pass writes the
        whole canvas; and one run uses a model at a time (the editor holds a lock).
        """
        self._check_finite = True  # a new run: its first pass is checked
        try:
            if not self._static_caches:
                return self.model.new_cache(batch, length)
            if self._step is not None:  # bucketed: the cache has the bucket's length, a key mask the run's
                self._step.valid_keys = length
                length = self._step.cache_length(length)
            kept = self._kept_cache
            if kept is None or (kept.k[0].shape[0], kept.length) != (batch, length):
                self._kept_cache = None  # the old buffers go before the new ones are allocated
                kept = self.model.new_cache(batch, length)
                for buffer in (*kept.k, *kept.v):
                    torch._dynamo.mark_static_address(buffer, guard=False)
                self._kept_cache = kept
            return kept
        except torch.OutOfMemoryError:
            raise ModelError(OUT_OF_MEMORY) from None

    def compiled_sampler(self, fn):
        """`fn` (the loop's sampling math) compiled alongside the step once this denoiser is
        compiled (core/models/compiled.py CompiledSampler), else `fn` itself."""
        if self._step is None:
            return fn
        if fn not in self._samplers:
            self._samplers[fn] = CompiledSampler(fn, self._step)
        return self._samplers[fn]

    def compile(self, mode: str = "default", backend: str = "inductor", notify=None, progress=None) -> None:
        """Compile the backbone's passes with torch.compile (see COMPILE_MODES and core/models/compiled.py).

        "reduce-overhead" records CUDA graphs: one launch per pass instead of one per
        kernel, which is most of a small model's step time on a GPU. Shapes are bucketed
        (core/models/compiled.py), so a session compiles and records a handful of graphs, not one per
        edit. "auto" is reduce-overhead on CUDA, compiled ahead of the first edit (`progress`
        gets a line before and after), and nothing on a CPU, where eager is faster to start.
        Any failure to compile or record runs the step eagerly from then on (`notify` gets
        one line); an edit never fails for it.
        """
        if mode not in COMPILE_MODES:
            raise ValueError(f"unknown compile mode {mode!r}; known: {', '.join(COMPILE_MODES)}")
        warm = mode == "auto"
        if warm:
            if self.device.type != "cuda":
                return
            mode = "reduce-overhead"
        if mode == "off":
            return
        # One compiled function per step, the pass and its projection together: one CUDA graph
        # per step, and no graph output is read after the next step's call, which is what
        # CUDA graph trees assume of inference (each call starts a new iteration).
        # Built now, eagerly, in the activations' dtype: a table made inside a graph would be graph memory.
        self.model.rope(self.device, self.max_len, self.model.embed.weight.dtype)
        self._step = CompiledStep(self.model, mode, backend, self.spec.mask_id, notify)
        self._scores = self._step
        self._static_caches = True
        if warm:
            try:
                block = default_block_size("cuda", sum(p.numel() for p in self.model.parameters()))  # the blocks runs will use
                self._step.warm_up(self.new_cache, progress or (lambda line: None), block=block)
            except torch.OutOfMemoryError:
                raise ModelError(OUT_OF_MEMORY) from None


# torch.compile modes offered to users: auto (CUDA graphs on CUDA, off on a CPU), off, inductor's
# default, CUDA graphs, autotuned kernels.
COMPILE_MODES = ("auto", "off", "default", "reduce-overhead", "max-autotune")

# A step that runs out of GPU memory: one line with what shrinks a step, instead of torch's text.
OUT_OF_MEMORY = ("out of GPU memory in a denoising step; try a smaller --context-tokens, --samples 1, "
                 "--quantize int8, --device-map auto, or --device cpu")


def banned_token_ids(tokenizer: Tokenizer, spec: ModelSpec, vocab_size: int) -> torch.Tensor:
    """The mask id, special tokens other than pad/eos, ids past the tokenizer, control bytes.

    Proposing the mask itself would leave a slot masked forever; the others would write
    text no editor wants (a NUL byte turns a source file into a "binary" one).
    """
    banned = {spec.mask_id}
    allowed_special = set(spec.end_ids)
    # One pass over the added tokens (the set was rebuilt per id: O(vocab x added), seconds at 300,000 added).
    special = {i for i, token in tokenizer.hf.get_added_tokens_decoder().items() if token.special and i < vocab_size}
    banned |= special - allowed_special
    banned |= set(range(tokenizer.vocab_size, vocab_size))  # padded embedding rows
    n = min(vocab_size, tokenizer.vocab_size)
    pieces = tokenizer.hf.decode_batch([[i] for i in range(n)], skip_special_tokens=False)
    banned |= {i for i, piece in enumerate(pieces) if i not in allowed_special and not CONTROL_CHARACTERS.isdisjoint(piece)}
    banned |= {i for i in range(n) if tokenizer.hf.id_to_token(i) is None}  # holes in the id space: no text to write
    return torch.tensor(sorted(banned), dtype=torch.long)

