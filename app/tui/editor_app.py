"""SharpenApp: the editor. Tabs of buffers, a status bar, and the model in a background worker.

The first screen paints before torch is imported: the model loads in a thread worker after
the first refresh, and until it is ready (or failed) the editor works as a plain editor.
The commands on a buffer and their keys belong to its EditorPane; the app keeps the global
ones (tabs, open, help, quit), the model, the status bar and recovery.
"""
from __future__ import annotations

import inspect
import logging
import sys
import time
from pathlib import Path

from textual import actions, events
from textual.app import App, ComposeResult
from textual.css.query import NoMatches
from textual.theme import BUILTIN_THEMES, Theme
from textual.widgets import Footer, TabbedContent, TabPane, TextArea

from ...core.errors import SharpenError, UsageError
from ...core.languages import telltale_language
from ..config import Config
from . import file_actions
from .bindings import ALL_BINDINGS, APP_BINDINGS as BINDINGS, bound_keys, keymap_problems  # noqa: F401 (ALL_BINDINGS: tests read it here)
from .buffer_file import BufferFile, language_for
from .palette import EXTRA_KEYS, PALETTE, PaletteProvider, key_label
from .editor_area import EditorArea
from .editor_pane import IDLE, EditorPane
from .help_screen import HelpScreen
from .key_order import KeyOrder
from .messages import ModelFailed, ModelLoaded
from .model_link import ModelLink
from ..recovery import absolute
from .recovery_actions import RecoveryKeeper
from .session import Session
from .status_bar import StatusBar, run_line
from .themes import LoadedTheme, syntax_theme_for

log = logging.getLogger(__name__)



class SharpenApp(App):
    """The editor. `files` open in tabs; `config` is app.config.Config; `themes` from themes.load_themes."""

    TITLE = "sharpen"
    recovery_interval: float = 10.0  # seconds between recovery writes of unsaved buffers
    handle_signals: bool = False  # SIGTERM / SIGHUP write recovery first (run_editor turns it on)
    guard = None  # a terminal.ProcessGuard when run from the command line (run_editor)
    COMMANDS = App.COMMANDS | {PaletteProvider}  # Textual's name for palette providers
    BINDINGS = BINDINGS
    CSS = """
    Screen { layout: vertical; }
    TabbedContent { height: 1fr; }
    TabbedContent > ContentSwitcher { height: 1fr; }
    TabPane { padding: 0; height: 1fr; }
    EditorPane { height: 1fr; }
    ToastRack { margin-bottom: 2; }  /* toasts above the status bar and the footer, never over them */
    """

    def __init__(self, files: list[Path], config: Config = Config(), themes: dict[str, LoadedTheme] | None = None,
                 load_model_on_start: bool = True, config_path: Path | None = None) -> None:
        super().__init__()
        self.files, self.config, self.loaded_themes = files, config, themes or {}
        self.session = Session(config, strength=config.editing.strength)  # shared by every pane
        self.recovery = RecoveryKeeper(self)
        self.key_order = KeyOrder(self)  # every key in the order typed, type-ahead included (key_order.py)
        self.load_model_on_start = load_model_on_start
        self._buffer_ids = 0
        self._footer_phase = IDLE
        self.config_path = config_path  # None: the default place (see app.config.default_config_path)
        self.model_link = ModelLink(self)  # loading the model, its status, a --backend's reconnect
        if config.keymap:
            self.set_keymap(config.keymap)

    def compose(self) -> ComposeResult:
        yield TabbedContent(id="buffers")
        yield StatusBar()
        # Without the palette's key (F1 lists it): at 80 columns the footer dropped
        # Quit and Keys, the two a newcomer looks for, under the palette's right-docked key.
        yield Footer(show_command_palette=False)

    async def on_mount(self) -> None:
        for loaded in self.loaded_themes.values():
            self.register_theme(loaded.app_theme)
        self.theme_changed_signal.subscribe(self, self._apply_syntax_theme)
        if self.config.editor.theme in self.available_themes:
            self.theme = self.config.editor.theme
        self.recovery.start(self.recovery_interval, self.handle_signals)
        if self.guard is not None:  # after the recovery's signal handlers: see terminal.ProcessGuard
            self.guard.attach()
        buffers = []
        for path in self.files:
            try:
                buffers.append(BufferFile.open(path))
            except SharpenError as exc:  # binary, not UTF-8, a directory...: say so, open the rest
                self.notify(str(exc), title="Cannot open", severity="error")
        unique = {}
        for buffer in buffers:  # a file named twice opens once: two buffers on one file would lose work
            unique.setdefault(absolute(buffer.path), buffer)
        for buffer in list(unique.values()) or [BufferFile(None)]:
            await self.add_buffer(buffer, activate=False)  # the first file named stays the one shown
        self.panes()[0].editor.focus()
        self.call_after_refresh(self.key_order.open)  # keys typed while starting go in now
        # Crashed editors' work on no file opened now (untitled buffers, other files): one list to restore.
        self.recovery.offer_the_rest(set(unique))
        self.status.strength = self.session.strength
        for problem in keymap_problems(self.config.keymap, self._keymap):
            self.notify(problem, title="Keymap", severity="warning", timeout=15)
        if self.load_model_on_start:
            self.call_after_refresh(self.start_model_loading)

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key) and not event.is_forwarded and (pane := self.active_pane()) is not None:
            keeps = self.bound_keys("accept") + self.bound_keys("accept-word") + self.bound_keys("accept-line")  # next_edit_actions.py
            pane.ghost.key(event.key, keeps, event.character)  # any key but Accept's (or typing through) dismisses a ghost (ghost.py)
            pane.key_pressed()  # a one-time notice ("accepted 12 characters") goes with the next key
        if isinstance(event, (events.Key, events.Paste)) and not event.is_forwarded and await self.key_order.take(event):
            return
        await super().on_event(event)

    def before_enter(self, editor: EditorArea) -> None:
        """KeyOrder calls this before an Enter reaches an editor (the keys before it handled)."""
        if isinstance(editor.parent, EditorPane):
            self._follow_untitled_language(editor.parent, now=True)

    async def forward_key(self, event: events.Event) -> None:
        """Textual's own handling of a key or paste (KeyOrder replays held ones through it)."""
        await super().on_event(event)

    # -- buffers ------------------------------------------------------------------------

    @property
    def status(self) -> StatusBar:
        return self.query_one(StatusBar)

    async def add_buffer(self, buffer: BufferFile, activate: bool = True, offer: bool = True) -> EditorPane:
        """A new tab for `buffer`; `offer`: mark its file as open here, warn if another editor has
        it, and offer a crashed editor's unsaved changes to it."""
        self._buffer_ids += 1
        pane = EditorPane(buffer, self.session, soft_wrap=self.config.editor.soft_wrap, id=f"buffer-{self._buffer_ids}")
        tabs = self.query_one(TabbedContent)
        await tabs.add_pane(TabPane(buffer.name, pane, id=f"tab-{self._buffer_ids}"))
        pane.register_syntax_theme(syntax_theme_for(self.current_theme, self.loaded_themes))
        pane.editor.theme = pane.preview.theme = self.current_theme.name
        if activate:
            tabs.active = f"tab-{self._buffer_ids}"
            pane.editor.focus()
        self.update_status()
        if offer:
            self.recovery.opened(pane)
        return pane

    async def remove_buffer(self, pane: EditorPane) -> None:
        """Close `pane`'s tab (file_actions.close_buffer asked first); the last one leaves an untitled buffer."""
        if self.session.queued is not None and self.session.queued[0] is pane:
            self.session.queued = None  # its queued model command goes with it
        await self.query_one(TabbedContent).remove_pane(pane.id.replace("buffer-", "tab-"))
        if not self.panes():
            await self.add_buffer(BufferFile(None), offer=False)
        elif (active := self.active_pane()) is not None:
            active.editor.focus()
        self.update_status()

    def panes(self) -> list[EditorPane]:
        return list(self.query(EditorPane))

    def active_pane(self) -> EditorPane | None:
        try:
            tabs = self.query_one(TabbedContent)
        except NoMatches:  # shutting down, or a dialog screen is on top
            return None
        active = tabs.active_pane
        try:
            return active.query_one(EditorPane) if active is not None else None
        except NoMatches:  # a tab still being added (restoring recovered buffers): no pane in it yet
            return None

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
        self.model_link.start()

    @property
    def backend(self):
        return self.session.backend

    @property
    def model_error(self) -> str | None:
        return self.session.model_error

    # Textual dispatches these by name on the App; what they do is model_link.py's.
    def on_model_loaded(self, message: ModelLoaded) -> None:
        self.model_link.loaded(message)

    def on_model_failed(self, message: ModelFailed) -> None:
        self.model_link.failed(message)

    def action_help(self) -> None:
        rows = [(self.keys_for(c.binding_id) if c.binding_id else key_label(c.fixed_keys), c.title, c.binding_id or "") for c in PALETTE]
        rows += [(keys, title, "") for keys, title, _ in EXTRA_KEYS]
        from ..config import default_config_path

        hint = f"Rebind keys in {self.config_path or default_config_path()}, table [keymap]: binding-id = \"key\". Esc closes."
        self.push_screen(HelpScreen(rows, hint))

    # -- files and quitting ---------------------------------------------------------

    def action_open_file(self) -> None:
        file_actions.open_file(self)

    def open_path(self, path: Path) -> None:
        file_actions.open_path(self, path)

    def action_close_buffer(self) -> None:
        file_actions.close_buffer(self)

    async def action_quit(self) -> None:
        file_actions.quit(self)

    def on_editor_pane_saved(self, message: EditorPane.Saved) -> None:
        if not message.pane.is_attached:  # saved, then closed (Close tab: Save and close)
            return
        message.pane.disk_notice = ""  # the file now holds the buffer (an Overwrite included): nothing changed on disk
        self.recovery.recovery_saved(message.pane, message.old_path)
        self.refresh_tab_label(message.pane)
        self.update_status()

    async def run_action(self, action, default_namespace=None, namespaces=None) -> bool:
        # A command that fails in the editor's own code (a key binding, the palette) leaves the
        # buffers as they were before it: the editor goes on with one line instead of ending with a
        # traceback. The unsaved work is written to recovery first, in case it cannot.
        try:
            return await super().run_action(action, default_namespace, namespaces)
        except Exception as error:
            log.exception("the command %r failed", action)
            try:
                self.recovery.write_recovery()
            except Exception:
                log.exception("writing recovery after a failed command failed")
            name = action if isinstance(action, str) else str(action[1])
            detail = " ".join(str(error).split()) or type(error).__name__
            self.notify(f"{name} failed ({type(error).__name__}): {detail}"[:300], severity="error", markup=False, timeout=8)
            return True

    def _handle_exception(self, error: Exception) -> None:
        # An unhandled exception ends the app: keep the unsaved work first.
        try:
            self.recovery.write_recovery()
        except Exception:  # never hide the original error
            log.exception("writing recovery on a crash failed")
        super()._handle_exception(error)

    # -- palette, keys, status ----------------------------------------------------------

    def _follow_untitled_language(self, pane: EditorPane, now: bool = False) -> None:
        """An untitled buffer's language follows what is typed into it (checked at most once a
        second, from two lines on; `now`: at once, as before an Enter, whose auto-indent needs
        it): the highlighting, auto-indent and the syntax commands then agree."""
        editor = pane.editor
        if editor.buffer.path is not None or editor.language is not None:
            return
        if not now and (editor.document.line_count < 2 or time.monotonic() - getattr(pane, "_language_checked", 0.0) < 1.0):
            return
        pane._language_checked = time.monotonic()
        language = language_for(None, editor.text, editor.available_languages)
        if language is None and now:  # one typed line, about to get its Enter: its telltale is enough
            language = telltale_language(editor.document.lines[editor.selection.end[0]])
            language = language if language in editor.available_languages else None
        if language is not None:
            selection, editor.language = editor.selection, language  # a new language reloads the document
            editor.selection = selection
            self.update_status()

    def get_system_commands(self, screen):
        # The palette lists sharpen's own Quit (which asks about unsaved work) and Keys (its
        # keys as bound): Textual's entries of the same names would list them twice.
        for command in super().get_system_commands(screen):
            if command.title not in ("Quit", "Keys"):
                yield command

    def notify(self, message: str, *, markup: bool = False, **kwargs) -> None:
        # Messages carry paths and model errors: brackets in them are text, not Textual markup.
        super().notify(message, markup=markup, **kwargs)

    async def run_palette_action(self, action: str) -> None:
        """Run an action from the palette on whoever owns it (the active buffer's pane, or the
        app), without the key-only check_action gate."""
        _, name, params = actions.parse(action)
        pane = self.active_pane()
        owner = pane if pane is not None and hasattr(pane, f"action_{name}") else self
        result = getattr(owner, f"action_{name}")(*params)
        if inspect.isawaitable(result):
            await result

    def bound_keys(self, binding_id: str) -> list[str]:
        """The keys bound to `binding_id` now (the keymap's, else the declared ones), as Textual names them."""
        return bound_keys(self._keymap, binding_id)

    def keys_for(self, binding_id: str) -> str:
        return ", ".join(key_label(key) for key in self.bound_keys(binding_id))

    def on_editor_pane_state_changed(self, message: EditorPane.StateChanged) -> None:
        message.stop()
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
            self.recovery.typed()
            self._follow_untitled_language(pane)

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
        status.marks, status.notice = editor.mark_count, " · ".join(n for n in (pane.disk_notice, pane.notice) if n)
        # The rewrite share is news only once it differs from the configured one (Alt+Up/Down).
        status.show_strength = not editor.selection.is_empty and self.session.strength != self.config.editing.strength
        status.strength = self.session.strength
        status.run = run_line(pane, self.keys_for)


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
    if sys.platform != "win32":  # the guards wrap Textual's Linux/macOS driver (termios, SIGHUP)
        from .terminal import ProcessGuard

        app.guard = ProcessGuard(app)  # terminal bytes, crashed threads, hang-ups: terminal.py
        app.guard.install()
    app.run()
    return app.return_code or 0
