"""Every key binding of the editor, in one declaration: a buffer's commands and the app's own.

A buffer's commands are bound on EditorPane (Textual finds them through the focus chain from the
buffer's editor), the global ones (tabs, open, help, quit) on the app. Each binding has an id:
the config's [keymap] rebinds by id (docs/editor.md); the palette (palette.PALETTE), the help
screen and the docs' key table (key_table.py) name commands by these ids.
"""
from __future__ import annotations

from dataclasses import replace

from textual.binding import Binding

from .palette import key_label

# Keys chosen to reach the editor through plain terminals and tmux: no ctrl+shift, no
# ctrl+space, and no Alt+punctuation (Textual reads ESC = as "≠" and ESC . as "."; ESC f is
# ctrl+right). Each binding has an id: the config's [keymap] rebinds by id (docs/editor.md).
PANE_BINDINGS = [
    # Each model command also has an F-key: complete escape sequences, so a held or repeated
    # key never reaches the buffer (Alt chords need EditorArea's guard: docs/textual-upstream-keys.md).
    Binding("alt+i,f2", "infill", "Infill", id="infill", tooltip="Infill the selection, or fill at the cursor"),
    Binding("alt+r,f4", "rewrite", "Rewrite", id="rewrite"),
    Binding("alt+m,f6", "mark_region", "Mark", id="mark-region"),
    # not alt+f: terminals send it as ctrl+right. Not in the footer: Mark is, and with Accept too
    # an 80-column footer had no room for Quit and Keys.
    Binding("alt+a,f7", "fill_marked", "Fill marked", id="fill-marked", show=False),
    # Alt+E / Alt+D: E above D on the keyboard, grow / shrink. Alt+L: fiLL body.
    Binding("alt+e", "expand_selection", "Expand", id="expand-selection", show=False),
    Binding("alt+d", "shrink_selection", "Shrink", id="shrink-selection", show=False),
    Binding("alt+l,f8", "fill_body", "Fill body", id="fill-body", show=False),
    Binding("alt+c", "clear_marks", "Clear marks", id="clear-marks", show=False),
    # Priority: while a run or preview is up these are the preview's, before the TextArea's own.
    Binding("tab", "accept", "Accept", id="accept", priority=True),
    # While a ghost is shown (next_edit_actions.py); otherwise the TextArea's own keys.
    Binding("ctrl+right", "accept_word", "Accept word", id="accept-word", priority=True, show=False),
    Binding("ctrl+down", "accept_line", "Accept line", id="accept-line", priority=True, show=False),
    Binding("alt+t,f9", "next_edit_apply_all", "Apply all edits", id="next-edit-apply-all", priority=True, show=False),
    Binding("escape", "cancel_or_reject", "Cancel/Reject", id="cancel", priority=True, show=False),
    # Alt+] / Alt+[ need a terminal that reports them unambiguously (kitty protocol); in tmux
    # they arrive as ESC ] / ESC [, so Alt+N / Alt+P do the same everywhere.
    Binding("alt+right_square_bracket,alt+n", "cycle(1)", "Next alt.", id="next-alternative", priority=True, show=False),
    Binding("alt+left_square_bracket,alt+p", "cycle(-1)", "Prev alt.", id="previous-alternative", priority=True, show=False),
    Binding("alt+up", "strength(0.1)", "Stronger", id="rewrite-stronger", show=False),
    Binding("alt+down", "strength(-0.1)", "Weaker", id="rewrite-weaker", show=False),
    Binding("ctrl+s", "save", "Save", id="save"),
    Binding("alt+s", "save_as", "Save as", id="save-as", show=False),
    Binding("ctrl+f", "find", "Find", id="find", show=False),
    Binding("f3", "find_next", "Find next", id="find-next", show=False),
    Binding("shift+f3", "find_previous", "Find previous", id="find-previous", show=False),
    Binding("ctrl+r", "replace", "Replace", id="replace", show=False),
    Binding("ctrl+g", "goto_line", "Go to line", id="goto-line", show=False),
    Binding("alt+z", "toggle_wrap", "Soft wrap", id="soft-wrap", show=False),
]

# The app's own keys; a buffer's commands are bound on EditorPane. Each binding has an id:
# the config's [keymap] rebinds by id (docs/editor.md).
APP_BINDINGS = [
    Binding("alt+o", "open_file", "Open", id="open-file", show=False),
    # Not Ctrl+W: the TextArea's delete-word-left, which a close would turn into lost work.
    Binding("alt+w", "close_buffer", "Close tab", id="close-buffer", show=False),
    Binding("alt+right,ctrl+pagedown", "switch_buffer(1)", "Next tab", id="next-buffer", show=False),
    Binding("alt+left,ctrl+pageup", "switch_buffer(-1)", "Previous tab", id="previous-buffer", show=False),
    Binding("f1", "help", "Keys", id="help"),
    Binding("ctrl+q", "quit", "Quit", id="quit", priority=True),
]

ALL_BINDINGS = [*PANE_BINDINGS, *APP_BINDINGS]  # every binding id a keymap may name


def bound_keys(keymap: dict[str, str], binding_id: str) -> list[str]:
    """The keys bound to `binding_id` under `keymap` (the user's [keymap], else the declared keys), as Textual names them."""
    keys = keymap.get(binding_id) or next((b.key for b in ALL_BINDINGS if b.id == binding_id), "")
    return [key.strip() for key in keys.split(",") if key.strip()]


def keymap_problems(configured: dict[str, str], keymap: dict[str, str]) -> list[str]:
    """What is wrong with a user's [keymap] (`configured`; `keymap` as the app applied it), one
    line each: an id no binding has, and one key given to two commands."""
    problems = []
    unknown = sorted(set(configured) - {b.id for b in ALL_BINDINGS})
    if unknown:
        known = ", ".join(sorted(b.id for b in ALL_BINDINGS))
        problems.append(f"[keymap] has no binding {unknown[0]!r}; known ids: {known}")
    owners: dict[str, list[str]] = {}
    for binding in ALL_BINDINGS:
        for key in (keymap.get(binding.id) or binding.key).split(","):
            owners.setdefault(key.strip(), []).append(binding.id)
    shared = {key: ids for key, ids in owners.items() if key and len(set(ids)) > 1}
    if shared:
        listed = "; ".join(f"{key_label(key)}: {', '.join(ids)}" for key, ids in sorted(shared.items()))
        problems.append(f"one key, two commands ({listed}); only one of them will run")
    return problems


def inherited_bindings(widget: type, without: tuple[str, ...]) -> list[Binding]:
    """Every binding `widget` has from its classes (as Textual merges them: a subclass's key wins),
    less the keys in `without`."""
    by_key: dict[str, Binding] = {}
    for cls in reversed(widget.__mro__):
        for binding in cls.__dict__.get("BINDINGS", ()):
            binding = binding if isinstance(binding, Binding) else Binding(*binding)
            for key in binding.key.split(","):
                by_key[key.strip()] = replace(binding, key=key.strip())
    return [binding for key, binding in by_key.items() if key not in without]
