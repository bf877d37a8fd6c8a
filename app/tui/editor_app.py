"""SharpenApp: the editor. Tabs of buffers, a status bar, and the model in a background worker.

The first screen paints before torch is imported: the model loads in a thread worker after
the first refresh, and until it is ready (or failed) the editor works as a plain editor.
"""
from __future__ import annotations

import inspect
from functools import partial
from pathlib import Path

from textual import actions
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.theme import BUILTIN_THEMES, Theme
from textual.widgets import Footer, TabbedContent, TabPane, TextArea

from ...core.errors import SharpenError, UsageError
from ..config import Config
from .buffer_file import BufferFile, language_for
from .commands import COMMANDS, SharpenCommands
from .editor_pane import IDLE, PREVIEW, RUNNING, EditorPane
from .edit_actions import EditActions
from .file_actions import FileActions
from .help_screen import HelpScreen
from .recovery_actions import RecoveryActions
from .syntax_actions import SyntaxActions
from .messages import ModelFailed, ModelLoaded
from .model_runner import load_model
from .status_bar import StatusBar
from .themes import LoadedTheme, syntax_theme_for

# Keys chosen to reach the app through plain terminals and tmux: no ctrl+shift, no ctrl+space,
# and no Alt+punctuation (Textual reads ESC = as "≠" and ESC . as "."; ESC f is ctrl+right).
# Each binding has an id: the config's [keymap] rebinds by id (see docs/editor.md).
BINDINGS = [
    Binding("alt+i", "infill", "Infill", id="infill", tooltip="Infill the selection, or fill at the cursor"),
    Binding("alt+r", "rewrite", "Rewrite", id="rewrite"),
    Binding("alt+m", "mark_region", "Mark", id="mark-region"),
    Binding("alt+a", "fill_marked", "Fill marked", id="fill-marked"),  # not alt+f: terminals send it as ctrl+right
    # Alt+E / Alt+D: E above D on the keyboard, grow / shrink. Alt+L: fiLL body.
    Binding("alt+e", "expand_selection", "Expand", id="expand-selection", show=False),
    Binding("alt+d", "shrink_selection", "Shrink", id="shrink-selection", show=False),
    Binding("alt+l", "fill_body", "Fill body", id="fill-body", show=False),
    Binding("alt+c", "clear_marks", "Clear marks", id="clear-marks", show=False),
    Binding("tab", "accept", "Accept", id="accept", priority=True),
    Binding("escape", "cancel_or_reject", "Cancel/Reject", id="cancel", priority=True, show=False),
    # Alt+] / Alt+[ need a terminal that reports them unambiguously (kitty protocol); in tmux
    # they arrive as ESC ] / ESC [, so Alt+N / Alt+P do the same everywhere.
    Binding("alt+right_square_bracket,alt+n", "cycle(1)", "Next alt.", id="next-alternative", priority=True, show=False),
    Binding("alt+left_square_bracket,alt+p", "cycle(-1)", "Prev alt.", id="previous-alternative", priority=True, show=False),
    Binding("alt+up", "strength(0.1)", "Stronger", id="rewrite-stronger", show=False),
    Binding("alt+down", "strength(-0.1)", "Weaker", id="rewrite-weaker", show=False),
    Binding("ctrl+s", "save", "Save", id="save"),
    Binding("alt+s", "save_as", "Save as", id="save-as", show=False),
    Binding("alt+o", "open_file", "Open", id="open-file", show=False),
    Binding("ctrl+f", "find", "Find", id="find", show=False),
    Binding("f3", "find_next", "Find next", id="find-next", show=False),
    Binding("ctrl+g", "goto_line", "Go to line", id="goto-line", show=False),
    Binding("alt+z", "toggle_wrap", "Soft wrap", id="soft-wrap", show=False),
    Binding("alt+right,ctrl+pagedown", "switch_buffer(1)", "Next tab", id="next-buffer", show=False),
    Binding("alt+left,ctrl+pageup", "switch_buffer(-1)", "Previous tab", id="previous-buffer", show=False),
    Binding("f1", "help", "Keys", id="help"),
    Binding("ctrl+q", "quit", "Quit", id="quit", priority=True),
]


KEY_NAMES = {"escape": "Esc", "right_square_bracket": "]", "left_square_bracket": "[", "pageup": "PgUp", "pagedown": "PgDn"}


def key_label(key: str) -> str:
    """"alt+right_square_bracket" -> "Alt+]", "ctrl+s" -> "Ctrl+S": how people write keys."""
    return "+".join(KEY_NAMES.get(part, part.upper() if len(part) == 1 else part.capitalize()) for part in key.split("+"))


def rate_label(tokens_per_second: float) -> str:
    return f"{tokens_per_second:.1f} tok/s" if tokens_per_second < 10 else f"{tokens_per_second:.0f} tok/s"


class SharpenApp(EditActions, FileActions, SyntaxActions, RecoveryActions, App):
    """The editor. `files` open in tabs; `config` is app.config.Config; `themes` from themes.load_themes."""

    TITLE = "sharpen"
    COMMANDS = App.COMMANDS | {SharpenCommands}
    BINDINGS = BINDINGS
    CSS = """
    Screen { layout: vertical; }
    TabbedContent { height: 1fr; }
    TabbedContent > ContentSwitcher { height: 1fr; }
    TabPane { padding: 0; height: 1fr; }
    EditorPane { height: 1fr; }
    """

    def __init__(self, files: list[Path], config: Config = Config(), themes: dict[str, LoadedTheme] | None = None,
                 load_model_on_start: bool = True, config_path: Path | None = None) -> None:
        super().__init__()
        self.files, self.config, self.loaded_themes = files, config, themes or {}
        self.denoiser = None
        self.model_error: str | None = None  # set when loading failed: the model is unavailable
        self.strength = config.editing.strength
        self.load_model_on_start = load_model_on_start
        self._buffer_ids = 0
        self._footer_phase = IDLE
        self.config_path = config_path  # None: the default place (see app.config.default_config_path)
        if config.keymap:
            self.set_keymap(config.keymap)

    def compose(self) -> ComposeResult:
        yield TabbedContent(id="buffers")
        yield StatusBar()
        yield Footer()

    async def on_mount(self) -> None:
        for loaded in self.loaded_themes.values():
            self.register_theme(loaded.app_theme)
        self.theme_changed_signal.subscribe(self, self._apply_syntax_theme)
        if self.config.editor.theme in self.available_themes:
            self.theme = self.config.editor.theme
        self.recovery_start()
        buffers = []
        for path in self.files:
            try:
                buffers.append(BufferFile.open(path))
            except SharpenError as exc:  # binary, not UTF-8, a directory...: say so, open the rest
                self.notify(str(exc), title="Cannot open", severity="error")
        for buffer in buffers or [BufferFile(None)]:
            await self.add_buffer(buffer, activate=False)  # the first file named stays the one shown
        self.panes()[0].editor.focus()
        self.status.strength = self.strength
        unknown = sorted(set(self.config.keymap) - {b.id for b in BINDINGS})
        if unknown:
            known = ", ".join(sorted(b.id for b in BINDINGS))
            self.notify(f"[keymap] has no binding {unknown[0]!r}; known ids: {known}", title="Config", severity="warning", timeout=15)
        if self.load_model_on_start:
            self.call_after_refresh(self.start_model_loading)

    # -- buffers ------------------------------------------------------------------------

    @property
    def status(self) -> StatusBar:
        return self.query_one(StatusBar)

    async def add_buffer(self, buffer: BufferFile, activate: bool = True) -> EditorPane:
        self._buffer_ids += 1
        pane = EditorPane(buffer, None, soft_wrap=self.config.editor.soft_wrap, id=f"buffer-{self._buffer_ids}")
        tabs = self.query_one(TabbedContent)
        await tabs.add_pane(TabPane(buffer.name, pane, id=f"tab-{self._buffer_ids}"))
        pane.register_syntax_theme(syntax_theme_for(self.current_theme, self.loaded_themes))
        pane.editor.theme = pane.preview.theme = self.current_theme.name
        pane.editor.language = language_for(buffer.path, pane.editor.available_languages)
        if activate:
            tabs.active = f"tab-{self._buffer_ids}"
            pane.editor.focus()
        self.update_status()
        self.offer_recovery(pane)  # unsaved changes from an earlier session: Restore / Discard
        return pane

    def panes(self) -> list[EditorPane]:
        return list(self.query(EditorPane))

    def active_pane(self) -> EditorPane | None:
        try:
            tabs = self.query_one(TabbedContent)
        except NoMatches:  # shutting down, or a dialog screen is on top
            return None
        active = tabs.active_pane
        return active.query_one(EditorPane) if active is not None else None

    def refresh_tab_label(self, pane: EditorPane) -> None:
        tab_id = pane.id.replace("buffer-", "tab-")
        label = pane.editor.buffer.name + (" ●" if pane.editor.dirty else "")
        tab = self.query_one(TabbedContent).get_tab(tab_id)
        if str(tab.label) != label:  # a new label re-lays out the tab bar: only when it changes
            tab.label = label

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        pane = self.active_pane()
        if pane is not None:
            pane.editor.focus()
        self.update_status()

    def action_switch_buffer(self, delta: int) -> None:
        tabs = self.query_one(TabbedContent)
        ids = [pane.id for pane in tabs.query(TabPane)]
        if len(ids) > 1 and tabs.active in ids:
            tabs.active = ids[(ids.index(tabs.active) + delta) % len(ids)]

    def _apply_syntax_theme(self, theme: Theme) -> None:
        syntax = syntax_theme_for(theme, self.loaded_themes)
        for pane in self.panes():
            pane.register_syntax_theme(syntax)
            pane.editor.theme = pane.preview.theme = theme.name

    # -- the model ----------------------------------------------------------------------

    def start_model_loading(self) -> None:
        self.status.model = "loading model…"
        self.run_worker(partial(load_model, self.config.model, self.post_message), thread=True, group="model", exit_on_error=False)

    def on_model_loaded(self, message: ModelLoaded) -> None:
        self.denoiser, self.model_error = message.denoiser, None
        spec = message.denoiser.spec
        self.status.model, self.status.model_failed, self.status.device = spec.name or spec.family, False, message.device

    def on_model_failed(self, message: ModelFailed) -> None:
        self.model_error = message.error
        self.status.model, self.status.model_failed, self.status.device = "model unavailable", True, ""
        self.notify(message.error, title="Model unavailable; editing still works", severity="error", timeout=10)

    def action_undo(self) -> None:
        if (pane := self.active_pane()) is not None:
            pane.editor.undo()

    def action_redo(self) -> None:
        if (pane := self.active_pane()) is not None:
            pane.editor.redo()

    def action_toggle_wrap(self) -> None:
        if (pane := self.active_pane()) is not None:
            pane.editor.soft_wrap = not pane.editor.soft_wrap

    def action_help(self) -> None:
        rows = [(self.keys_for(c.binding_id) if c.binding_id else c.fixed_keys, c.title, c.binding_id or "") for c in COMMANDS]
        rows += [("ctrl+p", "Command palette", ""), ("shift+arrows, mouse drag", "Select", ""), ("ctrl+x / ctrl+c / ctrl+v", "Cut / copy / paste", "")]
        from ..config import default_config_path

        hint = f"Rebind keys in {self.config_path or default_config_path()}, table [keymap]: binding-id = \"key\". Esc closes."
        self.push_screen(HelpScreen(rows, hint))

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        # Tab, Esc and the alternative keys belong to the preview; elsewhere they go to the editor.
        if action in ("accept", "cancel_or_reject", "cycle") and self.screen is not self.screen_stack[0]:
            return False  # a dialog is open: its own Esc must close it
        pane = self.active_pane() if self.is_mounted else None
        phase = pane.phase if pane is not None else IDLE
        if action == "accept":
            return phase != IDLE
        if action == "cycle":
            return phase == PREVIEW and pane.edit_run is not None and pane.edit_run.alternatives > 1
        return True

    # -- palette, keys, status ----------------------------------------------------------

    def notify(self, message: str, *, markup: bool = False, **kwargs) -> None:
        # Messages carry paths and model errors: brackets in them are text, not Textual markup.
        super().notify(message, markup=markup, **kwargs)

    async def run_command(self, action: str) -> None:
        """Run an action from the palette, without the key-only check_action gate."""
        _, name, params = actions.parse(action)
        result = getattr(self, f"action_{name}")(*params)
        if inspect.isawaitable(result):
            await result

    def keys_for(self, binding_id: str) -> str:
        keys = self._keymap.get(binding_id) or next((b.key for b in self.BINDINGS if b.id == binding_id), "")
        return ", ".join(key_label(key.strip()) for key in keys.split(",") if key.strip())

    def on_editor_pane_state_changed(self, message: EditorPane.StateChanged) -> None:
        if message.pane is self.active_pane():
            self.update_status()
        if message.pane.phase != self._footer_phase:  # the footer's keys depend on the phase only
            self._footer_phase = message.pane.phase
            self.refresh_bindings()

    def on_text_area_changed(self, event: TextArea.Changed) -> None:
        pane = event.text_area.parent
        if isinstance(pane, EditorPane):
            self.refresh_tab_label(pane)
            self.update_status()

    def on_text_area_selection_changed(self, event: TextArea.SelectionChanged) -> None:
        self.update_status()

    def update_status(self) -> None:
        pane = self.active_pane() if self.is_mounted else None
        if pane is None:
            return
        editor, status = pane.editor, self.status
        row, column = editor.selection.end
        status.file_name, status.dirty = editor.buffer.name, editor.dirty
        status.position, status.language = f"Ln {row + 1}, Col {column + 1}", editor.language or ""
        status.marks, status.notice = editor.mark_count, pane.notice
        status.show_strength = not editor.selection.is_empty
        stats = pane.edit_run.stats if pane.edit_run is not None else None
        first_key = lambda binding_id: self.keys_for(binding_id).split(", ")[0]  # noqa: E731
        if pane.phase == RUNNING:
            progress = f"step {stats.step}/{stats.total_steps} · {rate_label(stats.tokens_per_second)}" if stats else "starting…"
            status.run = f"{progress} · {first_key('cancel')} cancels"
        elif pane.phase == PREVIEW:
            run = pane.edit_run
            alternatives = ""
            if run.alternatives > 1:
                keys = "/".join(self.keys_for(i).split(", ")[-1] for i in ("next-alternative", "previous-alternative"))
                alternatives = f" · {keys}: alternative {run.choice + 1}/{run.alternatives}"
            candidates = getattr(run.result, "candidates", ()) or ()
            if run.choice < len(candidates):  # syntax-ranked candidates: say why this one is where it is
                candidate = candidates[run.choice]
                verdict = "parses" if candidate.new_errors == 0 else ("not checked" if candidate.new_errors is None else "breaks the parse")
                alternatives += f" · {verdict} · {sum(candidate.lengths)} slots"
            status.run = f"{first_key('accept')} accepts · {first_key('cancel')} rejects{alternatives} · {pane.notice}"
        else:
            status.run = ""


def run_editor(files: list[Path], config: Config, config_path: Path | None = None) -> int:
    """Entry point from `sharpen FILE...` (app/cli.py, which layered the settings): themes, then the app."""
    from ..config import user_themes_dir
    from .themes import load_themes

    themes = load_themes(user_themes_dir(config_path))
    known = sorted(set(themes) | set(BUILTIN_THEMES))
    if config.editor.theme not in known:
        raise UsageError(f"unknown theme {config.editor.theme!r}; known: {', '.join(known)}")
    if Path("-") in files:
        raise UsageError("the editor cannot open stdin (-); use --apply-edit for pipes")
    app = SharpenApp(files, config, themes, config_path=config_path)
    app.handle_signals = True  # SIGTERM / SIGHUP: write recovery copies, then exit
    app.run()
    return app.return_code or 0
