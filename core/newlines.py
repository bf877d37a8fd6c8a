"""Line endings: what a document's line break is, and how generated text follows it.

Pure text functions, shared by the engine (generated spans follow the file's endings) and
the front ends (what a buffer is saved with); no file I/O here.
"""
from __future__ import annotations

# Control characters a text file never wants from a model (NUL makes it "binary", ESC starts a
# terminal escape); tab, LF, CR and form feed stay allowed. The local models never propose a token
# holding one (core/models/denoiser.py banned_token_ids); a server's text is filtered with the same set.
CONTROL_CHARACTERS = frozenset({chr(c) for c in range(32) if chr(c) not in "\t\n\r\x0c"} | {"\x7f"})


def newline_style(text: str) -> str:
    """The document's line ending: '\\r\\n' when every newline is CRLF, else '\\n'."""
    lf = text.count("\n")
    return "\r\n" if lf and text.count("\r\n") == lf else "\n"


def match_newlines(piece: str, newline: str) -> str:
    """Generated text follows the document's line endings (a CRLF file stays CRLF): every break a
    model writes, CRLF or a lone CR included (a broken model wrote lone CRs into LF files), is
    the document's."""
    piece = piece.replace("\r\n", "\n").replace("\r", "\n")
    return piece.replace("\n", "\r\n") if newline == "\r\n" else piece


def drop_undecodable(piece: str, text: str) -> str:
    """Bytes a model wrote that form no UTF-8 decode as U+FFFD: dropped, unless the document
    itself holds U+FFFD (then the model may be writing it on purpose)."""
    return piece if "\ufffd" in text else piece.replace("\ufffd", "")


_NOT_WRITTEN = {ord(c): None for c in CONTROL_CHARACTERS}
# C1 controls (U+0080-U+009F) too: no tokenizer writes one as text, and U+009B is a one-character
# escape introducer (CSI) to terminals that read 8-bit controls.
_NOT_WRITTEN.update({c: None for c in range(0x80, 0xA0)})


def drop_control(piece: str) -> str:
    """Text from outside (a remote server's model) without the characters a local model can never
    write: control characters other than tab, line breaks and form feed, and lone surrogates
    (which no file encoding holds)."""
    piece = piece.translate(_NOT_WRITTEN)
    if any("\ud800" <= c <= "\udfff" for c in piece):
        piece = "".join(c for c in piece if not "\ud800" <= c <= "\udfff")
    return piece


def written_text(piece: str, text: str) -> str:
    """What a model from outside may write into `text`: filtered as the local engine's output is
    (core/engine.py: no control characters, the document's line breaks, no stray U+FFFD)."""
    return drop_undecodable(match_newlines(drop_control(piece), newline_style(text)), text)
