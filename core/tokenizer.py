"""Text <-> token ids, over a `tokenizers` tokenizer.json, with the special ids a denoiser needs.

Byte-level BPE round-trips any text exactly; decoding a single token may yield a partial
UTF-8 sequence, which is why pieces for display go through `pieces()`.
"""
from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer

from .errors import ModelError

# Our own family's special tokens; other families name theirs in their own files.
MASK_TOKEN = "<|mask|>"
PAD_TOKEN = "<|pad|>"
EOS_TOKEN = "<|endoftext|>"


class Tokenizer:
    def __init__(self, hf: _HFTokenizer) -> None:
        self.hf = hf
        self.vocab_size = hf.get_vocab_size(with_added_tokens=True)

    @classmethod
    def from_file(cls, path: str | Path) -> "Tokenizer":
        try:
            return cls(_HFTokenizer.from_file(str(path)))
        except FileNotFoundError:
            raise ModelError(f"tokenizer file not found: {path}") from None
        except Exception as exc:  # tokenizers raises bare Exceptions for malformed JSON
            raise ModelError(f"cannot read tokenizer {path}: {exc}") from None

    def token_id(self, token: str) -> int | None:
        return self.hf.token_to_id(token)

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        return self.hf.encode(text, add_special_tokens=False).ids

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
