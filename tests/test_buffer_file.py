"""app/tui/buffer_file.py: a buffer's bytes kept intact through the TextArea, its language."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sharpen.app.tui.buffer_file import BufferFile, restore_line_endings, split_endings


@given(st.lists(st.sampled_from(["a", "b", "\n", "\r\n", "\r", "\x0c", "é"]), max_size=30))
def test_an_unchanged_buffer_saves_byte_for_byte(parts):
    text = "".join(parts)
    lines, _ = split_endings(text)
    assert restore_line_endings(text, lines) == text


def test_edited_lines_keep_their_neighbours_endings():
    original = "a\r\nb\nc\r\n"
    lines, _ = split_endings(original)
    lines[1] = "B"
    assert restore_line_endings(original, lines) == "a\r\nB\nc\r\n"
    crlf = "x\r\ny\r\n"
    assert restore_line_endings(crlf, ["x", "new", "y", ""]) == "x\r\nnew\r\ny\r\n"


def test_buffer_file_save_keeps_bom(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes(b"\xef\xbb\xbfhi\r\n")
    buffer = BufferFile.open(path)
    buffer.save(["hi there", ""])
    assert path.read_bytes() == b"\xef\xbb\xbfhi there\r\n"


def test_highlighting_and_syntax_commands_share_one_language_detection(tmp_path):
    """The highlighter used to go by suffix alone and Fill body by pygments + content: a script
    without a suffix was plain text to one and Python to the other."""
    from sharpen.app.tui.buffer_file import language_for
    from sharpen.core.languages import detect_language

    script = tmp_path / "deploy"
    text = "#!/usr/bin/env python3\nimport os\n\ndef main():\n    return 0\n"
    available = {"python", "markdown", "json"}
    assert language_for(script, text, available) == detect_language(str(script), text) == "python"
    assert language_for(None, text, available) == "python"  # an untitled buffer: its content decides
    assert language_for(tmp_path / "notes.txt", "hello\n", available) is None  # plain text
