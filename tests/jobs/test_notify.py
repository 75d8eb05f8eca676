"""[notify]: a job that ends or waits is sent, as JSON, to a real local HTTP receiver and to a real
command; a broken hook is a problem reported within its timeout, never an exception."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from steward.config import load_config
from steward.errors import ConfigError
from steward.jobs.notify import EVENTS, Notifier
from steward.jobs.store import Job


def make_job(**changes: Any) -> Job:
    job = Job(
        id="a1b2c3d4e5f6", role="coder", goal="fix the tests", workspace="/srv/repo", priority=0,
        idempotency_key=None, user_key="alice", parent_id=None, status="done", attempts=1,
        max_attempts=3, run_id="a1b2c3d4e5f6", result="all green", error=None,
        output_schema={"type": "object"}, lease_owner=None, lease_expires_at=None, fence=2,
        cancel_requested=False, reply=None, session_id=None, model=None, mode=None,
        created_at=1_700_000_000.0, updated_at=1_700_000_100.5,
        started_at=1_700_000_001.0, finished_at=1_700_000_100.5,
    )  # fmt: skip
    return dataclasses.replace(job, **changes)


@dataclasses.dataclass
class Delivery:
    path: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    """A webhook on loopback: answers with ``statuses`` in turn (then 200) and keeps every request."""

    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.requests: list[Delivery] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                receiver.requests.append(Delivery(self.path, headers, body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                answer = b"bad payload: no such hook" if status != 200 else b"ok"
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/steward?token=s3cret"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    thread = threading.Thread(target=r.server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()
    thread.join(5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def python(code: str, *args: str) -> tuple[str, ...]:
    return (sys.executable, "-c", code, *args)


# --- HTTP -------------------------------------------------------------------------------------


async def test_a_post_carries_the_job_as_json_with_its_headers_and_signature(receiver: Receiver) -> None:
    notifier = Notifier(url=receiver.url, headers={"Authorization": "Bearer t0k"}, secret="shh")
    job = make_job()
    assert await notifier.notify(job, "done") == []
    [request] = receiver.requests
    assert request.path == "/hooks/steward?token=s3cret"
    sent = json.loads(request.body)
    assert sent == {"event": "done", "job": dataclasses.asdict(job)}
    h = request.headers
    assert h["content-type"] == "application/json" and h["user-agent"] == "steward"
    assert h["authorization"] == "Bearer t0k"
    assert h["x-steward-delivery"] == "a1b2c3d4e5f6-done-2.1700000100500000"
    expected = hmac.new(b"shh", request.body, hashlib.sha256).hexdigest()
    assert h["x-steward-signature"] == f"sha256={expected}"


async def test_without_a_secret_nothing_is_signed(receiver: Receiver) -> None:
    assert await Notifier(url=receiver.url).notify(make_job(), "done") == []
    assert "x-steward-signature" not in receiver.requests[0].headers


async def test_server_errors_are_tried_again_and_delivered_once(receiver: Receiver) -> None:
    receiver.statuses = [500, 503]
    assert await Notifier(url=receiver.url).notify(make_job(), "failed") == []
    assert len(receiver.requests) == 3
    assert len({r.headers["x-steward-delivery"] for r in receiver.requests}) == 1  # one delivery
    assert len({r.body for r in receiver.requests}) == 1


async def test_server_errors_past_the_retries_are_a_problem(receiver: Receiver) -> None:
    receiver.statuses = [500] * 10
    [problem] = await Notifier(url=receiver.url).notify(make_job(), "done")
    assert len(receiver.requests) == 4  # the first try and 3 more
    assert "failed 4 times" in problem and "answered 500" in problem


async def test_a_client_error_is_not_tried_again_and_is_a_problem(receiver: Receiver) -> None:
    receiver.statuses = [400]
    [problem] = await Notifier(url=receiver.url).notify(make_job(), "done")
    assert len(receiver.requests) == 1
    assert "notify done of job a1b2c3d4e5f6" in problem
    assert "answered 400: bad payload: no such hook" in problem and "not tried again" in problem
    assert "s3cret" not in problem and "/hooks" not in problem  # a webhook's path may be its secret


HANGS_S = 60.0
"""How long what these tests start would take if it were waited for: a bound far from it tells
"given up" from "waited", however busy the machine (a bound near the timeout does not)."""


async def test_an_unreachable_url_is_a_problem_within_the_timeout() -> None:
    notifier = Notifier(url=f"http://127.0.0.1:{free_port()}/hook", timeout_s=1.0)
    started = time.monotonic()
    [problem] = await notifier.notify(make_job(), "dead")
    assert time.monotonic() - started < HANGS_S / 2  # given up, not left to hang
    assert "ConnectError" in problem


async def test_a_receiver_that_never_answers_is_given_up_at_the_timeout() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog) and never reads them
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        notifier = Notifier(url=f"http://127.0.0.1:{silent.getsockname()[1]}/", timeout_s=0.5)
        started = time.monotonic()
        [problem] = await notifier.notify(make_job(), "done")
    assert time.monotonic() - started < HANGS_S / 2  # it would never answer: given up
    assert "did not succeed within 0.5 s" in problem


# --- the command ------------------------------------------------------------------------------

RECORD = """
import json, os, sys
env = {k: v for k, v in os.environ.items() if k.startswith("STEWARD_")}
with open(sys.argv[1], "w") as f:
    json.dump({"stdin": sys.stdin.read(), "env": env}, f)
"""


async def test_a_command_gets_the_job_on_stdin_and_in_its_environment(tmp_path: Path) -> None:
    out = tmp_path / "got.json"
    job = make_job(status="waiting", finished_at=None)
    assert await Notifier(command=python(RECORD, str(out))).notify(job, "waiting") == []
    got = json.loads(out.read_text())
    assert json.loads(got["stdin"]) == {"event": "waiting", "job": dataclasses.asdict(job)}
    assert got["env"]["STEWARD_JOB_ID"] == "a1b2c3d4e5f6"
    assert got["env"]["STEWARD_JOB_STATUS"] == "waiting"
    assert got["env"]["STEWARD_JOB_EVENT"] == "waiting"
    assert got["env"]["STEWARD_DELIVERY"].startswith("a1b2c3d4e5f6-waiting-2.")


async def test_a_command_that_fails_is_a_problem_with_its_code_and_stderr() -> None:
    code = "import sys; sys.stderr.write('x' * 5000 + 'token expired\\n'); sys.exit(3)"
    [problem] = await Notifier(command=python(code)).notify(make_job(), "done")
    assert "exited with code 3" in problem and problem.endswith("token expired")
    assert len(problem) < 700  # the tail of stderr, not all of it


async def test_a_command_that_ignores_its_stdin_is_fine() -> None:
    assert await Notifier(command=python("pass")).notify(make_job(result="r" * 500_000), "done") == []


async def test_a_missing_program_is_a_problem() -> None:
    [problem] = await Notifier(command=("/nonexistent/notify-me",)).notify(make_job(), "done")
    assert "could not start" in problem and "[notify] command" in problem


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


async def test_a_command_past_its_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "open(sys.argv[1], 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    notifier = Notifier(command=python(code, str(pid_file)), timeout_s=1.0)
    started = time.monotonic()
    [problem] = await notifier.notify(make_job(), "done")
    assert time.monotonic() - started < HANGS_S / 2  # killed, not waited for
    assert "took longer than 1 s" in problem and "killed" in problem
    child = int(pid_file.read_text())
    for _ in range(1500):  # SIGKILL is delivered at once, but a busy kernel may take a moment
        if not _running(child):
            break
        await asyncio.sleep(0.02)
    assert not _running(child)


async def test_a_child_the_command_leaves_running_is_not_waited_for(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "open(sys.argv[1], 'w').write(str(child.pid))\n"
    )  # the child keeps the command's stderr open
    started = time.monotonic()
    try:
        assert (
            await Notifier(command=python(code, str(pid_file)), timeout_s=5).notify(make_job(), "done") == []
        )
        assert time.monotonic() - started < HANGS_S / 2  # the child (60 s) was not waited for
    finally:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)


# --- which events, and when nothing is configured ----------------------------------------------


async def test_only_the_events_in_on_are_sent(receiver: Receiver, tmp_path: Path) -> None:
    out = tmp_path / "got.json"
    notifier = Notifier(url=receiver.url, command=python(RECORD, str(out)), on=frozenset({"failed"}))
    assert await notifier.notify(make_job(), "done") == []
    assert receiver.requests == [] and not out.exists()
    assert await notifier.notify(make_job(status="failed"), "failed") == []
    assert len(receiver.requests) == 1 and out.exists()  # both hooks, for the one event


async def test_an_unknown_event_is_a_problem_not_an_exception(receiver: Receiver) -> None:
    [problem] = await Notifier(url=receiver.url).notify(make_job(), "finished")
    assert "unknown event 'finished'" in problem and ", ".join(EVENTS) in problem
    assert receiver.requests == []


async def test_without_a_notify_section_the_notifier_is_off(tmp_path: Path) -> None:
    config = load_config(tmp_path, environ={}, user_file=tmp_path / "none.toml")
    notifier = Notifier.from_config(config)
    assert not notifier.enabled
    assert await notifier.notify(make_job(), "done") == []


# --- configuration ------------------------------------------------------------------------------


def load(tmp_path: Path, toml: str) -> Notifier:
    (tmp_path / "steward.toml").write_text(toml)
    return Notifier.from_config(load_config(tmp_path, environ={}, user_file=tmp_path / "none.toml"))


def test_a_notify_section_makes_the_notifier(tmp_path: Path) -> None:
    notifier = load(
        tmp_path,
        '[notify]\ncommand = ["notify-send", "steward"]\nurl = "https://hooks.example.com/x"\n'
        'on = ["failed", "dead"]\ntimeout_s = 3\nheaders = {Authorization = "Bearer t"}\nsecret = "k"\n',
    )
    assert notifier.enabled
    assert notifier.command == ("notify-send", "steward") and notifier.url == "https://hooks.example.com/x"
    assert notifier.on == {"failed", "dead"} and notifier.timeout_s == 3.0
    assert notifier.headers == {"Authorization": "Bearer t"} and notifier.secret == "k"
    assert load(tmp_path, '[notify]\nurl = "http://127.0.0.1:9/"\n').on == set(EVENTS)  # all by default


def test_a_later_layer_replaces_the_command_and_events(tmp_path: Path) -> None:
    user = tmp_path / "user.toml"
    user.write_text('[notify]\ncommand = ["mail", "me"]\non = ["done", "failed"]\n')
    (tmp_path / "steward.toml").write_text('[notify]\ncommand = ["notify-send", "x"]\non = ["dead"]\n')
    notifier = Notifier.from_config(load_config(tmp_path, environ={}, user_file=user))
    assert notifier.command == ("notify-send", "x") and notifier.on == {"dead"}


def test_a_command_given_as_a_string_asks_for_a_list(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load(tmp_path, "[notify]\ncommand = \"notify-send 'job ended'\"\n")
    message = str(err.value)
    assert "steward.toml" in message and "'notify.command' must be a list of strings" in message
    assert 'command = ["notify-send", "job ended"]' in message


@pytest.mark.parametrize("url", ["ftp://example.com/x", "example.com/hook", "http://", "http://h:port/"])
def test_a_url_must_be_http_or_https(tmp_path: Path, url: str) -> None:
    with pytest.raises(ConfigError, match=r"steward.toml: 'notify.url' must be an http:// or https:// URL"):
        load(tmp_path, f'[notify]\nurl = "{url}"\n')


def test_an_unknown_event_names_the_allowed_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load(tmp_path, '[notify]\non = ["done", "finished"]\n')
    message = str(err.value)
    assert "'notify.on' cannot be 'finished'" in message
    assert "'done', 'failed', 'cancelled', 'dead' or 'waiting'" in message


def test_headers_must_be_sendable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'notify.headers' has 'Bad Name'"):
        load(tmp_path, '[notify]\nheaders = {"Bad Name" = "x"}\n')
    with pytest.raises(ConfigError, match=r"'notify.headers.X-Token' holds a line break"):
        load(tmp_path, '[notify]\nheaders = {X-Token = "a\\nb"}\n')


def test_a_timeout_is_bounded(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'notify.timeout_s'.* greater than 0"):
        load(tmp_path, "[notify]\ntimeout_s = 0\n")
    with pytest.raises(ConfigError, match=r"'notify.timeout_s'.* less than or equal to 300"):
        load(tmp_path, "[notify]\ntimeout_s = 3600\n")
