"""The file commands: save, save as (a buffer's), open, close a tab and quit (the app's).

Save and Save as are functions of one EditorPane (the widget whose bindings run them); dialogs
are pushed on the pane's app. A successful save posts EditorPane.Saved, which the app answers
(recovery, tab label, status bar). Open, Close tab and Quit are the app's (SharpenApp).
"""
from __future__ import annotations

from pathlib import Path

from textual.widgets import TabbedContent

from ...core.errors import SharpenError
from ..recovery import absolute
from .buffer_file import BufferFile, language_for
from .confirm_screen import ConfirmScreen
from .prompt_screen import PromptScreen
from .session import Pane


def save(pane: Pane) -> None:
    buffer = pane.editor.buffer
    if buffer.path is None:
        save_as(pane)
        return
    reason = buffer.disk_change()  # content, not modification time: a `touch` is no change
    if reason is None:
        write(pane)
        return
    question = f"{buffer.path} changed on disk since it was opened or saved: {reason}. Overwrite it with this buffer?"
    choices = [("cancel", "Cancel (keep both)", "default"), ("overwrite", "Overwrite", "warning")]

    def answered(answer: str) -> None:
        if answer == "overwrite":
            write(pane, check_disk=False)
        else:
            pane.notify("not saved: the file on disk was left as it is; the buffer keeps your changes", timeout=4)

    pane.app.push_screen(ConfirmScreen(question, choices), answered)


def save_as(pane: Pane) -> None:
    current = str(pane.editor.buffer.path or "")

    def chosen(answer: str | None) -> None:
        if not answer:
            return
        target = Path(answer).expanduser()
        if target != pane.editor.buffer.path and (target.exists() or target.is_symlink()):
            question = f"{target} already exists. Overwrite it with this buffer?"
            choices = [("cancel", "Cancel", "default"), ("overwrite", "Overwrite", "warning")]
            pane.app.push_screen(ConfirmScreen(question, choices), lambda a: a == "overwrite" and write(pane, target, check_disk=False))
        else:
            write(pane, target)

    pane.app.push_screen(PromptScreen("Save as:", current, placeholder="path/to/file", complete_paths=True), chosen)


def write(pane: Pane, path: Path | None = None, check_disk: bool = True) -> bool:
    """Save the pane's buffer; on any failure say why and keep the buffer (still unsaved)."""
    editor = pane.editor
    old_path = editor.buffer.path
    try:
        editor.buffer.save(list(editor.document.lines), path, check_disk=check_disk)
    except (SharpenError, OSError, ValueError) as exc:
        pane.notify(f"{exc}. The buffer keeps your changes.", title="Not saved", severity="error", timeout=8)
        return False
    editor.mark_saved()
    language = language_for(editor.buffer.path, editor.buffer_text, editor.available_languages)
    if language != editor.language:  # a new language reloads the document: keep the cursor
        selection, editor.language = editor.selection, language
        editor.selection = selection
    pane.post_message(pane.Saved(pane, old_path))
    pane.notify(f"saved {editor.buffer.path}", timeout=2)
    return True


# -- the app's: open, close a tab, quit ---------------------------------------------------

def open_file(app) -> None:
    def chosen(answer: str | None) -> None:
        if answer:
            open_path(app, Path(answer).expanduser())

    app.push_screen(PromptScreen("Open file:", placeholder="path/to/file", complete_paths=True), chosen)


def open_path(app, path: Path) -> None:
    open_here = next((p for p in app.panes() if p.editor.buffer.path is not None and absolute(p.editor.buffer.path) == absolute(path)), None)
    if open_here is not None:  # one buffer per file: two would each save over the other's work
        app.query_one(TabbedContent).active = open_here.id.replace("buffer-", "tab-")
        open_here.editor.focus()
        app.notify(f"{open_here.editor.buffer.name} is already open: switched to its tab", timeout=3)
        return
    try:
        buffer = BufferFile.open(path)
    except SharpenError as exc:
        app.notify(str(exc), title="Cannot open", severity="error")
        return
    app.call_later(app.add_buffer, buffer)  # add_buffer offers a recovery entry, if any


def close_buffer(app) -> None:
    """Close the active tab; with unsaved changes, ask first (save, discard or keep it open).
    The last tab closed leaves an empty untitled buffer, as the editor started without files."""
    pane = app.active_pane()
    if pane is None:
        return

    def close() -> None:
        app.recovery.closed(pane)
        app.call_later(app.remove_buffer, pane)

    if not pane.editor.unsaved:
        close()
        return
    question = f"Unsaved changes in {pane.editor.buffer.name}. Save before closing it?"
    choices = [("save", "Save and close", "primary"), ("discard", "Close without saving", "error"), ("cancel", "Cancel", "default")]

    def answered(answer: str) -> None:
        if answer == "discard":
            close()
        elif answer == "save":
            if pane.editor.buffer.path is None:
                pane.notify("an untitled buffer needs Save as first", severity="warning")
            elif write(pane):
                close()

    app.push_screen(ConfirmScreen(question, choices), answered)


def quit(app) -> None:
    dirty = [pane for pane in app.panes() if pane.editor.unsaved]
    if not dirty:
        app.recovery.recovery_discard_all()  # a clean quit: nothing left to recover
        app.exit()
        return
    names = ", ".join(pane.editor.buffer.name for pane in dirty)
    question = f"Unsaved changes in {names}. Save before quitting?"
    choices = [("save", "Save and quit", "primary"), ("discard", "Quit without saving", "error"), ("cancel", "Cancel", "default")]

    def answered(answer: str) -> None:
        if answer == "discard":
            app.recovery.recovery_discard_all()  # the user chose to drop the changes
            app.exit()
        elif answer == "save":
            untitled = [pane for pane in dirty if pane.editor.buffer.path is None]
            if untitled:
                app.notify("an untitled buffer needs Save as first", severity="warning")
                return
            if all(write(pane) for pane in dirty):
                # Each save posts Saved, whose handler discards the buffer's recovery: the app
                # exits before handling it, so drop this start's entries here (as a clean quit does).
                app.recovery.recovery_discard_all()
                app.exit()

    app.push_screen(ConfirmScreen(question, choices), answered)
