"""What fires once typing pauses: the ghost completion and next-edit prediction share this rule.

One timer per pause, not per key: when it comes due early (the user typed on since) it waits out
the rest, then fires if the owner says it may (`why_not()` is None). The owner keeps `state`,
`pause` (seconds), `pane`, `_typed_at` (when the buffer last changed) and `_timer`.
"""
from __future__ import annotations

import time

WAITING = "waiting"


class FiresAfterPause:
    def wait_for_pause(self) -> None:
        """Typing happened: fire after `pause` seconds without more of it."""
        self.state = WAITING
        if self._timer is None:
            self._timer = self.pane.set_timer(self.pause, self._due)

    def _due(self) -> None:
        self._timer = None
        if self.state != WAITING:
            return
        left = self.pause - (time.perf_counter() - self._typed_at)
        if left > 0.001:
            self._timer = self.pane.set_timer(left, self._due)
            return
        self.state = None
        if self.why_not() is None:
            self.fire()
