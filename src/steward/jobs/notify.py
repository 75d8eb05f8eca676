"""Tell someone when a job ends or starts waiting for a human (seed 004): the ``[notify]`` hook.

Usage, in the worker process::

    notifier = Notifier.from_config(config)       # the [notify] section; built once
    ...
    for problem in await notifier.notify(job, "done"):   # after the job ended or began to wait
        log(problem)

Events: ``done``, ``failed``, ``cancelled``, ``dead`` (the job ended) and ``waiting`` (its run
waits for a human); ``[notify] on`` picks which of them notify. The payload is the JSON object
``{"event": EVENT, "job": {...every Job field...}}``, sent to either hook or both at once:

* ``command``: a program and its arguments (no shell), run with the payload on stdin and
  ``STEWARD_JOB_ID``, ``STEWARD_JOB_STATUS``, ``STEWARD_JOB_EVENT`` and ``STEWARD_DELIVERY``
  set. A non-zero exit is a problem; past ``timeout_s`` its whole process group is killed.
* ``url``: an HTTP POST of the payload with ``Content-Type: application/json``,
  ``User-Agent: steward``, ``X-Steward-Delivery`` (the same for every try of one notification, so
  a receiver can drop repeats), ``X-Steward-Signature: sha256=HEX`` (HMAC-SHA256 of the body with
  ``secret``, when set) and the configured ``headers``. Connection failures and 5xx answers are
  tried again (``RETRIES`` times, with a short backoff); any other answer is final.

``notify`` never raises (cancellation aside) and returns within about ``timeout_s``: a broken
hook must not fail or stall a job, so whatever goes wrong comes back as a problem to log.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import hmac
import json
import os
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from steward.config import NOTIFY_EVENTS, Config, NotifySettings

if TYPE_CHECKING:
    import httpcore2

    from steward.jobs.store import Job

__all__ = ["EVENTS", "RETRIES", "Notifier", "delivery_id", "payload"]

EVENTS: tuple[str, ...] = NOTIFY_EVENTS
RETRIES = 3
"""Tries after the first for a POST that failed to connect or got a 5xx answer."""
BACKOFF_S = 0.25
"""Wait before the first retry; it doubles for each further one (all within ``timeout_s``)."""
USER_AGENT = "steward"
_TAIL_BYTES = 500  # of a command's stderr, or of an error answer, quoted in the problem
_KILL_WAIT_S = 1.0  # for a killed command's exit to be seen
_EOF_GRACE_S = 0.5  # for the rest of a command's stderr once it exited


@dataclass(frozen=True, slots=True)
class Notifier:
    """The configured hooks; ``enabled`` when there is a command or a URL and an event to send."""

    command: tuple[str, ...] = ()
    url: str | None = None
    on: frozenset[str] = frozenset(EVENTS)
    timeout_s: float = 10.0
    headers: Mapping[str, str] = field(default_factory=dict)
    secret: str | None = None

    @classmethod
    def from_config(cls, config: Config | NotifySettings) -> Notifier:
        """From a loaded configuration (its ``[notify]`` section), or the section itself."""
        settings = config.notify if isinstance(config, Config) else config
        return cls(
            command=tuple(settings.command),
            url=settings.url,
            on=frozenset(settings.on),
            timeout_s=settings.timeout_s,
            headers=dict(settings.headers),
            secret=settings.secret,
        )

    @property
    def enabled(self) -> bool:
        return bool((self.command or self.url) and self.on)

    async def notify(self, job: Job, event: str) -> list[str]:
        """Send ``event`` about ``job`` to every hook; the problems met, or none."""
        if not self.enabled:
            return []
        if event not in EVENTS:
            return [f"notify: unknown event {event!r} for job {job.id} (events: {', '.join(EVENTS)})"]
        if event not in self.on:
            return []
        where = f"notify {event} of job {job.id}"
        try:
            body = payload(job, event)
        except (TypeError, ValueError) as exc:
            return [f"{where}: the job cannot be written as JSON ({exc})"]
        delivery = delivery_id(job, event)
        sends = []
        if self.command:
            sends.append(self._run(body, job, event, delivery))
        if self.url:
            sends.append(self.post(self.url, body, delivery))
        results = await asyncio.gather(*sends, return_exceptions=True)
        problems: list[str] = []
        for result in results:
            if isinstance(result, asyncio.CancelledError):
                raise result
            if isinstance(result, BaseException):  # a bug of ours must not fail the job either
                problems.append(f"{where}: {type(result).__name__}: {result}")
            elif result is not None:
                problems.append(f"{where}: {result}")
        return problems

    # --- the command ------------------------------------------------------------------------

    async def _run(self, body: bytes, job: Job, event: str, delivery: str) -> str | None:
        program = self.command[0]
        env = {
            **os.environ, "STEWARD_JOB_ID": job.id, "STEWARD_JOB_STATUS": job.status,
            "STEWARD_JOB_EVENT": event, "STEWARD_DELIVERY": delivery,
        }  # fmt: skip
        loop = asyncio.get_running_loop()
        try:
            transport, hook = await loop.subprocess_exec(
                lambda: _Hook(loop),
                *self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=env,
                start_new_session=True,  # its own process group: a timeout kills its children too
            )
        except OSError as exc:
            return f"command {program!r} could not start ({exc.strerror or exc}); fix [notify] command"
        try:
            stdin = transport.get_pipe_transport(0)
            assert isinstance(stdin, asyncio.WriteTransport)
            stdin.write(body)  # a command that exits without reading it is fine (notify-send does)
            stdin.close()
            # asyncio.wait, not a timeout around `await`: that would cancel the future itself.
            if not (await asyncio.wait([hook.exited], timeout=self.timeout_s))[0]:
                _kill_group(transport.get_pid())
                await asyncio.wait([hook.exited], timeout=_KILL_WAIT_S)
                return f"command {program!r} took longer than {self.timeout_s:g} s (timeout_s) and was killed"
            # A child it left running may hold stderr open: it is given a moment, not waited for.
            await asyncio.wait([hook.stderr_closed], timeout=_EOF_GRACE_S)
            code = transport.get_returncode()
        finally:
            if not hook.exited.done():  # cancelled: the command goes with the caller
                _kill_group(transport.get_pid())
            transport.close()
        if code != 0:
            said = _printable(hook.stderr)
            return f"command {program!r} exited with code {code}" + (f": {said}" if said else "")
        return None

    # --- the URL ----------------------------------------------------------------------------

    async def post(self, url: str, body: bytes, delivery: str) -> str | None:
        import httpcore2

        # Only scheme, host and port in problems: a webhook's path or query is often its secret.
        target = _origin(url)
        headers = self._headers(body, delivery)
        tries, last = 0, "no try finished"
        try:
            async with asyncio.timeout(self.timeout_s), httpcore2.AsyncConnectionPool(retries=0) as pool:
                for tries in range(1, RETRIES + 2):
                    try:
                        status, answer = await self._send_once(pool, url, headers, body)
                    except (httpcore2.NetworkError, httpcore2.TimeoutException) as exc:
                        last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                    except httpcore2.RemoteProtocolError as exc:  # e.g. closed before answering
                        last = f"not valid HTTP ({exc})"
                    else:
                        if status < 300:
                            return None
                        last = f"answered {status}" + (f": {answer}" if answer else "")
                        if status < 500:
                            return f"POST to {target} {last} (not tried again)"
                    if tries <= RETRIES:
                        await asyncio.sleep(BACKOFF_S * 2 ** (tries - 1))
        except TimeoutError:
            return f"POST to {target} did not succeed within {self.timeout_s:g} s ({tries} tries; {last})"
        return f"POST to {target} failed {tries} times; the last: {last}"

    async def _send_once(
        self, pool: httpcore2.AsyncConnectionPool, url: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[int, str]:
        """One POST: the status, and the start of the answer when it is not a success."""
        t = self.timeout_s
        async with pool.stream(
            "POST",
            url,
            headers=headers,
            content=body,
            extensions={"timeout": {"connect": t, "read": t, "write": t, "pool": t}},
        ) as response:
            if response.status < 300:
                return response.status, ""
            answer = b""
            async with contextlib.aclosing(response.aiter_stream()) as chunks:
                async for chunk in chunks:
                    answer += chunk
                    if len(answer) >= _TAIL_BYTES:
                        break
        return response.status, _printable(answer[:_TAIL_BYTES])

    def _headers(self, body: bytes, delivery: str) -> list[tuple[bytes, bytes]]:
        named: dict[str, tuple[str, str]] = {}
        for name, value in [
            ("Content-Type", "application/json"),
            ("User-Agent", USER_AGENT),
            *self.headers.items(),  # may replace the two above, e.g. a receiver's own User-Agent
            ("X-Steward-Delivery", delivery),
        ]:
            named[name.lower()] = (name, value)
        if self.secret is not None:
            digest = hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
            named["x-steward-signature"] = ("X-Steward-Signature", f"sha256={digest}")
        return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in named.values()]


def payload(job: Job, event: str) -> bytes:
    """What every hook is sent: ``{"event": ..., "job": {...}}`` as UTF-8 JSON."""
    return json.dumps({"event": event, "job": dataclasses.asdict(job)}, ensure_ascii=False).encode()


def delivery_id(job: Job, event: str) -> str:
    """The same for every try of one notification, and new for the next one of the job.

    ``updated_at`` (in microseconds), not only the fence: a job cancelled while waiting, retried
    and cancelled again keeps its fence, but every change of the job moves ``updated_at``.
    """
    return f"{job.id}-{event}-{job.fence}.{round(job.updated_at * 1_000_000)}"


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def _printable(data: bytes) -> str:
    return " ".join(data.decode("utf-8", "replace").split())


class _Hook(asyncio.SubprocessProtocol):
    """The command's side: the tail of its stderr, its exit, the end of its stderr."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.stderr = b""
        self.exited: asyncio.Future[None] = loop.create_future()
        self.stderr_closed: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes | bytearray) -> None:
        if fd == 2:
            self.stderr = (self.stderr + data)[-_TAIL_BYTES:]

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 2 and not self.stderr_closed.done():
            self.stderr_closed.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
