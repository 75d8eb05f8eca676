"""`steward doctor` checks the model (its key, its server on a real loopback socket, its script
file) and the store (reachable, schema up to date, writable); a problem names the fix and
makes the exit code 1. The model is the configured one (STEWARD_MODEL): `--model` also sends it
requests (tests/cli/test_doctor_model.py)."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa

from steward.store.events import open_store

KEY = "sk-test-doctor"


class _Models(BaseHTTPRequestHandler):
    """``GET /v1/models`` of an OpenAI-compatible server that wants ``KEY``."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body: dict[str, Any]
        if self.headers.get("Authorization") != f"Bearer {KEY}":
            status, body = (
                401,
                {"error": {"message": "Incorrect API key provided", "type": "invalid_request"}},
            )
        elif self.path.rstrip("/").endswith("/models"):
            status, body = 200, {"object": "list", "data": [{"id": "served-model", "object": "model"}]}
        else:
            status, body = 404, {"error": {"message": "no route"}}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def line(stdout: str, prefix: str) -> str:
    return next(x for x in stdout.splitlines() if x.startswith(prefix))


def test_a_reachable_server_that_accepts_the_key_and_lists_the_model(cli: Any, server: str) -> None:
    done = cli("doctor", STEWARD_MODEL="openai:served-model", OPENAI_BASE_URL=server, OPENAI_API_KEY=KEY)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        line(done.stdout, "model:")
        == f"model: openai:served-model: {server} answers and lists 'served-model'"
    )
    other = cli("doctor", STEWARD_MODEL="openai:typo-model", OPENAI_BASE_URL=server, OPENAI_API_KEY=KEY)
    assert "does not list 'typo-model'" in line(other.stdout, "model:")


@pytest.mark.parametrize(
    ("model", "env", "said"),
    [
        ("openai:served-model", {"OPENAI_API_KEY": "sk-wrong"}, "the API key was rejected (401)"),
        ("openai:gpt-4o-mini", {"OPENAI_BASE_URL": ""}, "no API key. Set OPENAI_API_KEY"),
        ("anthropic:claude-sonnet-4-5", {}, "no API key. Set ANTHROPIC_API_KEY"),
        ("openai:m", {"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}, "cannot reach http://127.0.0.1:1/v1"),
        ("nosuch:model", {}, "nosuch"),
    ],
)
def test_a_model_that_cannot_work_is_a_problem_naming_the_fix(
    cli: Any, server: str, model: str, env: dict[str, str], said: str
) -> None:
    done = cli("doctor", **({"OPENAI_BASE_URL": server, "STEWARD_MODEL": model} | env))
    assert done.returncode == 1, done.stdout + done.stderr
    found = line(done.stdout, "model:")
    assert "PROBLEM" in found and said in found, found
    assert "Traceback" not in done.stderr


def test_the_key_variable_named_in_the_config_is_the_one_checked(
    cli: Any, tmp_path: Path, server: str
) -> None:
    (tmp_path / "steward.toml").write_text(
        f'model = "openai:served-model"\n[models.openai]\nbase_url = "{server}"\napi_key_env = "TEAM_KEY"\n'
    )
    missing = cli("doctor")
    assert missing.returncode == 1 and "TEAM_KEY" in line(missing.stdout, "model:")
    given = cli("doctor", TEAM_KEY=KEY)
    assert given.returncode == 0 and "answers and lists" in line(given.stdout, "model:"), given.stdout


def test_a_script_file_is_read_and_checked(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "good.yaml").write_text("- text: hello\n- text: bye\n")
    (tmp_path / "bad.yaml").write_text("- tool: bash\n  nonsense: [\n")
    good = cli("doctor", STEWARD_MODEL=f"scripted:{tmp_path / 'good.yaml'}")
    assert good.returncode == 0 and "2 scripted replies" in line(good.stdout, "model:")
    for model in (f"scripted:{tmp_path / 'bad.yaml'}", f"scripted:{tmp_path / 'gone.yaml'}"):
        bad = cli("doctor", STEWARD_MODEL=model)
        assert bad.returncode == 1 and "PROBLEM" in line(bad.stdout, "model:"), bad.stdout


def test_the_store_is_reachable_up_to_date_and_writable(cli: Any, tmp_path: Path) -> None:
    fresh = cli("doctor")
    assert "not made yet" in line(fresh.stdout, "store:")
    assert not (tmp_path / ".steward" / "steward.db").exists()  # the doctor makes nothing
    asyncio.run(_make_store(f"sqlite:///{tmp_path / '.steward' / 'steward.db'}"))
    made = cli("doctor")
    assert made.returncode == 0 and "reachable, schema version" in line(made.stdout, "store:")
    assert "writable" in line(made.stdout, "store:")


def test_a_store_made_by_a_newer_steward_or_out_of_reach_is_a_problem(cli: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / '.steward' / 'steward.db'}"
    asyncio.run(_make_store(url, version=999))
    newer = cli("doctor")
    assert newer.returncode == 1 and "made by a newer Steward" in line(newer.stdout, "store:")
    down = cli("doctor", STEWARD_DB="postgresql://nobody@127.0.0.1:1/steward")
    assert down.returncode == 1 and "cannot open the PostgreSQL store" in line(down.stdout, "store:")


@pytest.mark.postgres
def test_a_store_this_user_may_only_read_is_not_writable(cli: Any, db_url: str) -> None:
    if not db_url.startswith("postgresql"):
        pytest.skip("a read-only role is a PostgreSQL thing")
    asyncio.run(_make_store(db_url))
    role = f"steward_ro_{uuid.uuid4().hex[:8]}"
    admin = db_url.replace("postgresql://", "postgres://", 1)
    asyncio.run(
        _sql(admin, f"CREATE ROLE {role} LOGIN", f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
    )
    try:
        reader = sa.make_url(db_url).set(username=role).render_as_string(hide_password=False)
        done = cli("doctor", STEWARD_DB=reader)
        assert done.returncode == 1, done.stdout
        assert "reachable but not writable" in line(done.stdout, "store:")
    finally:
        asyncio.run(_sql(admin, f"DROP OWNED BY {role}", f"DROP ROLE {role}"))


async def _make_store(url: str, version: int | None = None) -> None:
    async with await open_store(url) as store:
        if version is not None:
            from steward.store.schema import schema_version

            async with store.engine.begin() as conn:
                await conn.execute(schema_version.update().values(version=version))


async def _sql(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(url, timeout=5)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()
