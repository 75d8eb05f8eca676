"""The run's time limit: a clock that runs only while the loop steps live.

Time waiting for a human is not counted: the clock stops when the run pauses or ends and
starts again at the next check. The loop asks ``remaining()`` before each step and bounds
each await with it (``within``); a rebuilt run uses a recorded clock instead (see
``steward.recovery``), which says the time is up exactly where the log says it was.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    import asyncio

_T = TypeVar("_T")

RUN_TIMEOUT = "run_timeout"
"""The code of the signal a run emits when its time limit (``run_timeout_s``) ends it."""


class OutOfTime(Exception):  # noqa: N818 - control flow inside the loop, never raised past it
    """The run's time limit cut an await short."""


class Clock(Protocol):
    def remaining(self) -> float | None:
        """Seconds the run may still spend running; None when no limit applies."""
        ...

    def stop(self) -> None:
        """The run pauses or ends: stop counting."""
        ...


class Account(Protocol):
    """Where the seconds spent running are kept (the run's state)."""

    run_time_s: float


class RunClock:
    """Counts the seconds a run spends running against ``limit_s`` (0: no limit)."""

    def __init__(self, limit_s: float, account: Account) -> None:
        self.limit_s, self.account = limit_s, account
        self._since: float | None = None  # when the current stretch of running began (monotonic)

    def remaining(self) -> float | None:
        now = time.monotonic()
        if self._since is None:
            self._since = now
        spent = self.account.run_time_s + (now - self._since)
        return self.limit_s - spent if self.limit_s > 0 else None

    def stop(self) -> None:
        if self._since is not None:
            self.account.run_time_s += time.monotonic() - self._since
            self._since = None

    def cap(self, seconds: float) -> float | None:
        """Let the run run at most ``seconds`` more from now (a shared budget's time left),
        unless its limit leaves less; the new limit, or None when it is unchanged."""
        remaining = self.remaining()  # (starts the stretch's count if it had not)
        if remaining is not None and remaining <= seconds:
            return None
        assert self._since is not None
        spent = self.account.run_time_s + (time.monotonic() - self._since)
        self.limit_s = spent + max(seconds, 0.001)
        return self.limit_s


async def within(clock: Clock, start: Callable[[], Awaitable[_T]]) -> _T:
    """Await what ``start`` begins; ``OutOfTime`` when the run's time is up first."""
    remaining = clock.remaining()
    if remaining is None:
        return await start()
    if remaining <= 0:
        raise OutOfTime  # not even started: nothing to cancel
    deadline = timeout(remaining)
    try:
        async with deadline:
            return await start()
    except TimeoutError:
        if deadline.expired():
            raise OutOfTime from None
        raise


# asyncio is imported on first use, not with the module: `import steward` stays fast.
def timeout(seconds: float) -> asyncio.Timeout:
    import asyncio

    return asyncio.timeout(seconds)
