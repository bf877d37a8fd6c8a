"""A buffer's file, and the pure functions that keep its bytes intact through the TextArea.

Textual's Document splits text with `str.splitlines()` and joins it with one newline, so a
CRLF file reads back as CRLF but mixed endings (or a form feed) would be normalised. On save
we diff the buffer's lines against the file's and give every unchanged line its own ending
back; new lines get the file's usual ending. An untouched buffer saves byte for byte.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from ...core.errors import InputError
from ...core.files import TextFile, check_writable, disk_change, read_text_file, save_text_file
from ...core.newlines import newline_style
from ...core.languages import detect_language
from .document import line_break, split_lines

def language_for(path: Path | None, text: str, available: set[str]) -> str | None:
    """The highlighting language: core.languages' one detection (the file name through pygments,
    else the content), when the editor has that grammar; None (plain text) otherwise."""
    language = detect_language(str(path) if path is not None else None, text)
    return language if language in available else None


def split_endings(text: str) -> tuple[list[str], list[str]]:
    """Lines exactly as the editor's document splits them (app/tui/document.py: only \\r\\n,
    \\r and \\n break a line), and the break after each ('' after the last)."""
    contents = split_lines(text)
    endings = [m.group() for m in line_break(text).finditer(text)] + [""]
    return contents, endings


def restore_line_endings(original: str, lines: list[str]) -> str:
    """Join the buffer's `lines` the way `original` had them: unchanged lines keep their break."""
    old_lines, old_endings = split_endings(original)
    if old_lines == lines:
        return original
    default = newline_style(original)
    new_endings = [default] * (len(lines) - 1) + [""]
    matcher = difflib.SequenceMatcher(None, old_lines, lines, autojunk=False)
    for tag, i1, i2, j1, _ in matcher.get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                old, new = i1 + k, j1 + k
                if new < len(lines) - 1:
                    new_endings[new] = old_endings[old] or default
                elif old == len(old_lines) - 1:
                    new_endings[new] = old_endings[old]  # e.g. a final form feed
    return "".join(line + ending for line, ending in zip(lines, new_endings))


@dataclass
class BufferFile:
    """Where a buffer came from and what is on disk, so a save writes back what it read.

    `source` is core.files' record of the file as last read or written (mtime, size, SHA-256):
    the base for noticing a change on disk before a save overwrites it (docs/safety.md).
    """

    path: Path | None  # None: an untitled buffer
    original: str = ""  # the text as last read or written (BOM lifted off, newlines untouched)
    bom: bool = False
    mtime_ns: int = 0
    source: TextFile | None = None  # None: untitled, or a file that did not exist when opened

    @classmethod
    def open(cls, path: Path) -> "BufferFile":
        """Read `path`; a file that does not exist yet is an empty buffer saved on first write."""
        if not path.exists() and not path.is_symlink():
            return cls(path)
        text_file: TextFile = read_text_file(path)
        return cls(path, text_file.text, text_file.bom, text_file.mtime_ns, text_file)

    @property
    def name(self) -> str:
        return self.path.name if self.path else "untitled"

    def disk_change(self) -> str | None:
        """Why the file on disk is no longer what this buffer read or wrote, or None.

        Content decides (a `touch` alone is no change). A file that did not exist when
        opened counts as changed once something else creates it.
        """
        if self.path is None:
            return None
        if self.source is None:
            return "it was created by another program" if self.path.exists() else None
        return disk_change(self.source)

    def changed_on_disk(self) -> bool:
        return self.disk_change() is not None

    def text_for(self, lines: list[str]) -> str:
        """The text a save of `lines` would write (the file's own line endings restored)."""
        return restore_line_endings(self.original, lines)

    def save(self, lines: list[str], path: Path | None = None, check_disk: bool = True) -> None:
        """Write the buffer's lines atomically, with the file's BOM and line endings.

        Writing to the buffer's own file with `check_disk` refuses (InputError, nothing
        written) when the file changed on disk since it was read or last saved; pass
        `check_disk=False` once the user said to overwrite. The buffer's record only moves
        on after a write that succeeded.
        """
        target = path or self.path
        if target is None:
            raise ValueError("an untitled buffer needs a path")
        check_writable(target)  # read-only (even as root), missing or unwritable directory: one clear message
        text = self.text_for(lines)
        same_file = self.path is not None and Path(target) == self.path
        if same_file and self.source is not None:
            base = self.source
        else:
            if same_file and check_disk and self.path.exists():
                raise InputError(f"{target}: was created on disk by another program since it was opened; not overwriting it")
            base = TextFile(Path(target), text, self.bom)  # no digest: nothing to compare with
        saved = save_text_file(base, text, check_disk=check_disk)
        self.path, self.original, self.source, self.mtime_ns = Path(target), text, saved, saved.mtime_ns
