"""StatusBar: one line at the bottom: file, position, language | run progress | model, device."""
from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget


class StatusBar(Widget):
    """Reactive fields, each set by the app; the line redraws when any of them changes."""

    COMPONENT_CLASSES = {"status-bar--dirty", "status-bar--run", "status-bar--error", "status-bar--dim"}

    DEFAULT_CSS = """
    StatusBar {
        height: 1;
        background: $panel;
        color: $foreground;
        & > .status-bar--dirty { color: $warning; text-style: bold; }
        & > .status-bar--run { color: $accent; text-style: bold; }
        & > .status-bar--error { color: $error; }
        & > .status-bar--dim { color: $foreground 60%; }
    }
    """

    file_name: reactive[str] = reactive("")
    dirty: reactive[bool] = reactive(False)
    position: reactive[str] = reactive("")  # "Ln 3, Col 7"
    language: reactive[str] = reactive("")
    marks: reactive[int] = reactive(0)
    run: reactive[str] = reactive("")  # "step 7/32 · 140 tok/s" while a run goes on
    notice: reactive[str] = reactive("")  # the last run's outcome, or a hint
    model: reactive[str] = reactive("loading model…")
    model_failed: reactive[bool] = reactive(False)
    device: reactive[str] = reactive("")
    strength: reactive[float] = reactive(0.5)
    show_strength: reactive[bool] = reactive(False)  # only while text is selected (what Rewrite would use)

    def render(self) -> Text:
        style = self.get_component_rich_style
        left = Text(" ")
        left.append(self.file_name or "untitled")
        if self.dirty:
            left.append(" ●", style("status-bar--dirty"))
        left.append(f"  {self.position}  ", style("status-bar--dim"))
        left.append(self.language or "plain text", style("status-bar--dim"))
        if self.marks:
            left.append(f"  {self.marks} marked", style("status-bar--run"))
        if self.run:
            left.append(f"  {self.run}", style("status-bar--run"))
        elif self.notice:
            left.append(f"  {self.notice}", style("status-bar--error" if self.notice.startswith("edit failed") else "status-bar--dim"))
        right = Text()
        if self.show_strength:
            right.append(f"rewrite {self.strength:.0%}  ", style("status-bar--dim"))
        right.append(self.model, style("status-bar--error") if self.model_failed else "")
        if self.device:
            right.append(f" · {self.device}", style("status-bar--dim"))
        right.append(" ")
        width = self.size.width
        room = width - right.cell_len
        if left.cell_len > room:  # the model name always shows; the run info gets cut
            left.truncate(max(0, room - 1), overflow="ellipsis")
        return Text.assemble(left, " " * max(0, width - left.cell_len - right.cell_len), right)
