"""Lines from standard input for asyncio code, read by one daemon thread.

``asyncio.to_thread(sys.stdin.readline)`` would leave a blocked worker thread that the event
loop waits for at shutdown (a Ctrl-C or a timed-out prompt would then hang). One daemon
reader per process avoids that, and a line typed after a prompt timed out is not lost: it
answers the next prompt.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import IO


class LineReader:
    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream
        self._queue: asyncio.Queue[str] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ended = False  # end of input is for good: every later read returns "" at once

    def _start(self) -> asyncio.Queue[str]:
        loop = asyncio.get_running_loop()
        if self._queue is None or self._loop is not loop:
            self._queue, self._loop = asyncio.Queue(), loop
            queue = self._queue
            stream = self.stream or sys.stdin

            def pump() -> None:
                for _ in iter(int, 1):  # until end of input: every line is handed over
                    try:
                        line = stream.readline()
                    except (OSError, ValueError):
                        line = ""
                    try:
                        loop.call_soon_threadsafe(queue.put_nowait, line)
                    except RuntimeError:  # the loop is gone: nobody is listening any more
                        return
                    if not line:
                        return

            threading.Thread(target=pump, name="steward-stdin", daemon=True).start()
        return self._queue

    async def readline(self) -> str:
        """The next line ("" at end of input, and at every read after it)."""
        if self._ended:
            return ""
        line = await self._start().get()
        self._ended = not line
        return line
