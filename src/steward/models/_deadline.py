"""One bound on a whole model call, not on the gap between two pieces of it.

An HTTP client's timeout restarts with every byte: a local model that keeps producing tokens
slowly never trips it. ``bounded`` reads a stream against one deadline set when the call
starts, so ``timeout_s`` is the most a call can take whatever the server does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def deadline_after(timeout_s: float | None) -> float | None:
    """The loop time by which a call started now must be over (None: no bound)."""
    return None if timeout_s is None else asyncio.get_running_loop().time() + timeout_s


async def before(deadline: float | None, awaitable: Awaitable[T], timed_out: Callable[[], Exception]) -> T:
    """Await ``awaitable``, or raise ``timed_out()`` if the deadline passes first."""
    if deadline is None:
        return await awaitable
    remaining = deadline - asyncio.get_running_loop().time()
    try:
        return await asyncio.wait_for(awaitable, max(remaining, 0.0))
    except TimeoutError:
        raise timed_out() from None


async def bounded(
    items: AsyncIterator[T], deadline: float | None, timed_out: Callable[[], Exception]
) -> AsyncIterator[T]:
    """The items of ``items``, each awaited before ``deadline``; then ``timed_out()`` is raised."""
    while True:
        try:
            item = await before(deadline, anext(items), timed_out)
        except StopAsyncIteration:
            return
        yield item
