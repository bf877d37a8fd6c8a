"""Text <-> token ids, over a `tokenizers` tokenizer, with the special ids a denoiser needs.

A checkpoint's tokenizer comes from its tokenizer.json, or, for releases that ship only the
slow tokenizer's files (Dream-v0, Dream-Coder-v0, DiffuCoder: vocab.json + merges.txt + added
tokens, with a tokenizer class in remote code), is built from those files as the fast
byte-level BPE that transformers' Qwen2 tokenizer is (`Tokenizer.from_directory`).

Byte-level BPE round-trips any text exactly; decoding a single token may yield a partial
UTF-8 sequence, which is why pieces for display go through `pieces()`.
"""
from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer

from .models import untrusted
from .errors import ModelError
from .models.jsonfile import read_json_object

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

# Our own family's special tokens; other families name theirs in their own files.
MASK_TOKEN = "<|mask|>"
PAD_TOKEN = "<|pad|>"
EOS_TOKEN = "<|endoftext|>"


class Tokenizer:
    def __init__(self, hf: _HFTokenizer) -> None:
        self.hf = hf
        # The id space (highest id + 1), not the count of tokens: they differ where ids have holes
        # (a tiny vocabulary whose special tokens keep a release's ids, LLaDA2's mask at 156895).
        vocab = hf.get_vocab(with_added_tokens=True)
        self.vocab_size = max(vocab.values()) + 1 if vocab else 0

    @classmethod
    def from_file(cls, path: str | Path) -> "Tokenizer":
        if not Path(path).exists():
            raise ModelError(f"tokenizer file not found: {path}")
        # Read here, checked as untrusted input (regular, bounded: core/models/untrusted.py), then parsed.
        text = untrusted.read_text(Path(path), untrusted.TOKENIZER_BYTES)
        try:
            return cls(_HFTokenizer.from_str(text))
        except Exception as exc:  # tokenizers raises bare Exceptions for malformed JSON
            raise ModelError(f"cannot read tokenizer {path}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None

    @classmethod
    def from_directory(cls, path: str | Path) -> "Tokenizer":
        """The tokenizer of checkpoint directory `path`: tokenizer.json, else vocab.json + merges.txt."""
        path = Path(path)
        if (path / "tokenizer.json").exists():
            return cls.from_file(path / "tokenizer.json")
        if (path / "vocab.json").exists() and (path / "merges.txt").exists():
            return cls(byte_level_bpe_from_files(path))
        raise ModelError(f"no tokenizer in {path}: it has neither tokenizer.json nor vocab.json + merges.txt")

    @cached_property
    def max_token_chars(self) -> int:
        """The most characters one token can decode to (its vocabulary string is at least as long:
        one character per byte in byte-level BPE), so len(text) / this bounds the token count from
        below without encoding the text: a 50 MB selection is refused before it is tokenized."""
        return max((len(token) for token in self.hf.get_vocab(with_added_tokens=True)), default=1) or 1

    def fewest_tokens(self, text: str) -> int:
        """A lower bound on len(self.encode(text)), computed without encoding."""
        return -(-len(text) // self.max_token_chars)

    def token_id(self, token: str) -> int | None:
        return self.hf.token_to_id(token)

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        # An editor buffer may hold a lone surrogate (typed, or kept by recovery); `tokenizers`
        # takes only valid Unicode. The model reads U+FFFD in its place: context only, since the
        # text outside the spans is never rewritten from tokens.
        return self.hf.encode(_LONE_SURROGATE.sub("\ufffd", text), add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        # Special tokens are never part of span text; pad/eos are removed before this.
        return self.hf.decode(list(ids), skip_special_tokens=False)

    def pieces(self, ids: list[int]) -> list[str]:
        """Per-token display strings whose concatenation decodes like the whole sequence.

        Each piece is the text gained by decoding one more token, so multi-byte characters
        split across tokens show up on the token that completes them.
        """
        out, previous = [], ""
        for n in range(1, len(ids) + 1):
            text = self.decode(ids[:n])
            # A trailing U+FFFD is an unfinished byte sequence: hold it back until complete.
            stable = text.rstrip("\ufffd") if n < len(ids) else text
            if not stable.startswith(previous):
                stable = previous
            out.append(stable[len(previous):])
            previous = stable
        return out


def train_byte_bpe(texts, vocab_size: int, extra_special: tuple[str, ...] = ()) -> Tokenizer:
    """A byte-level BPE trained on `texts` (an iterable of str) with our special tokens.

    Byte level means every string is encodable and decodes back exactly: whitespace,
    indentation, tabs and CRLF included. Special ids come first: mask 0, pad 1, eos 2.
    """
    from tokenizers import decoders, models, pre_tokenizers, trainers

    hf = _HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[MASK_TOKEN, PAD_TOKEN, EOS_TOKEN, *extra_special],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    hf.train_from_iterator(texts, trainer=trainer)
    return Tokenizer(hf)


# Qwen2's pre-tokenizer split (transformers' tokenization_qwen2.PRETOKENIZE_REGEX): Qwen2.5 and the
# Dream / Dream-Coder / DiffuCoder releases built on it.
QWEN2_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
# Tokenizer classes (tokenizer_config.json) whose vocab.json + merges.txt are Qwen2's byte-level BPE.
QWEN2_CLASSES = ("Qwen2Tokenizer", "Qwen2TokenizerFast", "DreamTokenizer")


def byte_level_bpe_from_files(path: Path) -> _HFTokenizer:
    """The fast tokenizer of a checkpoint that ships vocab.json + merges.txt + added tokens.

    The same pipeline transformers builds for Qwen2: NFC, Qwen2's regex split, byte-level BPE;
    then every added token (tokenizer_config.json's added_tokens_decoder, added_tokens.json)
    at exactly its declared id, special or not as declared.
    """
    from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers

    tok_cfg = read_json_object(path / "tokenizer_config.json")
    cls_name = tok_cfg.get("tokenizer_class") or "Qwen2Tokenizer"
    if cls_name not in QWEN2_CLASSES:
        raise ModelError(f"{path}: tokenizer class {cls_name} ships no tokenizer.json, and sharpen builds only "
                         f"Qwen2-style tokenizers ({', '.join(QWEN2_CLASSES)}) from vocab.json + merges.txt")
    # Read here as untrusted input (core/models/untrusted.py) and parsed as tokenizers' BPE.from_file parses them.
    vocab = untrusted.read_json(path / "vocab.json", untrusted.TOKENIZER_BYTES)
    merges_text = untrusted.read_text(path / "merges.txt", untrusted.TOKENIZER_BYTES)
    merges = [tuple(line.split(" ")) for line in merges_text.splitlines() if line and not line.startswith("#version")]
    if not isinstance(vocab, dict) or not all(isinstance(i, int) and not isinstance(i, bool) for i in vocab.values()):
        raise ModelError(f"cannot read the tokenizer of {path}: vocab.json is not an object of token -> id")
    if any(len(pair) != 2 for pair in merges):
        raise ModelError(f"cannot read the tokenizer of {path}: merges.txt has a line that is not two tokens")
    try:
        hf = _HFTokenizer(models.BPE(vocab, merges))
    except Exception as exc:  # tokenizers raises bare Exceptions for malformed files
        raise ModelError(f"cannot read the tokenizer of {path} (vocab.json, merges.txt): {exc}") from None
    hf.normalizer = normalizers.NFC()
    hf.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    hf.decoder = decoders.ByteLevel()
    for token_id, token, special in _added_tokens(path, tok_cfg):
        existing = hf.token_to_id(token.content)
        if existing == token_id:
            continue
        if existing is not None or hf.get_vocab_size(with_added_tokens=True) != token_id:
            raise ModelError(f"{path}: added token {token.content!r} is declared with id {token_id}, which the "
                             f"vocabulary cannot give it (next free id {hf.get_vocab_size(with_added_tokens=True)})")
        (hf.add_special_tokens if special else hf.add_tokens)([token])
    return hf


def _added_tokens(path: Path, tok_cfg: dict) -> list:
    """(id, AddedToken, special) for every declared added token, in id order."""
    from tokenizers import AddedToken

    found: dict[int, tuple] = {}
    declared = tok_cfg.get("added_tokens_decoder") or {}
    if not isinstance(declared, dict):
        raise ModelError(f"{path}/tokenizer_config.json: added_tokens_decoder is not an object of id -> token")
    for key, entry in declared.items():
        if not (isinstance(key, str) and key.isascii() and key.isdigit()):
            raise ModelError(f"{path}/tokenizer_config.json: added_tokens_decoder has the key {key[:40]!r}, not a token id")
        if isinstance(entry, dict) and isinstance(entry.get("content"), str):
            token = AddedToken(entry["content"], single_word=bool(entry.get("single_word")), lstrip=bool(entry.get("lstrip")),
                               rstrip=bool(entry.get("rstrip")), normalized=bool(entry.get("normalized", False)),
                               special=bool(entry.get("special", True)))
            found[int(key)] = (token, bool(entry.get("special", True)))
    for content, token_id in read_json_object(path / "added_tokens.json").items():
        if isinstance(token_id, int) and token_id not in found:
            found[token_id] = (AddedToken(content, normalized=False, special=True), True)
    return [(i, token, special) for i, (token, special) in sorted(found.items())]
