"""HelpScreen: every key of the editor, as currently bound (the config's keymap included)."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label


class HelpScreen(ModalScreen[None]):
    """A table of (keys, command, binding id); any of Esc, F1 or q closes it."""

    BINDINGS = [Binding("escape,f1,q", "close", "Close", id="help.close")]

    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
        background: $background 40%;
        & > Vertical {
            width: 96;
            height: 90%;
            padding: 0 1;
            background: $panel;
            border: round $primary;
            border-title-color: $primary;
        }
        & DataTable { height: 1fr; }
        & Label { width: 100%; color: $foreground 60%; margin: 1 0 0 0; }
    }
    """

    def __init__(self, rows: list[tuple[str, str, str]], footer: str) -> None:
        super().__init__()
        self.rows, self.footer = rows, footer

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "sharpen keys"
            table = DataTable(cursor_type="row", zebra_stripes=True)
            table.add_columns(Text("Keys"), Text("Command"), Text("Binding id (for [keymap])"))
            table.add_rows([tuple(Text(cell) for cell in row) for row in self.rows])  # plain text, no markup
            yield table
            yield Label(self.footer, markup=False)

    def action_close(self) -> None:
        self.dismiss(None)
