"""The editor's per-keystroke work does not grow with the file (bench/typing_latency.py measures it)."""
from __future__ import annotations

from pilot import make_app

SIZE = (100, 32)


async def test_highlights_on_screen_match_a_whole_file_query_after_edits(tmp_path):
    """Only the rows around the view are queried; after an edit that opens a string spanning
    lines, and after scrolling far down, the rows on screen look as a whole-file query says."""
    body = "".join(f"def f{i}(x):\n    return x + {i}  # comment {i}\n" for i in range(3000))
    path = tmp_path / "big.py"
    path.write_text(body)
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor

        def whole_file_rows(first: int, last: int) -> dict:
            expected: dict[int, set] = {}
            for name, nodes in editor.document.query_syntax_tree(editor._highlight_query).items():
                for node in nodes:
                    (r0, c0), (r1, c1) = node.start_point, node.end_point
                    for row in range(max(r0, first), min(r1, last - 1) + 1):
                        start = c0 if row == r0 else 0
                        end = c1 if row == r1 else None
                        expected.setdefault(row, set()).add((start, end, name))
            return expected

        def check() -> None:
            top = int(editor.scroll_y)
            first, last = top, top + SIZE[1] - 3
            expected = whole_file_rows(first, last)
            for row in range(first, last):
                assert set(editor._highlights.get(row, [])) == expected.get(row, set()), row

        check()
        editor.move_cursor((1, 4))
        await pilot.press(*'"""', "enter")  # a string opens and runs to the next triple quote
        await pilot.pause()
        check()
        editor.scroll_to(y=4000, animate=False)
        await pilot.pause()
        check()
        assert editor._highlight_window[1] - editor._highlight_window[0] < 1000  # never the whole file


def test_the_wrapped_height_is_kept_not_summed_per_read(tmp_path):
    from sharpen.app.tui.document import MeasuredWrappedDocument, StrictDocument

    doc = MeasuredWrappedDocument(StrictDocument("a\n" * 1000), tab_width=4)
    doc.wrap(80)
    assert doc.height == 1001
    doc._wrap_offsets = None  # a second read does not touch the offsets at all
    assert doc.height == 1001


def test_the_unwrapped_fast_path_equals_textuals_wrap():
    """Soft wrap off: MeasuredWrappedDocument skips the per-line pass, with the same tables."""
    from textual.document._wrapped_document import WrappedDocument

    from sharpen.app.tui.document import MeasuredWrappedDocument, StrictDocument

    text = "def f(x):\n\treturn x\t# tab\n\n  東京\t☃\n\t\t\nlast"
    for tab_width in (4, 8):
        ours = MeasuredWrappedDocument(StrictDocument(text), tab_width=tab_width)
        theirs = WrappedDocument(StrictDocument(text), tab_width=tab_width)
        assert_same_tables(ours, theirs)


def assert_same_tables(ours, theirs) -> None:
    """MeasuredWrappedDocument's tables read as Textual's WrappedDocument's do."""
    for name in ("_wrap_offsets", "_offset_to_line_info", "_line_index_to_offsets", "_tab_width_cache"):
        assert [list(x) if isinstance(x, (list, tuple)) and name != "_offset_to_line_info" else x for x in getattr(ours, name)] \
            == list(getattr(theirs, name)), name
    assert ours.height == theirs.height
    assert ours._offset_to_line_info[-1] == theirs._offset_to_line_info[-1]
    assert ours._line_index_to_offsets[1:3] == theirs._line_index_to_offsets[1:3]


def test_unwrapped_edits_keep_the_tables_textual_keeps():
    """With soft wrap off an edit updates only the tab widths of its lines (the row tables are
    computed); after Enter, joined lines, pasted blocks and tabs the tables read as Textual's."""
    from textual.document._wrapped_document import WrappedDocument

    from sharpen.app.tui.document import MeasuredWrappedDocument, RowTable, StrictDocument

    text = "def f(x):\n\treturn x\t# tab\n\n  東京\t☃\n\t\t\nlast"
    ours_doc, theirs_doc = StrictDocument(text), StrictDocument(text)
    ours, theirs = MeasuredWrappedDocument(ours_doc, tab_width=4), WrappedDocument(theirs_doc, tab_width=4)
    edits = [((0, 9), (0, 9), "\n"), ((1, 0), (3, 2), ""), ((0, 0), (0, 0), "a\tb\nc\n\nd"), ((5, 1), (5, 1), "\t"),
             ((2, 0), (6, 0), "x"), ((0, 0), (0, 1), "")]
    for start, end, insert in edits:
        for doc, wrapped in ((ours_doc, ours), (theirs_doc, theirs)):
            result = doc.replace_range(start, end, insert)
            wrapped.wrap_range(start, end, result.end_location)
        assert isinstance(ours._offset_to_line_info, RowTable)
        assert_same_tables(ours, theirs)


def test_the_first_parse_from_bytes_is_the_tree_textual_builds():
    from textual._tree_sitter import get_language
    from textual.document._syntax_aware_document import SyntaxAwareDocument

    from sharpen.app.tui.document import StrictSyntaxDocument

    python = get_language("python")
    for text in ("def f(x):\n    return x  # 東京\n", "a = 1\r\nb = [\r\n  2,\r\n]", "", "x = '''\n\n'''\n\n"):
        ours, theirs = StrictSyntaxDocument(text, python), SyntaxAwareDocument(text, python)
        assert str(ours._syntax_tree.root_node) == str(theirs._syntax_tree.root_node)
        assert ours._syntax_tree.root_node.end_byte == theirs._syntax_tree.root_node.end_byte


def test_the_kept_text_and_widths_follow_every_edit():
    """StrictDocument keeps its text and line widths between edits: after any edit they are what
    a fresh document of the same text computes."""
    from sharpen.app.tui.document import StrictDocument

    doc = StrictDocument("a\n\tbb\nccc東\n")
    assert doc.text == "a\n\tbb\nccc東\n" and tuple(doc.get_size(4)) == (6, 4)
    for start, end, insert in (((1, 1), (1, 3), "x" * 20), ((0, 0), (2, 0), ""), ((0, 3), (0, 3), "\nnew\n\tline")):
        doc.replace_range(start, end, insert)
        fresh = StrictDocument(doc.text)
        assert doc.text == "\n".join(doc.lines) and doc.get_size(4) == fresh.get_size(4) and doc.get_size(8) == fresh.get_size(8)


def test_edits_keep_the_source_bytes_and_the_tree_a_fresh_parse_builds():
    """StrictSyntaxDocument splices its source bytes and re-parses from them: after any edits
    (multi-byte text, CRLF, line breaks inserted and removed, the widest line shrinking) the
    bytes, the tree and the size are what a fresh document of the same text has, and the tree
    is the one Textual's callback-driven SyntaxAwareDocument keeps through the same edits."""
    from hypothesis import example, given, settings, strategies as st
    from textual._tree_sitter import get_language
    from textual.document._syntax_aware_document import SyntaxAwareDocument
    from tree_sitter import Parser

    from sharpen.app.tui.document import StrictSyntaxDocument

    python = get_language("python")
    pieces = st.sampled_from(["x", "東京", "\n", "def f():\n    return 1\n", "'''", "(", ")", "  ", "#", ""])

    @settings(max_examples=60, deadline=None)
    @given(newline=st.sampled_from(["\n", "\r\n"]), edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.lists(pieces, max_size=3)), max_size=8))
    @example(newline="\r\n", edits=[(0, 0, ["def f():\n    return 1\n"])])  # lines with a bare "\n" into a CRLF document
    def run(newline, edits):
        text = newline.join(["def g(a):", "    return a  # 東", "", "x = [1,", "  2]", "a_rather_long_line = 'the widest of them all'"])
        ours, theirs = StrictSyntaxDocument(text, python), SyntaxAwareDocument(text, python)
        for a, b, insert in edits:
            rows = ours.line_count
            start = (a % rows, 0)
            start = (start[0], a % (len(ours[start[0]]) + 1))
            end = (b % rows, 0)
            end = (end[0], b % (len(ours[end[0]]) + 1))
            ours.replace_range(start, end, "".join(insert))
            # Textual's own gets the document's line break, as TextArea gives it: a bare "\n" inserted into
            # a CRLF document is one byte in its tree edit and two in its text, and its tree drifts (found
            # by this test; ours matches a fresh parse either way). The lines come out the same.
            theirs.replace_range(start, end, "".join(insert).replace("\n", newline))
            ours.get_size(4)  # measured between edits, as TextArea does after each one
        source = (newline.join(ours.lines) + newline).encode()  # the newline the document started with
        assert bytes(ours._source) == source
        assert ours._line_bytes == [len(line.encode()) for line in ours.lines]
        fresh_tree = Parser(python).parse(source)
        assert str(ours._syntax_tree.root_node) == str(fresh_tree.root_node) == str(theirs._syntax_tree.root_node)
        assert ours._syntax_tree.root_node.end_byte == fresh_tree.root_node.end_byte
        assert ours.get_size(4) == StrictSyntaxDocument(ours.text, python).get_size(4)
        for row in range(ours.line_count):
            assert ours._location_to_byte_offset((row, len(ours[row]))) == theirs._location_to_byte_offset((row, len(ours[row])))

    run()


async def test_a_languages_highlight_query_is_prepared_once_not_per_document(tmp_path, monkeypatch):
    """Preparing Python's query costs ~60 ms; every next-edit frame, preview and ghost sets a
    document on a text area, so preparing per document made each of them pay it."""
    from sharpen.app.tui import highlighted_area
    from sharpen.app.tui.document import StrictSyntaxDocument

    prepared = []
    real = StrictSyntaxDocument.prepare_query
    monkeypatch.setattr(StrictSyntaxDocument, "prepare_query", lambda self, query: prepared.append(query) or real(self, query))
    monkeypatch.setattr(highlighted_area, "_PREPARED", {}, raising=False)
    path = tmp_path / "a.py"
    path.write_text("def f(x):\n    return x\n")
    app = make_app([path])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        for text in ("x = 1\n", "def g():\n    pass\n", "'''s'''\n"):
            editor._set_document(text, "python")
            await pilot.pause()
        assert editor._highlight_query is not None and len(prepared) == 1
        assert "string" in {name for _, _, name in editor._highlights.get(0, [])}  # still highlights
