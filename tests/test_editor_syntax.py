"""Pilot tests of the editor's syntax commands and its key bindings.

Selections grow and shrink by syntax node and Fill body masks a function body (core.syntax);
infills rank candidates by parse (core.candidates). The model is the tiny random checkpoint:
tests check where text changes, never what the model wrote.
"""
from __future__ import annotations


from pilot import example_in_src as example  # noqa: F401  (a fixture)
from pilot import make_app, notices, wait_for, with_model

from sharpen.app.config import Config
from sharpen.app.tui.editor_app import ALL_BINDINGS, BINDINGS, SharpenApp
from sharpen.app.tui.editor_pane import IDLE, PREVIEW, EditorPane
from sharpen.app.tui.palette import PALETTE
from sharpen.core.syntax import body_range, parse_document

SIZE = (110, 32)


def test_syntax_keys_are_bound_once_and_listed():
    keys = [key.strip() for binding in ALL_BINDINGS for key in binding.key.split(",")]
    assert len(keys) == len(set(keys)), "two bindings share a key"
    ids = {c.binding_id for c in PALETTE}
    assert {"expand-selection", "shrink-selection", "fill-body"} <= ids
    # No key that terminals or tmux mangle (Alt+F/Alt+B are word motion, Alt+punctuation is ESC+char).
    for binding in ALL_BINDINGS:
        if binding.id in ("expand-selection", "shrink-selection", "fill-body"):
            assert binding.key in ("alt+e", "alt+d", "alt+l,f8")


def test_buffer_commands_are_bound_on_the_pane_and_global_ones_on_the_app():
    """Bindings live on the widget that owns the action: Textual's focus chain finds the active buffer."""
    pane_ids = {b.id for b in EditorPane.BINDINGS}
    assert {"infill", "rewrite", "accept", "cancel", "save", "find", "fill-body"} <= pane_ids
    assert {b.id for b in BINDINGS} == {"open-file", "close-buffer", "next-buffer", "previous-buffer", "help", "quit"}
    for binding in EditorPane.BINDINGS:
        assert hasattr(EditorPane, "action_" + binding.action.split("(")[0]), binding.id
    assert SharpenApp.__mro__[1].__module__.startswith("textual")  # no mixins between the app and App


async def test_expand_and_shrink_selection_by_syntax_node(example):
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        text = editor.buffer_text
        at = text.index("number % 15")
        editor.select_offsets(at + 2, at + 2)  # inside `number`
        await pilot.press("alt+e")
        first = editor.selected_offsets()
        assert text[first[0]:first[1]] == "number"
        await pilot.press("alt+e")
        second = editor.selected_offsets()
        assert second[0] <= first[0] and first[1] <= second[1] and second != first
        await pilot.press("alt+e")
        await pilot.press("alt+d", "alt+d")
        assert editor.selected_offsets() == first  # back down the history exactly
        await pilot.press("alt+d")
        assert editor.selected_offsets() == (at + 2, at + 2)
        # A selection made by hand shrinks to the inner node at the cursor.
        start = text.index("if number % 15")
        end = text.index('"FizzBuzz"') + len('"FizzBuzz"')
        editor.select_offsets(start, end)
        await pilot.press("alt+d")
        inner = editor.selected_offsets()
        assert start <= inner[0] and inner[1] <= end and inner != (start, end)
        # Plain text: line, then paragraph.
        await app.add_buffer(type(editor.buffer)(None, "one two\nthree\n\nfour\n"))
        plain = app.active_pane().editor
        plain.select_offsets(1, 1)
        await pilot.press("alt+e")
        assert plain.selected_offsets() == (0, 7)


async def test_expand_history_moves_with_edits_elsewhere(example):
    """An edit outside the expanded selections moves their history with the text (core.changes);
    before, any change forgot it."""
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        editor = app.active_pane().editor
        at = editor.buffer_text.index("number % 15")
        editor.select_offsets(at + 2, at + 2)
        await pilot.press("alt+e")
        first = editor.selected_offsets()
        await pilot.press("alt+e")
        editor.insert("# a comment line\n", (0, 0))  # TextArea moves the selection along with it
        await pilot.press("alt+d")
        assert editor.selected_offsets() == (first[0] + 17, first[1] + 17)


async def test_fill_body_masks_the_function_body_and_accepts_in_one_undo_step(example, tiny_denoiser):
    app = make_app([example])
    async with app.run_test(size=SIZE) as pilot:
        pane = app.active_pane()
        editor = pane.editor
        text = editor.buffer_text
        await pilot.press("alt+l")  # no model yet: says so, buffer untouched
        assert editor.buffer_text == text
        await with_model(app, pilot, tiny_denoiser)
        def_line = text[: text.index("def fizzbuzz")].count("\n")
        editor.move_cursor((def_line, 2))
        expected = body_range(parse_document(text, path=str(example)), editor.offset_of((def_line, 2)))
        assert text[expected[0]:expected[1]].lstrip().startswith("if number % 15")  # the docstring stays as context
        await pilot.press("alt+l")
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        assert [(s.start, s.end, s.mode) for s in pane.edit_run.spans] == [(*expected, "infill")]
        await pilot.press("tab")
        await wait_for(pilot, lambda: pane.phase == IDLE)
        new = editor.buffer_text
        assert new.startswith(text[: expected[0]]) and new.endswith(text[expected[1]:])
        await pilot.press("ctrl+z")
        assert editor.buffer_text == text
        # On an import line there is no body: a message, no run.
        editor.move_cursor((0, 0))
        (example.parent / "imports.py").write_text("import os\n")
        await app.add_buffer(type(editor.buffer).open(example.parent / "imports.py"))
        await pilot.press("alt+l")
        assert app.active_pane().phase == IDLE and "no function or block body" in notices(app)


async def test_candidates_rank_parsing_infills_first_and_cycle(example, tiny_denoiser):
    config = Config.of(steps=4, candidates=3, frame_rate=60)
    app = make_app([example], config)
    async with app.run_test(size=SIZE) as pilot:
        await with_model(app, pilot, tiny_denoiser)
        pane = app.active_pane()
        editor = pane.editor
        text = editor.buffer_text
        start = text.index('"FizzBuzz"')
        editor.select_offsets(start, start + len('"FizzBuzz"'))
        await pilot.press("alt+i")
        await wait_for(pilot, lambda: pane.phase == PREVIEW)
        result = pane.edit_run.result
        assert result.candidates and len(result.samples) == len(result.candidates) == pane.edit_run.alternatives
        parses = [c.parses for c in result.candidates]
        assert parses == sorted(parses, reverse=True)  # a parsing candidate is never behind a broken one
        assert ("parses" in app.status.run) or ("breaks the parse" in app.status.run)
        assert pane.edit_run.alternatives > 1  # distinct lengths give distinct texts
        await pilot.press("alt+n")
        assert pane.edit_run.choice == 1
        await pilot.press("alt+p")
        assert pane.edit_run.choice == 0
        await pilot.press("escape")
        await wait_for(pilot, lambda: pane.phase == IDLE)
        assert editor.buffer_text == text
