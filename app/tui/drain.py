"""Waiting for a widget's message queue: Textual hands keys and callbacks to each widget's own
queue, so "everything before this has been handled" is a callback posted behind it."""
from __future__ import annotations

import asyncio

from textual.message_pump import MessagePump

WAIT_SECONDS = 5.0  # the longest a key waits for the widget or dialog before it (then it goes on as Textual would send it)


async def drained(pump: MessagePump, timeout: float = WAIT_SECONDS) -> bool:
    """Wait until `pump` has handled every message posted to it so far; False after `timeout`."""
    if not pump.is_running:
        return False
    done = asyncio.get_running_loop().create_future()
    pump.call_later(lambda: done.done() or done.set_result(None))
    finished, _ = await asyncio.wait([done], timeout=timeout)
    return bool(finished)
