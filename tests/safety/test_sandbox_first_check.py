"""Many jobs setting up their first sandbox at the same moment all get one that works.

Each process is a worker; each thread in it is a job with its own sandbox, as a worker running
jobs side by side has. They are released together (a pipe for the processes, a barrier for the
threads) so that their first self-checks overlap; none may fail, and the outcome remembered for
the machine must say the sandbox works.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="needs bubblewrap: apt-get install bubblewrap"
)

PROCESSES = 3
THREADS = 12

WORKER = f"""
import sys, threading
from steward.safety.sandbox.bubblewrap import BubblewrapSandbox

barrier = threading.Barrier({THREADS})
outcomes = []

def job():
    sandbox = BubblewrapSandbox()
    barrier.wait()
    status = sandbox.probe()
    outcomes.append((status.ok, status.reason))

threads = [threading.Thread(target=job) for _ in range({THREADS})]
print("ready", flush=True)
sys.stdin.readline()  # every process waits here until all are started
for t in threads:
    t.start()
for t in threads:
    t.join()
for ok, reason in outcomes:
    print(ok, reason, flush=True)
"""


def test_first_self_checks_at_the_same_moment_all_succeed(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(PROCESSES)
    ]
    for worker in workers:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "ready"
    for worker in workers:  # all released at once
        assert worker.stdin is not None
        worker.stdin.write("go\n")
        worker.stdin.flush()
    outcomes = []
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        assert worker.returncode == 0, err
        outcomes += out.splitlines()
    assert len(outcomes) == PROCESSES * THREADS
    failed = [line for line in outcomes if not line.startswith("True ")]
    assert not failed, failed
    remembered = json.loads((tmp_path / "state" / "steward" / "sandbox-check.json").read_text())
    assert remembered["ok"] is True, remembered["reason"]
    leftovers = [p.name for p in (tmp_path / "state" / "steward").iterdir() if p.name.endswith(".tmp")]
    assert not leftovers
