"""Every private Textual name the editor relies on still exists, with the shape it is used with.

pyproject pins textual to the versions the editor is tested with; a new Textual that renames or
reshapes one of these fails here, in CI, not at a user's desk. docs/textual-upstream.md lists
them with what sharpen does with each. Found by grepping app/ for `._` on Textual objects,
imports from Textual's private modules, and sharpen's overrides of Textual's private methods;
test_every_private_name_used_in_app_is_listed keeps the list complete.
"""
from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parent.parent / "app"

# (module, object path, kind, expected shape, who relies on it)
# kind: "module" (import), "class", "function" / "method" (shape: parameter names after self),
# "attribute" (shape: the class's own source assigns or declares it), "property".
NAMES = [
    ("textual._xterm_parser", "XTermParser", "class", None, "terminal.ChordParser subclasses it"),
    ("textual._xterm_parser", "XTermParser._sequence_to_key_events", "method", ("sequence", "alt"), "ChordParser turns a re-issued ESC into Alt"),
    ("textual._tree_sitter", "TREE_SITTER", "constant", bool, "editor_area: is tree-sitter there"),
    ("textual._tree_sitter", "get_language", "function", ("language_name",), "editor_area: the grammar for a language"),
    ("textual.document._document", "Document", "class", None, "document.StrictDocument"),
    ("textual.document._document", "Document._lines", "attribute", None, "StrictDocument keeps its own split"),
    ("textual.document._document", "EditResult", "class", None, "document.py"),
    ("textual.document._document", "Location", "constant", None, "editor_area, document: (row, column)"),
    ("textual.document._edit", "Edit", "class", None, "editor_area.edit"),
    ("textual.document._edit", "Edit._edit_result", "attribute", None, "editor_area: where an undone edit ended"),
    ("textual.document._edit", "Edit.top", "property", None, "editor_area: undo and redo ranges"),
    ("textual.document._edit", "Edit.bottom", "property", None, "editor_area: undo and redo ranges"),
    ("textual.document._document_navigator", "DocumentNavigator", "class", None, "editor_area._set_document"),
    ("textual.document._syntax_aware_document", "SyntaxAwareDocument", "class", None, "document.StrictSyntaxDocument"),
    ("textual.document._syntax_aware_document", "SyntaxAwareDocumentError", "class", None, "editor_area: no grammar"),
    ("textual.document._syntax_aware_document", "SyntaxAwareDocument._parser", "attribute", None, "StrictSyntaxDocument parses itself"),
    ("textual.document._syntax_aware_document", "SyntaxAwareDocument._syntax_tree", "attribute", None, "StrictSyntaxDocument; auto-indent reads the tree"),
    ("textual.document._syntax_aware_document", "SyntaxAwareDocument._location_to_byte_offset", "method", ("location",), "overridden by StrictSyntaxDocument"),
    ("textual.document._syntax_aware_document", "SyntaxAwareDocument._location_to_point", "method", ("location",), "StrictSyntaxDocument's tree edits"),
    ("textual.document._wrapped_document", "WrappedDocument", "class", None, "document.MeasuredWrappedDocument"),
    ("textual.document._wrapped_document", "WrappedDocument._wrap_offsets", "attribute", None, "MeasuredWrappedDocument's computed tables"),
    ("textual.document._wrapped_document", "WrappedDocument._offset_to_line_info", "attribute", None, "MeasuredWrappedDocument"),
    ("textual.document._wrapped_document", "WrappedDocument._line_index_to_offsets", "attribute", None, "MeasuredWrappedDocument"),
    ("textual.document._wrapped_document", "WrappedDocument._tab_width_cache", "attribute", None, "MeasuredWrappedDocument"),
    ("textual.document._wrapped_document", "WrappedDocument._width", "attribute", None, "MeasuredWrappedDocument"),
    ("textual.document._wrapped_document", "WrappedDocument._tab_width", "attribute", None, "MeasuredWrappedDocument"),
    ("textual.widgets._text_area", "TextArea._highlight_query", "attribute", None, "editor_area: the windowed highlight map"),
    ("textual.widgets._text_area", "TextArea._highlights", "attribute", None, "editor_area: the windowed highlight map"),
    ("textual.widgets._text_area", "TextArea._languages", "attribute", None, "editor_area: registered languages"),
    ("textual.widgets._text_area", "TextArea._line_cache", "attribute", None, "editor_area marks, preview_view: cleared on repaint"),
    ("textual.widgets._text_area", "TextArea._get_builtin_highlight_query", "method", ("language_name",), "editor_area._set_document"),
    ("textual.widgets._text_area", "TextArea._rewrap_and_refresh_virtual_size", "method", (), "editor_area._set_document"),
    ("textual.widgets._text_area", "TextArea._replace_via_keyboard", "method", ("insert", "start", "end"), "editor_area: typed edits"),
    ("textual.widgets._text_area", "TextArea._delete_via_keyboard", "method", ("start", "end"), "editor_area: Backspace over an indent"),
    ("textual.widgets._text_area", "TextArea._build_highlight_map", "method", (), "overridden: a window around the view"),
    ("textual.widgets._text_area", "TextArea._set_document", "method", ("text", "language"), "overridden: the document built once"),
    ("textual.widgets._text_area", "TextArea._undo_batch", "method", ("edits",), "overridden: marks follow undo"),
    ("textual.widgets._text_area", "TextArea._redo_batch", "method", ("edits",), "overridden: marks follow redo"),
    ("textual.widgets._text_area", "TextArea._recompute_cursor_offset", "method", (), "overridden: undo past the end"),
    ("textual.widgets._text_area", "TextArea._cursor_offset", "attribute", None, "editor_area._recompute_cursor_offset sets it"),
    ("textual.widgets._text_area", "TextArea._on_key", "method", ("event",), "overridden: auto-indent, chords"),
    ("textual.widgets._text_area", "TextArea._on_paste", "method", ("event",), "overridden: pasted line breaks"),
    ("textual.widgets._text_area", "TextArea._on_mouse_down", "method", ("event",), "overridden by the read-only preview"),
    ("textual.widget", "Widget._on_mouse_scroll_down", "method", ("event",), "overridden by the preview"),
    ("textual.widget", "Widget._on_mouse_scroll_up", "method", ("event",), "overridden by the preview"),
    ("textual.app", "App._check_bindings", "method", ("key", "priority"), "key_order, prompt_screen: run a binding now"),
    ("textual.app", "App._handle_exception", "method", ("error",), "overridden: recovery before a crash exit"),
    ("textual.app", "App._keymap", "attribute", None, "editor_app: keys as rebound"),
    ("textual.app", "App._driver", "attribute", None, "terminal: the watchdog restores the terminal's modes"),
    ("textual.drivers.linux_driver", "LinuxDriver._file", "attribute", None, "terminal: the watchdog's last writes"),
    ("textual.screen", "Screen._binding_chain", "property", None, "key_order: is a key bound"),
    ("textual.screen", "Screen._modal_binding_chain", "property", None, "key_order: is a key bound"),
    ("textual.screen", "Screen._result_callbacks", "attribute", None, "prompt_screen: who asked"),
    ("textual.screen", "ResultCallback.requester", "attribute", None, "prompt_screen: wait for the answer to run"),
    ("textual.dom", "DOMNode._bindings", "attribute", None, "prompt_screen: the Input's keys"),
    ("textual.drivers.linux_driver", "LinuxDriver._run_input_thread", "method", (), "overridden: a crash goes to recovery"),
    ("textual.drivers.linux_driver", "LinuxDriver.run_input_thread", "method", (), "overridden: invalid UTF-8 replaced"),
    ("textual.drivers.linux_driver", "LinuxDriver._writer_thread", "attribute", None, "terminal: never block on a dead writer"),
    ("textual.drivers.linux_driver", "LinuxDriver._debug", "attribute", None, "terminal: the parser's debug flag"),
    ("textual.drivers._writer_thread", "WriterThread._queue", "attribute", None, "terminal: bounded puts"),
]


def resolve(module: str, path: str):
    owner = importlib.import_module(module)
    parts = path.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    return owner, parts[-1]


def declared_in_source(cls: type, name: str) -> bool:
    """`name` is assigned on self or declared in the body of `cls` or a base class it has."""
    pattern = re.compile(rf"(self\.{re.escape(name)}\s*(:[^=\n]+)?=|^\s+{re.escape(name)}\s*[:=])", re.M)
    for klass in cls.__mro__:
        if klass.__module__.startswith("textual") and pattern.search(inspect.getsource(klass)):
            return True
    return False


@pytest.mark.parametrize("module, path, kind, shape, user", NAMES, ids=[f"{m}:{p}" for m, p, *_ in NAMES])
def test_a_private_textual_name_the_editor_uses_is_there(module, path, kind, shape, user):
    owner, name = resolve(module, path)
    if kind == "attribute":
        assert declared_in_source(owner, name), f"{path} is no longer set by Textual ({user})"
        return
    assert hasattr(owner, name), f"{module}.{path} is gone ({user})"
    value = getattr(owner, name)
    if kind == "class":
        assert inspect.isclass(value)
    elif kind == "property":
        assert isinstance(inspect.getattr_static(owner, name), property)
    elif kind == "constant" and shape is not None:
        assert isinstance(value, shape)
    elif kind in ("method", "function"):
        parameters = [p for p in inspect.signature(value).parameters if p != "self"]
        assert tuple(parameters) == shape, f"{path}{tuple(parameters)}: sharpen calls or overrides it as {shape} ({user})"


def test_the_writer_thread_stops_on_none():
    """terminal.SharpenDriver.close puts None itself (WriterThread.stop's put has no timeout)."""
    from textual.drivers._writer_thread import WriterThread

    assert "self._queue.put(None)" in inspect.getsource(WriterThread.stop)


def test_every_private_name_used_in_app_is_listed():
    """A `._name` in app/ that Textual defines (and sharpen does not) must be in NAMES."""
    import textual

    textual_source = "\n".join(p.read_text(encoding="utf-8") for p in Path(textual.__file__).parent.rglob("*.py"))
    ours = "\n".join(p.read_text(encoding="utf-8") for p in APP.rglob("*.py"))
    listed = {path.split(".")[-1] for _, path, *_ in NAMES} | {module.split(".")[-1] for module, *_ in NAMES}
    # sharpen's own names that Textual happens to use too (checked by hand: set by sharpen's classes)
    own = {"_height", "_text", "_ready", "_pending", "_timer", "_exit", "_loop", "_watch", "_write", "_lock", "_work",
           "_source", "_line_bytes", "_stop", "_key", "_read",
           "_expire", "_wrap", "_shutdown", "_event"}  # NextEditor._event; remote_http's watchdog, the OpenAI shapes' chunk, lsp_protocol's flag
    used = set(re.findall(r"\._([a-z][a-z_]*)\b", ours))
    defined_by_textual = {n for n in used if re.search(rf"(def _{n}\b|self\._{n}\s*[:=])", textual_source)}
    missing = sorted(f"_{n}" for n in defined_by_textual if f"_{n}" not in listed | own)
    assert not missing, f"private Textual names used in app/ but not in NAMES: {missing}"


def test_docs_list_every_name():
    listed = (APP.parent / "docs" / "textual-upstream.md").read_text(encoding="utf-8")
    missing = [f"{m}.{p}" for m, p, *_ in NAMES if f"`{m}.{p}`" not in listed]
    assert not missing, f"docs/textual-upstream.md does not list {missing}"
