"""The config file: TOML in the platform's config directory, layered over the declared defaults.

    # ~/.config/sharpen/config.toml  (`sharpen --print-config-path` says where)
    theme = "sharpen-dark"             # editor settings sit at the top level
    [model]
    model = "/models/dream-coder"      # a checkpoint directory; leave out for the embedded model
    device = "auto"
    [sampling]
    steps = 32
    policy = "confidence"
    [edit]
    candidates = 3
    [keymap]
    infill = "f5"                      # binding id = key(s), comma separated

Every key is a setting declared once, in core/settings.py (engine requests) or in Editor
below (the editor's own); the tables and the checks are derived from those declarations.
Pure data and a loader, no textual: the CLI builds a Config once and hands it to the
headless runner and the editor.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

from ..core.errors import UsageError
from ..core.settings import REQUESTS, Request, SettingError, Settings, setting

APP_NAME = "sharpen"
MAX_CONFIG_BYTES = 4 * 2**20  # a config file is a few hundred bytes; this bounds a wrong --config


@dataclass(frozen=True)
class Editor(Request):
    """The editor's own settings (top level of the config file)."""

    section: ClassVar[str] = ""

    theme: str = setting("sharpen-dark", "editor theme (sharpen-dark, sharpen-light, sharpen-dusk, or one of yours)", metavar="NAME")
    soft_wrap: bool = setting(False, "wrap long lines at the window's edge", flag=False)
    # Frames in between are skipped: a fast model on a GPU outruns any terminal.
    frame_rate: int = setting(30, "preview redraws per second at most", low=1, high=240, flag=False)
    min_step_ms: int = setting(0, "pace fast models so each step stays visible this long (0: never wait)", low=0, high=10_000, flag=False)
    # The embedded model runs an infill in 0.05-0.3 s here: unpaced, a new user never sees text sharpen.
    first_run_step_ms: int = setting(150, "the session's first run on the embedded model shows each step this long, to be watched (0: off)", low=0, high=10_000, flag=False)
    # None decides by the model: a toy's completion on every pause would be noise (app/tui/ghost.py).
    ghost: bool | None = setting(None, "complete as you type: faint ghost text at the cursor after a pause, Tab accepts (default: on with --model, off with the embedded demo model)")
    # llama.vim and Copilot wait about this long; shorter fires between the keys of a word.
    ghost_pause_ms: int = setting(300, "pause in typing before ghost completion runs", low=50, high=10_000, metavar="MS")
    # As ghost: None decides by the model (app/tui/next_edit_overlay.py, next_edit_default).
    next_edit: bool | None = setting(None, "propose the follow-up edits after a pause that follows an edit, drawn over the buffer; Tab jumps, Tab applies (default: on with --model or a server, off with the embedded demo model)")
    # Longer than the ghost's: a next edit reads a whole window, and typing on cancels it.
    next_edit_pause_ms: int = setting(500, "pause after an edit before next-edit prediction runs", low=50, high=10_000, metavar="MS")


PROTOCOLS = ("auto", "sharpen", "mercury", "openai", "chat")  # what a --backend server speaks (app/remote.py)


def _check_url(value: str) -> None:
    if not value.startswith(("http://", "https://")) or len(value) < 10:
        raise ValueError("must be an http:// or https:// URL")


@dataclass(frozen=True)
class Remote(Request):
    """A server that runs every model command instead of this process (app/remote.py)."""

    section: ClassVar[str] = "backend"

    backend: str | None = setting(None, "run model commands on this server: sharpen serve, a Mercury-compatible or any OpenAI-compatible one", metavar="URL", parse=_check_url)
    # auto asks /v1/models: sharpen's own answer carries its model's meta, Mercury's ids start with "mercury".
    backend_protocol: str = setting("auto", "what the server speaks (auto: asked from /v1/models)", choices=PROTOCOLS, flag=False)
    # The key itself never goes on a command line or in this file: `ps` and backups show both.
    backend_key_env: str = setting("SHARPEN_API_KEY", "environment variable that holds the server's key", flag=False)
    backend_timeout: float = setting(30.0, "seconds the server has for each whole answer (a stream included)", low=0.0, high=3600.0, low_open=True, flag=False)
    backend_model: str | None = setting(None, "model to ask the server for (default: the first it lists)", flag=False)


SECTIONS: tuple[type[Request], ...] = (Editor, *REQUESTS, Remote)

# Keys of an older layout, still read: where each one lives now.
_MOVED = {
    ("", "model"): ("model", "model"),
    ("", "device"): ("model", "device"),
    ("", "dtype"): ("model", "dtype"),
    ("", "rewrite_strength"): ("edit", "strength"),
    ("", "infill_tokens"): ("edit", "infill_tokens"),
    ("sampling", "context_tokens"): ("edit", "context_tokens"),
    ("sampling", "length"): ("edit", "length"),
    ("sampling", "candidates"): ("edit", "candidates"),
}


@dataclass(frozen=True)
class Config:
    """Everything a run reads: the editor's settings, the engine's requests, the keymap."""

    editor: Editor = field(default_factory=Editor)
    settings: Settings = field(default_factory=Settings)
    keymap: dict[str, str] = field(default_factory=dict)  # binding id -> keys
    remote: Remote = field(default_factory=Remote)  # [backend]: a server instead of a local model

    @classmethod
    def of(cls, keymap: dict[str, str] | None = None, **values: Any) -> "Config":
        """A Config from setting names alone (`Config.of(steps=4, frame_rate=60)`): each goes to its section."""
        return cls().layered(by_section(values), keymap)

    def layered(self, values: dict[str, dict[str, Any]], keymap: dict[str, str] | None = None) -> "Config":
        """This config with `values` ({section: {name: value}}; None = not given) on top."""
        return Config(self.editor.updated(values.get("", {})), self.settings.layered(values), {**self.keymap, **(keymap or {})},
                      self.remote.updated(values.get(Remote.section, {})))

    @property
    def embedded(self) -> bool:
        """The embedded demo model is what runs: no checkpoint named, no server to run on."""
        return self.settings.model.model is None and self.remote.backend is None

    @property
    def sampling(self):
        return self.settings.sampling

    @property
    def editing(self):
        return self.settings.editing

    @property
    def model(self):
        return self.settings.model


def owner(name: str) -> type[Request]:
    """The request that declares setting `name` (names are unique across sections)."""
    for request in SECTIONS:
        if name in {f.name for f in fields(request)}:
            return request
    raise KeyError(name)


def by_section(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        out.setdefault(owner(name).section, {})[name] = value
    return out


def config_dir() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir(APP_NAME, appauthor=False))


def default_config_path() -> Path:
    return config_dir() / "config.toml"


def user_themes_dir(config_path: Path | None = None) -> Path:
    """Themes live beside the config file (so `--config` also moves them)."""
    return (config_path.parent if config_path else config_dir()) / "themes"


def _where(section: str, name: str) -> str:
    return f"[{section}] {name}" if section else name


def parse_config(text: str, where: str = "config") -> Config:
    """TOML text -> Config; every error names the file, the key and what is wrong."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{where}: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise UsageError(f"{where}: nested too deeply") from None
    keymap = data.pop("keymap", {})
    if not isinstance(keymap, dict):
        raise UsageError(f"{where}: [keymap] must be a table")
    bad_keys = [k for k, v in keymap.items() if not isinstance(v, str)]
    if bad_keys:
        raise UsageError(f"{where}: keymap.{bad_keys[0]} must be a string of keys, e.g. \"f5\" or \"alt+i,f5\"")
    tables = {r.section: {} for r in SECTIONS}
    for section in [r.section for r in SECTIONS if r.section]:
        table = data.pop(section, {})
        if ("", section) in _MOVED and not isinstance(table, dict):  # the older top-level `model = "DIR"`
            data[section], table = table, {}
        if not isinstance(table, dict):
            raise UsageError(f"{where}: [{section}] must be a table")
        tables[section] = table
    tables[""] = data
    values: dict[str, dict[str, Any]] = {r.section: {} for r in SECTIONS}
    for request in SECTIONS:
        known = {f.name for f in fields(request)}
        for name, value in tables[request.section].items():
            section, key = _MOVED.get((request.section, name), (request.section, name))
            if key not in known and section == request.section:
                place = f" in [{request.section}]" if request.section else ""
                raise UsageError(f"{where}: unknown setting {name!r}{place}; known: {', '.join(sorted(known))}")
            values[section][key] = value
    try:
        return Config().layered(values, keymap)
    except SettingError as exc:
        section = owner(exc.name).section
        raise UsageError(f"{where}: {_where(section, exc.name)} {exc.rule}") from None
    except TypeError as exc:
        raise UsageError(f"{where}: {exc}") from None


def load_config(path: Path | None = None) -> Config:
    """Read the config file; a missing default file means defaults, a missing --config is an error."""
    from ..core.models import untrusted

    explicit = path is not None
    path = path or default_config_path()
    if not path.exists() and not path.is_symlink():
        if explicit:
            raise UsageError(f"config file not found: {path}")
        return Config()
    # Read as untrusted input: a FIFO or /dev/zero given as --config is refused, never waited on or read
    # without end; a UTF-8 BOM (Windows editors write one) is dropped.
    text = untrusted.read_text(path, MAX_CONFIG_BYTES, error=UsageError)
    return parse_config(text, str(path))
