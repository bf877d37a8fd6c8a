"""Next-edit prediction in the editor (app/tui/next_edit_overlay.py) and the ghost's partial
accept (app/tui/next_edit_actions.py), through Textual's pilot, on a scripted deterministic model
(tests/next_edit_scripted.py): rename a parameter, pause, the other uses are drawn as edits over
the buffer; Tab jumps, Tab applies (one undo step); apply-all; Esc; typing cancels; "no edit"
draws nothing."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from next_edit_scripted import ScriptedBackend, renamer
from pilot import make_app, wait_for

from sharpen.app.config import Config
from sharpen.core.next_edit.request import Hunk, NextEditAnswer
from sharpen.app.tui.ghost import SHOWN as GHOST_SHOWN
from sharpen.app.tui.messages import EditProgress, ModelLoaded, RunStats
from sharpen.app.tui.next_edit_actions import next_line, next_word
from sharpen.app.tui.next_edit_overlay import RUNNING, SHOWN, next_edit_default, off_screen, one_change
from sharpen.app.tui.preview import DELETED, GHOST, INSERTED
from sharpen.app.tui.preview_view import MARGIN_ROWS
from sharpen.app.tui.run_state import ModelRun

SIZE = (100, 32)
SOURCE = "def area(width, height):\n    return width * height\n\n\ndef show(width):\n    print(width)\n"
RENAMED = SOURCE.replace("width", "w", 1)  # what the user typed: the definition's parameter


def config(**values) -> Config:
    """A config naming a checkpoint (next edits on by default); the ghost off unless asked."""
    return Config.of(model="/models/scripted", frame_rate=60, next_edit_pause_ms=100, **{"ghost": False, **values})


@pytest.fixture
def source(tmp_path) -> Path:
    path = tmp_path / "area.py"
    path.write_text(SOURCE)
    return path


async def load(app, pilot, backend) -> None:
    app.post_message(ModelLoaded(backend, "cpu", 0.0))
    await wait_for(pilot, lambda: app.session.backend is not None)


async def rename_parameter(pilot, editor) -> None:
    """Select `width` in `def area(width, ...` and type `w` over it, as a user would."""
    before = editor.text
    editor.selection = ((0, 9), (0, 14))
    await pilot.press("w")
    assert editor.text == before.replace("width", "w", 1)


def kinds(pane) -> set[str]:
    return {kind for styles in pane.preview.layout_shown.line_styles.values() for *_, kind in styles}


async def test_a_frame_on_a_long_buffer_rebuilds_only_the_lines_its_hunks_touch(tmp_path):
    """The layer holds the view and a margin (not 5,000 lines), and a draft over the same text
    replaces only the rows whose drawing changed: counted as rows handed to the layer."""
    path = tmp_path / "long.py"
    path.write_text("x = 1\n" * 2500 + SOURCE + "y = 2\n" * 2500)
    app = make_app([path], config())
    async with app.run_test(size=SIZE) as pilot:
        pane = app.active_pane()
        editor, preview, next_edit = pane.editor, pane.preview, pane.next_edit
        editor.move_cursor((2504, 0))
        editor.scroll_cursor_visible()
        await pilot.pause()
        built = []  # rows handed to the layer per call: ("load", rows) / ("replace", rows)
        load_text, replace = preview.load_text, preview.replace
        preview.load_text = lambda text: (built.append(("load", text.count("\n") + 1)), load_text(text))[1]
        preview.replace = lambda text, start, end: (built.append(("replace", text.count("\n") + 1)), replace(text, start, end))[1]
        text = editor.buffer_text  # a run's drafts are all over one snapshot
        uses = [i for i in range(len(text)) if text.startswith("width", i)]

        def draft(**news):  # hunks on the uses: u0="w" writes "w" over the first `width`
            return [Hunk(uses[int(k[1:])], uses[int(k[1:])] + 5, new, 0.9) for k, new in sorted(news.items())]

        next_edit._draw(text, draft(u0="w"), None)
        assert [kind for kind, _ in built] == ["load"] and built[0][1] < 2 * MARGIN_ROWS + SIZE[1] + 2  # the window, not the file
        first = preview.line_number_start - 1
        row = lambda line: preview.document.get_line(line - first)
        assert row(2500) == "def area(widthw, height):"
        built.clear()
        next_edit._draw(text, draft(u0="w", u1="w"), None)  # the next frame: a second hunk, on the line below
        assert built == [("replace", 1)]  # that line only: the first hunk's line draws the same
        assert row(2501) == "    return widthw * height"
        built.clear()
        next_edit._draw(text, draft(u0="wi", u3="w"), None)  # lines 2500, 2501 and 2505 change; 2502-2504 do not
        assert sorted(built) == [("replace", 1), ("replace", 2)]
        assert (row(2500), row(2501), row(2504), row(2505)) == ("def area(widthwi, height):", "    return width * height",
                                                                 "def show(width):", "    print(widthw)")
        assert editor.text == text  # the buffer is never written


class Paced(ScriptedBackend):
    """Each step takes `seconds`, as a model's do: the run's board draws its latest frame between
    steps (frames queued behind the result are not drawn, so an instant script shows none)."""

    def __init__(self, *args, seconds: float = 0.05, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.seconds = seconds
        self.ran = 0  # the steps it ran

    def run(self, request, should_stop=lambda: False, every=0.0):
        for event in super().run(request, should_stop, every):
            self.ran += 1
            time.sleep(self.seconds)
            yield event


async def test_a_rename_proposes_the_other_uses_tab_jumps_tab_applies_undo_restores(source):
    app = make_app([source], config())
    async with app.run_test(size=SIZE) as pilot:
        await load(app, pilot, Paced(renamer("width", "w")))
        pane = app.active_pane()
        editor, next_edit = pane.editor, pane.next_edit
        assert next_edit.enabled
        await rename_parameter(pilot, editor)
        await wait_for(pilot, lambda: next_edit.state == SHOWN)
        run = next_edit.last
        assert run.drafts, "drawn while it sharpens"
        hunks = next_edit.offer.hunks
        uses = [i for i in range(len(RENAMED)) if RENAMED.startswith("width", i)]
        assert [h.start for h in hunks] == uses and all(h.text == "w" for h in hunks)
        assert editor.text == RENAMED  # the overlay never writes the buffer
        assert {DELETED, INSERTED} <= kinds(pane) and pane.has_class("-previewing")
        # each hunk as its old text (struck) then its new text (faint), the rest as the buffer
        assert pane.preview.text == RENAMED.replace("(width)", "(widthw)").replace("n width", "n widthw")
        assert pane.notice.startswith("next edit: 3 edits")
        events = app.session.edit_history.events()
        assert events[-1].path == "area.py" and "-def area(width, height):" in events[-1].diff

        undo_depth = len(editor.history.undo_stack)
        await pilot.press("tab")  # first Tab: the cursor jumps to the first hunk; nothing written
        assert editor.offset_of(editor.selection.end) == uses[0] and editor.text == RENAMED
        await pilot.press("tab")  # second Tab: that hunk, one undo step
        once = RENAMED[:uses[0]] + "w" + RENAMED[uses[0] + 5:]
        assert editor.text == once
        assert len(editor.history.undo_stack) == undo_depth + 1
        assert len(next_edit.offer.hunks) == 2 and next_edit.state == SHOWN  # the rest stay, moved with the text
        await pilot.press("tab", "tab")
        assert editor.text == once.replace("width", "w", 1)
        editor.undo()
        await pilot.pause()
        assert editor.text == once  # undo takes back one hunk
        assert app.session.edit_history.events()[-2].predicted  # an applied hunk is written as a prediction the user took


async def test_apply_all_is_one_undo_step_and_esc_dismisses(source):
    app = make_app([source], config())
    async with app.run_test(size=SIZE) as pilot:
        await load(app, pilot, ScriptedBackend(renamer("width", "w")))
        pane = app.active_pane()
        editor, next_edit = pane.editor, pane.next_edit
        await rename_parameter(pilot, editor)
        await wait_for(pilot, lambda: next_edit.state == SHOWN)
        await pilot.press("escape")
        assert next_edit.state is None and next_edit.offer is None and not pane.has_class("-previewing")
        assert editor.text == RENAMED and not pane.notice.startswith("next edit")

        editor.move_cursor((5, 4))
        await pilot.press("x", "backspace")  # an edit and a pause: asked again
        await wait_for(pilot, lambda: next_edit.state == SHOWN)
        depth = len(editor.history.undo_stack)
        await pilot.press("f9")  # apply all
        assert editor.text == SOURCE.replace("width", "w")
        assert next_edit.state is None and len(editor.history.undo_stack) == depth + 1
        editor.undo()
        await pilot.pause()
        assert editor.text == RENAMED


async def test_a_hunk_below_the_view_is_marked_in_the_gutter_and_the_status_bar(tmp_path):
    path = tmp_path / "long.py"
    path.write_text(SOURCE + "\n" * 60 + "print(width)\n")
    app = make_app([path], config())
    async with app.run_test(size=SIZE) as pilot:
        await load(app, pilot, ScriptedBackend(renamer("width", "w")))
        pane = app.active_pane()
        editor, next_edit = pane.editor, pane.next_edit
        await rename_parameter(pilot, editor)
        await wait_for(pilot, lambda: next_edit.state == SHOWN)
        last = len(editor.document.lines) - 1
        assert next_edit.offer.hunks[-1].start == editor.offset_of((last - 1, 6))
        assert ", 1 below ↓ (line 67)" in pane.notice and pane.preview.gutter_arrows == (False, True)
        bottom = pane.preview.render_line(pane.preview.size.height - 1)
        assert bottom.text.startswith("↓") and not pane.preview.render_line(0).text.startswith("↑")
        for _ in range(3):
            await pilot.press("tab", "tab")  # the three on screen applied; the last one is still below
        await pilot.press("tab")  # jumps there: the view scrolls to it, nothing is off screen
        await wait_for(pilot, lambda: pane.preview.gutter_arrows == (False, False))
        assert "below" not in pane.notice and "above" not in pane.notice


async def test_tab_to_a_hunk_past_the_layers_lines_draws_it_around_the_new_view(tmp_path):
    """The layer holds the view and 100 lines each side: a jump 400 lines down draws the layer
    again there, the hunk in it as an edit."""
    path = tmp_path / "far.py"
    path.write_text(SOURCE + "\n" * 400 + "print(width)\n")
    app = make_app([path], config())
    async with app.run_test(size=SIZE) as pilot:
        await load(app, pilot, ScriptedBackend(renamer("width", "w")))
        pane = app.active_pane()
        editor, preview, next_edit = pane.editor, pane.preview, pane.next_edit
        await rename_parameter(pilot, editor)
        await wait_for(pilot, lambda: next_edit.state == SHOWN and len(next_edit.offer.hunks) == 4)
        assert preview.document.line_count < 407  # the far use is not in the layer yet
        for _ in range(3):
            await pilot.press("tab", "tab")
        await pilot.press("tab")  # jumps 400 lines down
        await wait_for(pilot, lambda: preview.line_number_start > 1)
        row = editor.selection.end[0] - (preview.line_number_start - 1)
        assert editor.selection.end[0] == 406 and preview.document.get_line(row) == "print(widthw)"
        assert [kind for *_, kind in preview.layout_shown.styles_for(row)] == [DELETED, "next-edit-current"]
        await pilot.press("tab")
        assert editor.document.get_line(406) == "print(w)" and next_edit.state is None


async def test_drafts_whose_hunks_move_are_drawn_over_the_buffer_as_it_is(source):
    """A draft's hunk may sit elsewhere than the last one's: each is drawn over the buffer's text."""
    app = make_app([source], config())
    async with app.run_test(size=SIZE) as pilot:
        pane = app.active_pane()
        await pilot.pause()
        pane.next_edit._draw(SOURCE, [Hunk(0, 3, "async def", 0.9)], None)
        pane.next_edit._draw(SOURCE, [Hunk(SOURCE.index("print"), SOURCE.index("print") + 5, "log", 0.9)], None)
        assert pane.preview.text == SOURCE.replace("print", "printlog")


async def test_typing_cancels_a_running_prediction_at_its_next_step(source):
    backend = Paced(renamer("width", "w"), seconds=0.15, steps=20)
    app = make_app([source], config())
    async with app.run_test(size=SIZE) as pilot:
        await load(app, pilot, backend)
        pane = app.active_pane()
        editor, next_edit = pane.editor, pane.next_edit
        await rename_parameter(pilot, editor)
        await wait_for(pilot, lambda: next_edit.state == RUNNING and next_edit.run.drafts)
        run = next_edit.run
        assert run.drafts and pane.has_class("-previewing")
        await pilot.press("x")  # typing on: the run is stale
        assert run.stop.is_set() and next_edit.run is not run
        # Its draft is gone (the layer would hide what was typed); the next pause's run may already
        # show its own draft from the edit history (core/next_edit/drafts.py), drawn before any model step.
        assert not pane.has_class("-previewing") or (next_edit.run is not run and next_edit.run.drafts)
        await pilot.press("escape")  # and no new one (the next pause's) in this test
        await pilot.pause(0.6)
        assert backend.ran < 10 and run.result is None  # it stopped long before its 21 events
        assert next_edit.state is None and next_edit.offer is None


async def test_a_prediction_is_a_model_run_on_the_panes_board_and_a_superseded_ones_late_frame_is_not_drawn(source):
    backend = Paced(renamer("width", "w"), seconds=0.15, steps=20)
    app = make_app([source], config())
    async with app.run_test(size=SIZE) as pilot:
        await load(app, pilot, backend)
        pane = app.active_pane()
        editor, next_edit = pane.editor, pane.next_edit
        await rename_parameter(pilot, editor)
        await wait_for(pilot, lambda: next_edit.state == RUNNING and backend.ran >= 1)
        stale = next_edit.run
        assert isinstance(stale, ModelRun) and stale.purpose == "next-edit" and pane.runs.live(stale)
        assert stale.request.text == RENAMED and stale.text == RENAMED
        await pilot.press("x")  # a newer edit: the stale run is stopped on the board
        assert stale.stop.is_set() and not pane.runs.live(stale)
        await wait_for(pilot, lambda: next_edit.state == RUNNING and next_edit.run is not None)
        newer = next_edit.run
        assert newer is not stale and pane.runs.live(newer) and newer.text != stale.text
        drafts = len(stale.drafts)
        late = NextEditAnswer((Hunk(0, 3, "LATE", 0.9),))
        pane.post_message(EditProgress(stale.id, [], RunStats(5, 20, 0, 0, 0.1), draft=late))
        await pilot.pause(0.05)
        assert len(stale.drafts) == drafts and "LATE" not in pane.preview.text  # dropped by the board
        await pilot.press("escape")  # Esc: the board's stop
        assert newer.stop.is_set() and not pane.runs.live(newer) and next_edit.run is None
        ran = backend.ran
        await pilot.pause(0.5)
        assert backend.ran <= ran + 1  # it stopped at its next step


async def test_no_edit_draws_nothing(source):
    app = make_app([source], config())
    async with app.run_test(size=SIZE) as pilot:
        await load(app, pilot, ScriptedBackend(lambda text, span: text))  # the window as it was
        pane = app.active_pane()
        editor, next_edit = pane.editor, pane.next_edit
        await rename_parameter(pilot, editor)
        await wait_for(pilot, lambda: next_edit.last is not None)
        assert next_edit.last.result.answer.quiet and next_edit.state is None and next_edit.offer is None
        assert not pane.has_class("-previewing") and not pane.notice.startswith("next edit")


async def test_on_with_a_model_off_with_the_embedded_one_and_the_palette_toggles(source):
    assert next_edit_default(config()) and not next_edit_default(Config.of())
    assert next_edit_default(Config.of(next_edit=True))
    app = make_app([source], config())
    async with app.run_test(size=SIZE) as pilot:
        await load(app, pilot, ScriptedBackend(renamer("width", "w")))
        pane = app.active_pane()
        await app.run_palette_action("toggle_next_edit")
        assert not pane.next_edit.enabled
        await rename_parameter(pilot, pane.editor)
        await pilot.pause(0.4)
        assert pane.next_edit.last is None and pane.next_edit.state is None


GHOST_TEXT = "foo bar\nbaz qux\nend"


async def test_ghost_accepts_the_next_word_and_the_next_line_each_one_undo_step(source):
    completion = ScriptedBackend(lambda text, span: GHOST_TEXT if span.start == span.end else text)
    app = make_app([source], config(ghost=True, ghost_pause_ms=100, next_edit=False))
    async with app.run_test(size=SIZE) as pilot:
        await load(app, pilot, completion)
        pane = app.active_pane()
        editor, ghost = pane.editor, pane.ghost
        editor.move_cursor((5, len(editor.document.lines[5])))
        await pilot.press("enter")
        await wait_for(pilot, lambda: ghost.state == GHOST_SHOWN)
        at, before = ghost.run.offset, editor.text
        depth = len(editor.history.undo_stack)
        await pilot.press("ctrl+right")
        assert editor.text == before[:at] + "foo" + before[at:]
        assert ghost.shown and ghost.run.result.spans[0].text == " bar\nbaz qux\nend"  # the rest stays
        assert GHOST in kinds(pane)
        await pilot.press("ctrl+right")
        assert editor.text == before[:at] + "foo bar" + before[at:]
        await pilot.press("ctrl+down")  # the line break, the next line and its break
        assert editor.text == before[:at] + "foo bar\nbaz qux\n" + before[at:]
        assert ghost.shown and ghost.run.result.spans[0].text == "end"
        assert len(editor.history.undo_stack) == depth + 3
        editor.undo()
        await pilot.pause()
        assert editor.text == before[:at] + "foo bar" + before[at:]


def test_pure_helpers():
    assert next_word("foo bar") == "foo" and next_word("  (x)") == "  (" and next_word("\n  y") == "\n  y"
    assert next_line("a b\nc") == "a b\n" and next_line("\nc\nd") == "\nc\n" and next_line("abc") == "abc"
    change = one_change("abcdef", "abXdef")
    assert change.apply("abcdef") == "abXdef" and (change.changes[0].start, change.changes[0].end) == (2, 3)
    assert one_change("aaa", "aaaa").apply("aaa") == "aaaa" and one_change("x", "x") is None

    class H:
        def __init__(self, start):
            self.start = start

    text = "\n".join(str(i) for i in range(50))
    assert off_screen(text, [H(text.index("3")), H(text.index("20")), H(text.index("45"))], 10, 20) == ([4], [46])
