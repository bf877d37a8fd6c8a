"""Line endings: what a document's line break is, and how generated text follows it.

Pure text functions, shared by the engine (generated spans follow the file's endings) and
the front ends (what a buffer is saved with); no file I/O here.
"""
from __future__ import annotations


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
