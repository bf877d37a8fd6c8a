"""ConfirmScreen: a question with a few buttons, e.g. quitting with unsaved changes."""
from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class ConfirmScreen(ModalScreen[str]):
    """Dismisses with the id of the pressed button; Esc answers "cancel"."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="confirm.cancel")]

    DEFAULT_CSS = """
    ConfirmScreen {
        align: center middle;
        background: $background 40%;
        & > Vertical {
            width: 64;
            height: auto;
            padding: 1 2;
            background: $panel;
            border: round $warning;
        }
        & Label { width: 100%; margin-bottom: 1; }
        & Horizontal { height: auto; align: right middle; }
        & Button { margin-left: 1; }
    }
    """

    def __init__(self, question: str, choices: list[tuple[str, str, str]]) -> None:
        """`choices`: (id, label, button variant), the first one focused."""
        super().__init__()
        self.question, self.choices = question, choices

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.question, markup=False)
            with Horizontal():
                for choice_id, label, variant in self.choices:
                    yield Button(label, id=choice_id, variant=variant)

    def on_mount(self) -> None:
        self.query_one(f"#{self.choices[0][0]}", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id)

    def action_cancel(self) -> None:
        self.dismiss("cancel")
