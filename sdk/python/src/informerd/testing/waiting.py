"""Waiting for a condition in tests: poll until it holds or fail after a generous deadline (never
assert that something happened within a tight bound: the machine may be loaded)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from informerd.client import Client

DEFAULT_WAIT_S = 60.0


async def eventually(
    condition: Callable[[], bool | Awaitable[bool]],
    what: str = "",
    timeout_s: float = DEFAULT_WAIT_S,
    *,
    interval_s: float = 0.05,
) -> None:
    """Returns once ``condition()`` (a function or a coroutine function) is true; raises
    AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what or condition}")
        await asyncio.sleep(interval_s)


def wait_until(
    condition: Callable[[], bool],
    what: str = "",
    timeout_s: float = DEFAULT_WAIT_S,
    *,
    interval_s: float = 0.05,
) -> None:
    """The blocking form of :func:`eventually`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what or condition}")
        time.sleep(interval_s)


async def queue_idle(client: Client, queue: str) -> bool:
    """No key of ``queue`` waiting, delayed or in flight."""
    s = (await client.queues.get(queue)).state
    return s.depth == 0 and s.in_flight == 0 and s.delayed == 0
