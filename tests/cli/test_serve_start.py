"""``steward serve`` says what stops it before it serves, stores no token until it serves, and
the first start that serves shows the token it made: without the serve extra (its import
blocked by a ``sitecustomize`` on ``PYTHONPATH``), with the port taken, with the store down."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

BLOCK = '''
import sys

class _NotInstalled:
    """As if the serve extra were not installed: its packages cannot be found."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NotInstalled())
'''


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("STEWARD_", "OPENAI_", "ANTHROPIC_"))}
    return clean | {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state")}


def serve(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "steward", "serve", *args], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip


def tokens_file(tmp_path: Path) -> Path:
    return tmp_path / "config" / "steward" / "tokens.json"


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


@pytest.mark.parametrize("blocked", ["fastapi", "uvicorn", "fastapi_offline"])
def test_without_the_extra_it_names_the_install_command_and_stores_no_token(
    tmp_path: Path, env: dict[str, str], blocked: str
) -> None:
    (tmp_path / "block").mkdir()
    (tmp_path / "block" / "sitecustomize.py").write_text(BLOCK.replace("{BLOCKED}", repr({blocked})))
    done = serve(tmp_path, env | {"PYTHONPATH": str(tmp_path / "block")}, "--port", "0")
    assert done.returncode == 2, done.stderr
    assert "pip install 'steward[serve]'" in done.stderr and blocked in done.stderr
    assert "internal error" not in done.stderr and "serving on" not in done.stderr
    assert not tokens_file(tmp_path).exists()

    # With the extra there, the first start that serves shows the token it made, and it works.
    process = subprocess.Popen(
        [sys.executable, "-m", "steward", "serve", "--port", "0", "--workers", "0"], cwd=tmp_path, env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        said = ""
        for line in process.stderr:
            said += line
            if "open http" in line:
                break
        url = re.search(r"serving on (http://\S+)", said)
        token = re.search(r"#token=(stw_\S+)", said)
        assert url and token, said
        answer = httpx.get(url.group(1) + "/v1/jobs", headers={"Authorization": f"Bearer {token.group(1)}"})
        assert answer.status_code == 200, answer.text
    finally:
        process.send_signal(signal.SIGTERM)
        _, rest = process.communicate(timeout=60)
    assert "Traceback" not in rest  # (uvicorn ends by raising the signal it caught again)


def test_a_port_in_use_is_said_before_serving_and_stores_no_token(
    tmp_path: Path, env: dict[str, str], taken_port: int
) -> None:
    done = serve(tmp_path, env, "--port", str(taken_port))
    assert done.returncode == 2, done.stderr
    assert f"cannot listen on 127.0.0.1:{taken_port}" in done.stderr and "--port" in done.stderr
    assert "serving on" not in done.stderr and "Traceback" not in done.stderr
    assert not tokens_file(tmp_path).exists()


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://nobody@127.0.0.1:1/steward",  # nothing listens there
        "sqlite:////proc/steward-cannot-be-here/x.db",  # a folder that cannot be made
    ],
)
def test_a_store_that_cannot_be_opened_is_said_before_serving(
    tmp_path: Path, env: dict[str, str], url: str
) -> None:
    done = serve(tmp_path, env | {"STEWARD_DB": url}, "--port", "0")
    assert done.returncode == 2, done.stderr
    assert "cannot serve: cannot open" in done.stderr
    assert "serving on" not in done.stderr and "Traceback" not in done.stderr
    assert not tokens_file(tmp_path).exists()
