"""Waiting for conditions in tests: poll until true, or fail after a generous deadline."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

from informerd.client import Client


async def eventually(
    check: Callable[[], bool | Awaitable[bool]],
    what: str,
    timeout_s: float = 30.0,
    interval_s: float = 0.05,
) -> None:
    """Polls ``check`` (a function or a coroutine function) until it returns true; fails with
    AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        await asyncio.sleep(interval_s)


async def queue_idle(client: Client, queue: str) -> bool:
    """No key of ``queue`` waiting, delayed or in flight."""
    s = (await client.queues.get(queue)).state
    return s.depth == 0 and s.in_flight == 0 and s.delayed == 0
