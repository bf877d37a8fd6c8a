"""PromptScreen: a one-line question (find, go to line, save as, rewrite instruction)."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class PromptScreen(ModalScreen[str | None]):
    """Dismisses with the typed text on Enter, or None on Esc."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="prompt.cancel")]

    DEFAULT_CSS = """
    PromptScreen {
        align: center top;
        background: $background 40%;
        & > Vertical {
            margin-top: 3;
            width: 70;
            height: auto;
            padding: 1 2;
            background: $panel;
            border: round $primary;
        }
        & Label { width: 100%; margin-bottom: 1; }
        & .prompt-screen--hint { color: $foreground 60%; margin: 1 0 0 0; }
    }
    """

    def __init__(self, question: str, value: str = "", placeholder: str = "", hint: str = "") -> None:
        super().__init__()
        self.question, self.value, self.placeholder, self.hint = question, value, placeholder, hint

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.question, markup=False)
            yield Input(self.value, placeholder=self.placeholder, select_on_focus=True)
            if self.hint:
                yield Label(self.hint, classes="prompt-screen--hint", markup=False)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)
