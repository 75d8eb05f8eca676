"""`scripts/test` says plainly what stops it: apt's lock held by another process (it names the
process), an apt-get that failed, and that PostgreSQL tests are skipped without a database URL.

It runs with a PATH that has no bubblewrap, so it goes to install it; the lock is a real
``fcntl`` lock this test holds, on a file named by ``APT_LOCKS`` instead of dpkg's own.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "test"


def run_script(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"  # what the script needs before it installs anything; no bwrap
    bin_dir.mkdir(exist_ok=True)
    for tool, target in (("python3", sys.executable), ("dirname", None), ("id", None)):
        found = target or shutil.which(tool)
        assert found is not None
        link = bin_dir / tool
        if not link.exists():
            link.symlink_to(found)
    bash = shutil.which("bash")
    assert bash is not None
    return subprocess.run(
        [bash, str(SCRIPT)], env={"PATH": str(bin_dir), **env}, capture_output=True, text=True, timeout=60
    )


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="reads /proc/locks")
def test_a_held_apt_lock_is_named_before_anything_is_installed(tmp_path: Path) -> None:
    lock = tmp_path / "lock-frontend"
    lock.touch()
    with lock.open("w") as held:
        fcntl.lockf(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as dpkg and apt take theirs
        done = run_script(tmp_path, APT_LOCKS=f"{tmp_path / 'absent'} {lock}")
    assert done.returncode == 2, done.stderr
    assert "bubblewrap must be installed, but apt is busy" in done.stderr
    assert f"(pid {os.getpid()}) holds {lock}" in done.stderr
    assert "apt-get" not in done.stderr.split("apt is busy")[0]  # nothing was tried before


def test_a_failing_apt_get_is_explained(tmp_path: Path) -> None:
    lock = tmp_path / "lock-frontend"
    lock.touch()  # free: the script goes on to apt-get, which is not on this PATH
    done = run_script(tmp_path, APT_LOCKS=str(lock))
    assert done.returncode == 2, done.stderr
    assert "installing bubblewrap with apt-get failed" in done.stderr
    assert "wait until it ends" in done.stderr


def test_it_says_the_postgresql_tests_are_skipped_without_a_database(tmp_path: Path) -> None:
    without = run_script(tmp_path, APT_LOCKS=str(tmp_path / "none"))
    assert "STEWARD_TEST_POSTGRES_URL is not set, so the PostgreSQL tests are skipped" in without.stderr
    given = run_script(tmp_path, APT_LOCKS=str(tmp_path / "none"), STEWARD_TEST_POSTGRES_URL="postgresql://x")
    assert "STEWARD_TEST_POSTGRES_URL" not in given.stderr
