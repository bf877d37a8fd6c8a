"""app/tui/run_state.py: one ModelRun per model call, and the RunBoard that routes its worker's
messages (no Textual app: a host that records what the board asks of it)."""
from __future__ import annotations

from sharpen.app.config import Config
from sharpen.app.tui.messages import EditCancelled, EditFailed, EditFinished, EditProgress, RunStats
from sharpen.app.tui.run_state import RunBoard
from sharpen.core.spans import Span


class Host:
    """What a pane gives the board: workers, a later call, a message box."""

    def __init__(self) -> None:
        self.workers, self.later = [], []

    def run_worker(self, work, **options) -> None:
        self.workers.append((work, options))

    def call_later(self, callback, *args) -> None:
        self.later.append((callback, args))

    def post_message(self, message) -> None:  # the worker's; never called here (the work is not run)
        raise AssertionError("no worker runs in these tests")

    def run_later(self) -> None:
        later, self.later = self.later, []
        for callback, args in later:
            callback(*args)


class Owner:
    def __init__(self) -> None:
        self.told = []

    def run_frame(self, run, message) -> None:
        self.told.append(("frame", message.stats.step))

    def run_finished(self, run, message) -> None:
        self.told.append(("finished", run.result))

    def run_failed(self, run, message) -> None:
        self.told.append(("failed", message.error))


def stats(step: int) -> RunStats:
    return RunStats(step, 8, 8 - step, step, 0.01 * step)


def start(board: RunBoard, owner: Owner, purpose: str = "edit"):
    return board.start(purpose, "x = 1\n", [Span(4, 5, "infill")], owner, backend=None, config=Config(), step_ms=0, path=None)


def test_frames_coalesce_per_run_and_the_owner_sees_the_latest():
    host, owner = Host(), Owner()
    board = RunBoard(host)
    run = start(board, owner)
    assert host.workers[0][1]["group"] == "edit" and board.live(run)
    for step in (1, 2, 3):
        board.deliver(EditProgress(run.id, [[]], stats(step)))
    assert len(host.later) == 1  # one redraw for three frames
    host.run_later()
    assert owner.told == [("frame", 3)] and run.stats.step == 3
    board.deliver(EditFinished(run.id, "the result", [[]], stats(4)))
    assert owner.told[-1] == ("finished", "the result") and not board.live(run) and run.steps == 4


def test_a_stopped_runs_late_messages_are_dropped_and_two_runs_do_not_mix():
    host, edit_owner, ghost_owner = Host(), Owner(), Owner()
    board = RunBoard(host)
    edit, ghost = start(board, edit_owner), start(board, ghost_owner, "ghost")
    assert edit.id != ghost.id
    board.deliver(EditProgress(edit.id, [[]], stats(1)))
    board.stop(edit)
    assert edit.stop.is_set() and not board.live(edit)
    host.run_later()  # the frame queued before the stop is not drawn
    board.deliver(EditFinished(edit.id, "late", [[]], stats(2)))
    board.deliver(EditCancelled(edit.id))
    assert edit_owner.told == []
    board.deliver(EditFailed(ghost.id, "no room"))
    assert ghost_owner.told == [("failed", "no room")] and not board.live(ghost)


def test_a_run_whose_events_end_without_a_result_fails_instead_of_running_for_ever():
    host, owner = Host(), Owner()
    board = RunBoard(host)
    run = start(board, owner)
    board.deliver(EditCancelled(run.id))  # nobody stopped it
    assert owner.told == [("failed", "the model stopped without a result")] and not board.live(run)


def test_a_next_edit_prediction_is_a_run_on_the_board_whose_frames_carry_drafts():
    """Next-edit prediction takes the board's one worker path (run_state.RunBoard.start_next_edit):
    its job posts drafts as frames and its answer as the result; a stop ends it at its next step."""
    from next_edit_scripted import ScriptedBackend, renamer

    from sharpen.core.next_edit.history import EditHistory
    from sharpen.core.next_edit.predict import NextEditDone
    from sharpen.core.next_edit.request import NextEditRequest

    text = "def f(w):\n    return width\n"
    request = NextEditRequest.around("f.py", text, 7, EditHistory().events())
    host, owner, posted = Host(), Owner(), []
    host.post_message = posted.append  # the worker's messages, run here in this thread
    board = RunBoard(host)
    run = board.start_next_edit(request, owner, ScriptedBackend(renamer("width", "w")), Config())
    work, options = host.workers[0]
    assert run.purpose == "next-edit" == options["group"] and options["thread"] and board.live(run) and run.request is request
    work()
    drafts = [m for m in posted if isinstance(m, EditProgress)]
    assert drafts and all(m.run_id == run.id and m.draft is not None for m in drafts)
    assert isinstance(posted[-1], EditFinished) and isinstance(posted[-1].result, NextEditDone)
    assert [h.text for h in posted[-1].result.answer.hunks] == ["w"]
    for message in posted:
        board.deliver(message)
    host.run_later()
    assert owner.told[-1][0] == "finished" and not board.live(run) and run.result is posted[-1].result

    stopped, posted[:] = board.start_next_edit(request, owner, ScriptedBackend(renamer("width", "w")), Config()), []
    board.stop(stopped)
    host.workers[-1][0]()  # the stop was set before its first step: it ends without a result
    assert [type(m) for m in posted] == [EditCancelled]
    told = len(owner.told)
    for message in posted:
        board.deliver(message)
    assert len(owner.told) == told  # a stopped run's news is dropped
