"""Pilot tests of the editor's promises from docs/safety.md, round two."""
from __future__ import annotations

import pytest
from pilot import make_app, wait_for

SIZE = (100, 32)


@pytest.mark.parametrize("suffix", [".py", ".txt"])  # highlighted (tree-sitter document) and plain
async def test_only_real_line_breaks_split_lines(tmp_path, suffix):
    """U+2028, U+2029, NEL, form feed, VT, FS/GS/RS and a lone CR in a CRLF file are text:
    an edited line keeps them, byte for byte."""
    odd = '\u2028\u2029\x85\x0c\x0b\x1c\x1d\x1e'
    original = f'x = "a{odd}b"\r\ny = 1\r\nz = "c\rd"\r\n'.encode()
    path = tmp_path / f"f{suffix}"
    path.write_bytes(original)
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        assert editor.document.lines == [f'x = "a{odd}b"', "y = 1", 'z = "c\rd"', ""]
        editor.move_cursor((0, len(editor.document.lines[0])))
        await pilot.press("!")
        editor.move_cursor((2, len(editor.document.lines[2])))
        await pilot.press("?")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not editor.unsaved)
    assert path.read_bytes() == original.replace(b'b"\r\n', b'b"!\r\n', 1).replace(b'd"\r\n', b'd"?\r\n')
