"""Counters for /metrics, in Prometheus' text format (what llama.cpp's --metrics also speaks)."""
from __future__ import annotations

import threading
from collections import Counter


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # handlers run on the loop, runs finish on worker threads
        self.requests: Counter = Counter()  # (endpoint, status) -> answered requests
        self.tokens = 0  # tokens generated (pad/eos removed)
        self.steps = 0  # denoising steps run
        self.seconds = 0.0  # wall time of finished runs
        self.runs = 0
        self.cancelled = 0  # runs stopped by a client leaving or a time budget

    def answered(self, endpoint: str, status: int) -> None:
        with self._lock:
            self.requests[endpoint, status] += 1

    def finished(self, tokens: int, steps: int, seconds: float) -> None:
        with self._lock:
            self.tokens += tokens
            self.steps += steps
            self.seconds += seconds
            self.runs += 1

    def stopped(self) -> None:
        with self._lock:
            self.cancelled += 1

    def render(self, waiting: int, batching=None) -> str:
        """The text; `batching`: the batcher's counts (core.batch.BatchCounts: packed passes run,
        runs' passes they held, ...) when runs share passes."""
        with self._lock:
            lines = [
                "# HELP sharpen_requests_total Requests answered, by endpoint and status.",
                "# TYPE sharpen_requests_total counter",
                *(f'sharpen_requests_total{{endpoint="{e}",status="{s}"}} {n}' for (e, s), n in sorted(self.requests.items())),
                "# HELP sharpen_tokens_generated_total Tokens written by finished runs.",
                "# TYPE sharpen_tokens_generated_total counter",
                f"sharpen_tokens_generated_total {self.tokens}",
                "# HELP sharpen_steps_total Denoising steps of finished runs.",
                "# TYPE sharpen_steps_total counter",
                f"sharpen_steps_total {self.steps}",
                "# HELP sharpen_run_seconds Wall time of finished runs.",
                "# TYPE sharpen_run_seconds summary",
                f"sharpen_run_seconds_sum {self.seconds:.6f}",
                f"sharpen_run_seconds_count {self.runs}",
                "# HELP sharpen_runs_stopped_total Runs stopped by a client leaving or a time budget.",
                "# TYPE sharpen_runs_stopped_total counter",
                f"sharpen_runs_stopped_total {self.cancelled}",
                "# HELP sharpen_runs_waiting Runs in line for the model, the running one included.",
                "# TYPE sharpen_runs_waiting gauge",
                f"sharpen_runs_waiting {waiting}",
            ]
        if batching is not None:  # runs per pass = the second over the first: 1 when nothing is shared
            lines += [
                "# HELP sharpen_packed_passes_total Forward passes run for runs sharing the model (core/batch.py).",
                "# TYPE sharpen_packed_passes_total counter",
                f"sharpen_packed_passes_total {batching[0]}",
                "# HELP sharpen_packed_pass_runs_total Runs' passes those passes held (over passes: runs per pass).",
                "# TYPE sharpen_packed_pass_runs_total counter",
                f"sharpen_packed_pass_runs_total {batching[1]}",
            ]
            if len(batching) > 2:  # a local batcher's full counts (core.batch.BatchCounts)
                lines += _batching_details(batching)
        return "\n".join(lines) + "\n"


RUNS_BUCKETS = (1, 2, 3, 4, 6, 8, 16)  # runs per pass: le="1" is the passes that ran alone


def _batching_details(counts) -> list[str]:
    """Runs per pass as a Prometheus histogram, the whole-canvas passes apart, and the passes that
    waited for another run's (core/batch.py's re-alignment)."""
    by_runs = dict(counts.by_runs)
    cumulative = [sum(n for runs, n in by_runs.items() if runs <= le) for le in RUNS_BUCKETS]
    return [
        "# HELP sharpen_pass_runs Runs each packed forward pass held (le=\"1\": passes that ran alone).",
        "# TYPE sharpen_pass_runs histogram",
        *(f'sharpen_pass_runs_bucket{{le="{le}"}} {n}' for le, n in zip(RUNS_BUCKETS, cumulative)),
        f'sharpen_pass_runs_bucket{{le="+Inf"}} {counts.passes}',
        f"sharpen_pass_runs_sum {counts.packed_runs}",
        f"sharpen_pass_runs_count {counts.passes}",
        "# HELP sharpen_whole_canvas_passes_total Packed passes that held a whole canvas (a prefill, a refresh, an uncached step).",
        "# TYPE sharpen_whole_canvas_passes_total counter",
        f"sharpen_whole_canvas_passes_total {counts.whole_passes}",
        "# HELP sharpen_whole_canvas_pass_runs_total Whole canvases those passes held (over them: canvases per canvas pass).",
        "# TYPE sharpen_whole_canvas_pass_runs_total counter",
        f"sharpen_whole_canvas_pass_runs_total {counts.whole_runs}",
        "# HELP sharpen_passes_held_total Runs' passes that waited for another run's pass before running (re-alignment).",
        "# TYPE sharpen_passes_held_total counter",
        f"sharpen_passes_held_total {counts.held}",
        "# HELP sharpen_passes_held_seconds_total Time those passes waited, summed.",
        "# TYPE sharpen_passes_held_seconds_total counter",
        f"sharpen_passes_held_seconds_total {counts.held_seconds:.6f}",
    ]
