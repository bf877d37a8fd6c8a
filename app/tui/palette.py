"""The command palette (Ctrl+P): every editor action, with its current keys.

PALETTE is the one list of the editor's commands; the bindings (EditorPane's and the app's)
give some of them keys by binding id, and the help screen is built from both.
"""
from __future__ import annotations

from dataclasses import dataclass

from textual.command import DiscoveryHit, Hit, Hits, Provider


KEY_NAMES = {"escape": "Esc", "right_square_bracket": "]", "left_square_bracket": "[", "pageup": "PgUp", "pagedown": "PgDn"}


def key_label(key: str) -> str:
    """"alt+right_square_bracket" -> "Alt+]", "ctrl+s" -> "Ctrl+S": how people write keys."""
    return "+".join(KEY_NAMES.get(part, part.upper() if len(part) == 1 else part.capitalize()) for part in key.split("+"))


@dataclass(frozen=True)
class Command:
    title: str  # what the palette shows and matches
    action: str  # the app's action (method action_<name>), with arguments if any
    help: str
    binding_id: str | None = None  # the binding that gives it keys (rebindable in [keymap])
    fixed_keys: str = ""  # keys that belong to the TextArea itself (not rebindable here)


PALETTE = (
    Command("Infill", "infill", "Mask the selection and let the model refill it; no selection: fill a gap at the cursor", "infill"),
    Command("Rewrite", "rewrite", "Re-noise part of the selection and let the model redraft it", "rewrite"),
    Command("Infill with pattern", "infill_pattern", "Infill the selection or cursor so the text matches a regular expression, kept at every step", None),
    Command("Rewrite keeping words", "rewrite_keeping", "Rewrite the selection; the words you name must stay in it", None),
    Command("Mark region", "mark_region", "Add the selection to the marked regions for a parallel edit", "mark-region"),
    Command("Fill marked", "fill_marked", "Infill every marked region together, in one denoising run", "fill-marked"),
    Command("Clear marks", "clear_marks", "Forget the marked regions", "clear-marks"),
    Command("Expand selection", "expand_selection", "Select the enclosing syntax node (no grammar: line, paragraph, all)", "expand-selection"),
    Command("Shrink selection", "shrink_selection", "Back down the expansions, or to the inner syntax node at the cursor", "shrink-selection"),
    Command("Fill body", "fill_body", "Mask the body of the function or block at the cursor and infill it", "fill-body"),
    Command("Accept", "accept", "Write the previewed result into the buffer (one undo step)", "accept"),
    Command("Reject", "reject", "Drop the previewed result; the buffer stays as it was", "cancel"),
    Command("Cancel", "cancel", "Stop the running edit; the buffer stays as it was", "cancel"),
    Command("Next alternative", "cycle(1)", "Show the next sampled alternative (with samples > 1)", "next-alternative"),
    Command("Previous alternative", "cycle(-1)", "Show the previous sampled alternative", "previous-alternative"),
    Command("Rewrite stronger", "strength(0.1)", "Re-noise 10% more of a selection on Rewrite", "rewrite-stronger"),
    Command("Rewrite weaker", "strength(-0.1)", "Re-noise 10% less of a selection on Rewrite", "rewrite-weaker"),
    Command("Save", "save", "Write the buffer to its file (atomically, keeping BOM and line endings)", "save"),
    Command("Save as", "save_as", "Write the buffer to another file (Tab completes the path)", "save-as"),
    Command("Open file", "open_file", "Open a file in a new tab (Tab completes the path)", "open-file"),
    Command("Close tab", "close_buffer", "Close the buffer's tab (asks first when it has unsaved changes)", "close-buffer"),
    Command("Find", "find", "Search the buffer (lower case: any case; /regex/: a regular expression)", "find"),
    Command("Find next", "find_next", "Jump to the next match of the last search", "find-next"),
    Command("Find previous", "find_previous", "Jump to the match before the selection", "find-previous"),
    Command("Replace", "replace", "Replace the next match or all of them (/regex/ for a regular expression), in one undo step", "replace"),
    Command("Go to line", "goto_line", "Move the cursor to LINE or LINE:COLUMN", "goto-line"),
    Command("Undo", "undo", "Undo the last edit", None, "ctrl+z"),
    Command("Redo", "redo", "Redo the last undone edit", None, "ctrl+y"),
    Command("Toggle ghost completion", "toggle_ghost", "Complete as you type: faint text at the cursor after a pause, Tab accepts", None),
    Command("Accept word", "accept_word", "Write the next word of the ghost completion; the rest stays shown", "accept-word"),
    Command("Accept line", "accept_line", "Write the ghost completion to the end of its line; the rest stays shown", "accept-line"),
    Command("Apply all next edits", "next_edit_apply_all", "Apply every proposed next edit at once (one undo step)", "next-edit-apply-all"),
    Command("Toggle next-edit prediction", "toggle_next_edit", "After an edit and a pause, propose the follow-up edits; Tab jumps, Tab applies", None),
    Command("Toggle soft wrap", "toggle_wrap", "Wrap long lines at the window edge, or not", "soft-wrap"),
    Command("Next buffer", "switch_buffer(1)", "Show the next tab", "next-buffer"),
    Command("Previous buffer", "switch_buffer(-1)", "Show the previous tab", "previous-buffer"),
    Command("Keys", "help", "List every key binding", "help"),
    Command("Quit", "quit", "Leave sharpen (asks first when a buffer has unsaved changes)", "quit"),
)


# Keys that belong to Textual's widgets (not rebindable here), shown beside PALETTE's in the
# help screen and the docs: (keys as people write them, title, what it does).
EXTRA_KEYS = (
    ("Ctrl+P", "Command palette", "Every command above, by name"),
    ("Shift+arrows, mouse drag", "Select", "Select text"),
    ("Ctrl+X / Ctrl+C / Ctrl+V", "Cut / copy / paste", "Cut, copy or paste the selection"),
)


class PaletteProvider(Provider):
    """Palette entries for PALETTE; the help line shows the keys as currently bound."""

    def _entries(self):
        for command in PALETTE:
            keys = self.app.keys_for(command.binding_id) if command.binding_id else key_label(command.fixed_keys)
            # The palette reads help as markup, where "[F1]" is a style tag and vanished: escaped.
            help_text = f"{command.help}  \\[{keys}]" if keys else command.help
            yield command, help_text

    async def discover(self) -> Hits:
        for command, help_text in self._entries():
            yield DiscoveryHit(command.title, self._runner(command), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for command, help_text in self._entries():
            score = matcher.match(command.title)
            if score > 0:
                yield Hit(score, matcher.highlight(command.title), self._runner(command), help=help_text)

    def _runner(self, command: Command):
        async def run() -> None:
            await self.app.run_palette_action(command.action)

        return run
