"""A run on a worker thread, its events awaited on the event loop.

    handle = start_run(backend, request, every=0.0, seconds=30)
    async for event in handle.events():   # core.events.Progress ..., then Done, or Stopped
        ...
    handle.cancel()                       # between two denoising steps

The backend's run is a blocking iterator (core.run.Runner: the model's lock, the denoising
loop), so it runs on a thread of its own and hands each event to the loop with
call_soon_threadsafe. A handle that is cancelled (the client left) or runs past its time ends
with Stopped carrying the last frame it saw, so an endpoint with a time budget (llama.cpp's
t_max_predict_ms) can still answer with what was committed.
"""
from __future__ import annotations

import asyncio
import threading
import time
from typing import AsyncIterator

from ...core.events import Done, Progress, Stopped


_END = object()


class RunHandle:
    def __init__(self, backend, request, every: float | None, seconds: float) -> None:
        self.stop = threading.Event()
        self.deadline = time.monotonic() + seconds
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue = asyncio.Queue()
        self.started = time.perf_counter()
        self.thread = threading.Thread(target=self._work, args=(backend, request, every), daemon=True, name="sharpen-run")
        self.thread.start()

    def should_stop(self) -> bool:
        return self.stop.is_set() or time.monotonic() > self.deadline

    def cancel(self) -> None:
        self.stop.set()

    def _put(self, item) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the loop closed (server shutting down): nobody is listening
            self.stop.set()

    def _work(self, backend, request, every) -> None:
        try:
            for event in backend.run(request, self.should_stop, every):
                self._put(event)
        except BaseException as exc:  # handed to the request, which answers it as JSON
            self._put(exc)
        self._put(_END)

    async def events(self) -> AsyncIterator[object]:
        """The run's events; the last is Done, or Stopped when it was cancelled or ran out of time."""
        last = None
        try:
            while True:
                item = await self.queue.get()
                if item is _END:
                    yield Stopped("cancelled" if self.stop.is_set() else "deadline", last)
                    return
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, Progress):
                    last = item
                yield item
                if isinstance(item, Done):
                    return
        finally:
            self.cancel()  # a consumer that leaves early (a disconnect cancels its task) stops the run


def start_run(backend, request, every: float | None = None, seconds: float = 60.0) -> RunHandle:
    return RunHandle(backend, request, every, seconds)


async def cancel_on_disconnect(request, handle: RunHandle) -> None:
    """Wait for the client to go away, then cancel `handle` (run beside a non-streamed answer)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            handle.cancel()
            return
