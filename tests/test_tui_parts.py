"""The editor's pure parts: preview layout, line-ending restore, config and theme files."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sharpen.app.config import load_config, parse_config
from sharpen.app.tui.buffer_file import BufferFile, restore_line_endings, split_endings
from sharpen.app.tui.preview import DOUBTFUL, MARKED, MASK_GLYPH, MASKED, SURE, UNSURE, Piece, compose, span_pieces
from sharpen.app.tui.themes import load_themes, parse_theme
from sharpen.core.errors import UsageError


def test_span_pieces_show_masks_hide_pad_and_grade_confidence():
    decode = lambda ids: [chr(ord("a") + i) for i in ids]  # noqa: E731
    pieces = span_pieces((0, None, 9, 1, 2), (0.95, 0.1, 0.99, 0.6, 0.2), decode, end_ids={9})
    assert pieces == [Piece("a", SURE), Piece(MASK_GLYPH, MASKED), Piece("b", UNSURE), Piece("c", DOUBTFUL)]


def test_compose_splices_pieces_and_styles_each_line():
    text = "one\ntwo three\nfour\n"
    layout = compose(text, [(4, 7), (14, 18)], [[Piece("2\n2", SURE)], [Piece(MASK_GLYPH * 2, MASKED)]])
    assert layout.text == "one\n2\n2 three\n░░\n"
    assert layout.styles_for(1) == [(0, 1, SURE)]
    assert layout.styles_for(2) == [(0, 1, SURE)]
    assert layout.styles_for(3) == [(0, 2, MASKED)]
    assert layout.span_rows == (1, 3)
    marked = compose(text, [(4, 7)], [[Piece("2\n2", SURE)]], marks=[(0, 3), (8, 13), (5, 9)])
    assert marked.styles_for(0) == [(0, 3, MARKED)]  # before the span: where it was
    assert marked.styles_for(2) == [(0, 1, SURE), (2, 7, MARKED)]  # after it: moved with its text


_chunks = st.text(alphabet="ab\n", max_size=6)


@given(_chunks, st.lists(st.tuples(_chunks, st.lists(st.tuples(_chunks, st.sampled_from([SURE, MASKED])), max_size=3)), max_size=3))
def test_compose_styles_cover_exactly_the_span_characters(head, spans):
    text, offsets, pieces, position = head, [], [], len(head)
    for gap, span in spans:  # a replaced region "XY" after each gap
        text += gap + "XY"
        offsets.append((position + len(gap), position + len(gap) + 2))
        pieces.append([Piece(t, kind) for t, kind in span])
        position = len(text)
    layout = compose(text, offsets, pieces)
    lines = layout.text.split("\n")
    styled = "".join(lines[row][a:b] for row in sorted(layout.line_styles) for a, b, _ in layout.line_styles[row])
    assert styled == "".join(p.text for span in pieces for p in span).replace("\n", "")
    assert [layout.text[a:b] for a, b in layout.span_ranges] == ["".join(p.text for p in span) for span in pieces]


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


def test_config_parses_every_section_and_names_errors(tmp_path):
    config = parse_config('theme = "sharpen-light"\n[model]\nmodel = "/m"\n[sampling]\nsteps = 12\npolicy = "margin"\n[edit]\ncandidates = 3\n[keymap]\ninfill = "f5"\n')
    assert (config.model.model, config.editor.theme, config.sampling.steps, config.sampling.policy) == ("/m", "sharpen-light", 12, "margin")
    assert config.editing.candidates == 3
    assert config.keymap == {"infill": "f5"}
    with pytest.raises(UsageError, match="unknown setting 'stpes'"):
        parse_config("[sampling]\nstpes = 3\n")
    with pytest.raises(UsageError, match=r"\[sampling\] policy must be one of: confidence"):
        parse_config('[sampling]\npolicy = "loudest"\n')
    with pytest.raises(UsageError, match=r"\[edit\] candidates must be between 1 and 16"):
        parse_config('[edit]\ncandidates = 40\n')
    with pytest.raises(UsageError, match=r"\[sampling\] steps must be a whole number"):
        parse_config('[sampling]\nsteps = "many"\n')
    with pytest.raises(UsageError, match="not found"):
        load_config(tmp_path / "missing.toml")


def test_config_of_the_older_layout_still_reads():
    old = parse_config('model = "/m"\ndevice = "cpu"\nrewrite_strength = 0.3\ninfill_tokens = 12\n[sampling]\ncontext_tokens = 64\nlength = "adaptive"\n')
    assert (old.model.model, old.model.device, old.editing.strength, old.editing.infill_tokens) == ("/m", "cpu", 0.3, 12)
    assert (old.editing.context_tokens, old.editing.length) == (64, "adaptive")


def test_command_line_options_win_over_the_config(tmp_path):
    from sharpen.app.cli import build_parser, config_from

    path = tmp_path / "config.toml"
    path.write_text('[model]\ndevice = "cuda"\n[sampling]\nsteps = 9\nseed = 4\n')
    argv = ["f.py", "--config", str(path), "--steps", "3", "--theme", "sharpen-dusk", "--length", "adaptive", "--cache", "none"]
    merged = config_from(build_parser().parse_args(argv))
    assert (merged.sampling.steps, merged.sampling.seed, merged.model.device, merged.editor.theme) == (3, 4, "cuda", "sharpen-dusk")
    assert (merged.editing.length, merged.sampling.cache, merged.sampling.kernels) == ("adaptive", "none", "auto")


def test_shipped_and_user_themes_load(tmp_path):
    (tmp_path / "mine.toml").write_text('name = "mine"\ndark = false\n[colors]\nprimary = "#123456"\n')
    themes = load_themes(tmp_path)
    assert {"sharpen-dark", "sharpen-light", "sharpen-dusk", "mine"} <= set(themes)
    assert themes["sharpen-light"].app_theme.dark is False
    assert "keyword.return" in themes["sharpen-dark"].syntax.syntax_styles  # groups expand to tree-sitter names
    assert "string" in themes["mine"].syntax.syntax_styles  # derived from the palette when [syntax] is missing
    with pytest.raises(UsageError, match="colors.primary"):
        parse_theme('[colors]\nprimary = "not a colour"\n', Path("bad.toml"))


def test_the_editor_module_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, sharpen.app.tui.editor_app; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_highlighting_and_syntax_commands_share_one_language_detection(tmp_path):
    """The highlighter used to go by suffix alone and Fill body by pygments + content: a script
    without a suffix was plain text to one and Python to the other."""
    from sharpen.app.tui.buffer_file import language_for
    from sharpen.core.syntax import detect_language

    script = tmp_path / "deploy"
    text = "#!/usr/bin/env python3\nimport os\n\ndef main():\n    return 0\n"
    available = {"python", "markdown", "json"}
    assert language_for(script, text, available) == detect_language(str(script), text) == "python"
    assert language_for(None, text, available) == "python"  # an untitled buffer: its content decides
    assert language_for(tmp_path / "notes.txt", "hello\n", available) is None  # plain text
