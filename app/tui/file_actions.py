"""The app's file and navigation actions: open, save, save as, quit, find, go to line.

A mixin for SharpenApp, kept apart from the model actions so each file stays readable.
"""
from __future__ import annotations

from pathlib import Path

from ...core.errors import SharpenError
from .buffer_file import BufferFile, language_for
from .confirm_screen import ConfirmScreen
from .prompt_screen import PromptScreen


class FileActions:
    """Needs from the app: active_pane(), add_buffer(), refresh_tab_label(), update_status(), panes()."""

    last_search: str = ""

    # -- saving -------------------------------------------------------------------------

    def action_save(self) -> None:
        pane = self.active_pane()
        if pane is None:
            return
        buffer = pane.editor.buffer
        if buffer.path is None:
            self.action_save_as()
            return
        reason = buffer.disk_change()  # content, not modification time: a `touch` is no change
        if reason is None:
            self._write(pane)
            return
        question = f"{buffer.path} changed on disk since it was opened or saved: {reason}. Overwrite it with this buffer?"
        choices = [("cancel", "Cancel (keep both)", "default"), ("overwrite", "Overwrite", "warning")]

        def answered(answer: str) -> None:
            if answer == "overwrite":
                self._write(pane, check_disk=False)
            else:
                self.notify("not saved: the file on disk was left as it is; the buffer keeps your changes", timeout=4)

        self.push_screen(ConfirmScreen(question, choices), answered)

    def action_save_as(self) -> None:
        pane = self.active_pane()
        if pane is None:
            return
        current = str(pane.editor.buffer.path or "")

        def chosen(answer: str | None) -> None:
            if not answer:
                return
            target = Path(answer).expanduser()
            if target != pane.editor.buffer.path and (target.exists() or target.is_symlink()):
                question = f"{target} already exists. Overwrite it with this buffer?"
                choices = [("cancel", "Cancel", "default"), ("overwrite", "Overwrite", "warning")]
                self.push_screen(ConfirmScreen(question, choices), lambda a: a == "overwrite" and self._write(pane, target, check_disk=False))
            else:
                self._write(pane, target)

        self.push_screen(PromptScreen("Save as:", current, placeholder="path/to/file"), chosen)

    def _write(self, pane, path: Path | None = None, check_disk: bool = True) -> bool:
        """Save the pane's buffer; on any failure say why and keep the buffer (still unsaved)."""
        editor = pane.editor
        old_path = editor.buffer.path
        try:
            editor.buffer.save(list(editor.document.lines), path, check_disk=check_disk)
        except (SharpenError, OSError, ValueError) as exc:
            self.notify(f"{exc}. The buffer keeps your changes.", title="Not saved", severity="error", timeout=8)
            return False
        editor.mark_saved()
        self.recovery_saved(pane, old_path)
        language = language_for(editor.buffer.path, editor.available_languages)
        if language != editor.language:  # a new language reloads the document: keep the cursor
            selection, editor.language = editor.selection, language
            editor.selection = selection
        self.refresh_tab_label(pane)
        self.update_status()
        self.notify(f"saved {editor.buffer.path}", timeout=2)
        return True

    # -- opening and quitting -----------------------------------------------------------

    def action_open_file(self) -> None:
        def chosen(answer: str | None) -> None:
            if answer:
                self.open_path(Path(answer).expanduser())

        self.push_screen(PromptScreen("Open file:", placeholder="path/to/file"), chosen)

    def open_path(self, path: Path) -> None:
        try:
            buffer = BufferFile.open(path)
        except SharpenError as exc:
            self.notify(str(exc), title="Cannot open", severity="error")
            return
        self.call_later(self.add_buffer, buffer)  # add_buffer offers a recovery entry, if any

    async def action_quit(self) -> None:
        dirty = [pane for pane in self.panes() if pane.editor.unsaved]
        if not dirty:
            self.recovery_discard_all()  # a clean quit: nothing left to recover
            self.exit()
            return
        names = ", ".join(pane.editor.buffer.name for pane in dirty)
        question = f"Unsaved changes in {names}. Save before quitting?"
        choices = [("save", "Save and quit", "primary"), ("discard", "Quit without saving", "error"), ("cancel", "Cancel", "default")]

        def answered(answer: str) -> None:
            if answer == "discard":
                self.recovery_discard_all()  # the user chose to drop the changes
                self.exit()
            elif answer == "save":
                untitled = [pane for pane in dirty if pane.editor.buffer.path is None]
                if untitled:
                    self.notify("an untitled buffer needs Save as first", severity="warning")
                    return
                if all(self._write(pane) for pane in dirty):
                    self.exit()

        self.push_screen(ConfirmScreen(question, choices), answered)

    # -- finding ------------------------------------------------------------------------

    def action_find(self) -> None:
        def chosen(answer: str | None) -> None:
            if answer:
                self.last_search = answer
                self.action_find_next()

        hint = "lower case matches any case; F3 finds the next one"
        self.push_screen(PromptScreen("Find:", self.last_search, hint=hint), chosen)

    def action_find_next(self) -> None:
        pane = self.active_pane()
        if pane is None:
            return
        if not self.last_search:
            self.action_find()
            return
        editor, query = pane.editor, self.last_search
        text = editor.buffer_text
        if query.islower():  # smart case
            text, query = text.lower(), query.lower()
        start = editor.offset_of(editor.selection.end)
        found = text.find(query, start)
        if found == -1:
            found = text.find(query)  # wrap around
            if found != -1:
                self.notify("search wrapped to the top", timeout=1.5)
        if found == -1:
            self.notify(f"not found: {self.last_search}", severity="warning", timeout=2)
            return
        editor.select_offsets(found, found + len(query))
        editor.scroll_cursor_visible(center=True)

    def action_goto_line(self) -> None:
        pane = self.active_pane()
        if pane is None:
            return

        def chosen(answer: str | None) -> None:
            if not answer:
                return
            try:
                parts = [int(p) for p in answer.strip().split(":")]
            except ValueError:
                self.notify(f"not a line number: {answer}", severity="warning")
                return
            editor = pane.editor
            row = min(max(parts[0], 1), editor.document.line_count) - 1
            column = max(parts[1] - 1, 0) if len(parts) > 1 else 0
            editor.move_cursor((row, column), center=True)

        self.push_screen(PromptScreen("Go to line (LINE or LINE:COLUMN):"), chosen)
