"""A buffer's file and navigation commands: save, save as, find, go to line.

Functions of one EditorPane (the widget whose bindings run them); dialogs are pushed on the
pane's app. A successful save posts EditorPane.Saved, which the app answers (recovery, tab
label, status bar).
"""
from __future__ import annotations

from pathlib import Path
from ...core.errors import SharpenError
from .buffer_file import language_for
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

    pane.app.push_screen(PromptScreen("Save as:", current, placeholder="path/to/file"), chosen)


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


def find(pane: Pane) -> None:
    session = pane.session

    def chosen(answer: str | None) -> None:
        if answer:
            session.last_search = answer
            find_next(pane)

    hint = "lower case matches any case; F3 finds the next one"
    pane.app.push_screen(PromptScreen("Find:", session.last_search, hint=hint), chosen)


def find_next(pane: Pane) -> None:
    query = pane.session.last_search
    if not query:
        find(pane)
        return
    editor = pane.editor
    text = editor.buffer_text
    if query.islower():  # smart case
        text = text.lower()
    start = editor.offset_of(editor.selection.end)
    found = text.find(query, start)
    if found == -1:
        found = text.find(query)  # wrap around
        if found != -1:
            pane.notify("search wrapped to the top", timeout=1.5)
    if found == -1:
        pane.notify(f"not found: {query}", severity="warning", timeout=2)
        return
    editor.select_offsets(found, found + len(query))
    editor.scroll_cursor_visible(center=True)


def goto_line(pane: Pane) -> None:
    def chosen(answer: str | None) -> None:
        if not answer:
            return
        try:
            parts = [int(p) for p in answer.strip().split(":")]
        except ValueError:
            pane.notify(f"not a line number: {answer}", severity="warning")
            return
        editor = pane.editor
        row = min(max(parts[0], 1), editor.document.line_count) - 1
        column = max(parts[1] - 1, 0) if len(parts) > 1 else 0
        editor.move_cursor((row, column), center=True)

    pane.app.push_screen(PromptScreen("Go to line (LINE or LINE:COLUMN):"), chosen)
