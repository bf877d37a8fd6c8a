"""StatusBar: one line at the bottom: file, position, language | run progress | model, device."""
from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget


def rate_text(tokens: int, seconds: float) -> str:
    rate = tokens / seconds if seconds > 0 else 0.0
    return f"{rate:.1f} tok/s" if rate < 10 else f"{rate:.0f} tok/s"


def run_summary(tokens: int, steps: int, compute: float, wall: float, paced: bool) -> str:
    """A finished run in one line: its real wall time first, then the model's own time and rate.
    A paced run (its steps held on screen to be watched) says so, or its 15 s would read as slow."""
    counted = "1 token" if tokens == 1 else f"{tokens} tokens"
    stepped = "1 step" if steps == 1 else f"{steps} steps"
    how = "paced, " if paced else ""
    return f"{counted} in {stepped}, {wall:.2f} s ({how}model {compute:.2f} s, {rate_text(tokens, compute)})"


def constraint_label(spans, width: int = 24) -> str:
    """The constraint a run steers to, short (`pattern [0-9]{4}-…`); "" when no span has one.
    Several constrained spans: the first, and how many more."""
    constraints = [s.constraint for s in spans if getattr(s, "constraint", None) is not None]
    if not constraints:
        return ""
    first = constraints[0]
    label = f"pattern {first.regex}" if first.regex is not None else first.describe()
    label = label if len(label) <= width else label[:width - 1] + "…"
    return label + (f" (+{len(constraints) - 1})" if len(constraints) > 1 else "")


def run_line(pane, keys_for) -> str:
    """What the status bar says of `pane`'s command run (an EditorPane; `keys_for(binding id)`
    gives the keys bound now): its progress while it runs, the keys and the alternative shown
    while its preview is up, nothing when idle."""
    run = pane.edit_run
    if run is None:
        return ""
    first_key = lambda binding_id: keys_for(binding_id).split(", ")[0]  # noqa: E731
    stats = run.stats
    if run.result is None:  # running
        rate = f" · {rate_text(stats.tokens, stats.compute_seconds)}" if stats and stats.step > 0 else ""  # no rate before a step ran
        progress = f"step {stats.step}/{stats.total_steps}{rate}" if stats else "starting…"
        steering = constraint_label(run.spans)
        steering = f" · {steering}" if steering else ""
        return f"{progress}{steering} · {first_key('cancel')} cancels"
    alternatives = ""
    if run.alternatives > 1:
        keys = "/".join(keys_for(i).split(", ")[-1] for i in ("next-alternative", "previous-alternative"))
        alternatives = f" · {keys}: alternative {run.choice + 1}/{run.alternatives}"
    candidates = getattr(run.result, "candidates", ()) or ()
    if run.choice < len(candidates):  # syntax-ranked candidates: say why this one is where it is
        candidate = candidates[run.choice]
        verdict = "parses" if candidate.new_errors == 0 else ("not checked" if candidate.new_errors is None else "breaks the parse")
        alternatives += f" · {verdict} · {sum(candidate.lengths)} slots"
    return f"{first_key('accept')} accepts · {first_key('cancel')} rejects{alternatives} · {pane.notice}"


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
    ghost: reactive[bool] = reactive(False)  # as-you-type completion is on (palette: Toggle ghost completion)

    def render(self) -> Text:
        """The line, fitted to the width by priority: the file, its dirty mark, the run and the
        model always show; the language goes first, then the position, then the marks; only
        then is the run's text itself cut (and the model name, last of all)."""
        style = self.get_component_rich_style
        width = self.size.width
        right = Text()
        if self.show_strength:
            right.append(f"rewrite {self.strength:.0%}  ", style("status-bar--dim"))
        if self.ghost:
            right.append("ghost · ", style("status-bar--dim"))
        right.append(self.model, style("status-bar--error") if self.model_failed else "")
        if self.device:
            right.append(f" · {self.device}", style("status-bar--dim"))
        right.append(" ")
        parts = self._left_parts()  # (priority, text); higher priority stays longer
        for drop in sorted({p for p, _ in parts if p < 9}):  # the lowest priority goes first
            if sum(t.cell_len for _, t in parts) + right.cell_len <= width:
                break
            parts = [(p, t) for p, t in parts if p != drop]
        left = Text.assemble(*(t for _, t in parts))
        if left.cell_len + right.cell_len > width:  # still too long: cut the run text, keep the model
            left.truncate(max(0, width - right.cell_len - 1), overflow="ellipsis")
            if left.cell_len + right.cell_len > width:
                right.truncate(max(0, width - left.cell_len), overflow="ellipsis")
        return Text.assemble(left, " " * max(0, width - left.cell_len - right.cell_len), right)

    def _left_parts(self) -> list[tuple[int, Text]]:
        style = self.get_component_rich_style
        name = Text(" " + (self.file_name or "untitled"))
        if self.dirty:
            name.append(" ●", style("status-bar--dirty"))
        parts = [(9, name), (2, Text(f"  {self.position}", style("status-bar--dim"))),
                 (1, Text(f"  {self.language or 'plain text'}", style("status-bar--dim")))]
        if self.marks:
            parts.append((3, Text(f"  {self.marks} marked", style("status-bar--run"))))
        if self.run:
            parts.append((9, Text(f"  {self.run}", style("status-bar--run"))))
        elif self.notice:
            kind = "status-bar--error" if self.notice.startswith("edit failed") else "status-bar--dim"
            parts.append((9, Text(f"  {self.notice}", style(kind))))
        return parts
