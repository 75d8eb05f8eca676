"""``[cache] exact = true`` through the command line: the agent's own model is wrapped.

The second run of the same goal in the same workspace sends the fake server nothing: every
reply comes from the cache, the run still ends solved, and ``runs show`` says what was saved.
"""

from __future__ import annotations

from pathlib import Path

from tests.e2e.test_local_models import Steward, script, steward_toml

from steward.testing.fake_llm import FakeLLMServer


def test_a_repeated_run_is_answered_from_the_cache(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("one\ntwo\n")
    with FakeLLMServer(script()) as server:
        (workspace / "steward.toml").write_text(steward_toml(server) + "[cache]\nexact = true\n")
        steward = Steward(workspace, tmp_path / "home")
        first, _ = steward.run()
        assert first.returncode == 0, first.stderr
        sent = len(server.requests)
        assert sent == 2 and server.remaining == 0
        again, shown = steward.run()
        assert again.returncode == 0, again.stderr + again.stdout
        assert len(server.requests) == sent  # nothing asked of the model the second time
        assert "notes.txt has 2 lines." in again.stdout
        assert "cache: 2 hits (exact 2)" in shown, shown
        assert "tokens saved" in shown


def test_without_the_setting_nothing_is_cached(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("one\ntwo\n")
    with FakeLLMServer([*script(), *script()]) as server:
        (workspace / "steward.toml").write_text(steward_toml(server))
        steward = Steward(workspace, tmp_path / "home")
        for _ in range(2):
            proc, shown = steward.run()
            assert proc.returncode == 0, proc.stderr
            assert "cache:" not in shown
        assert len(server.requests) == 4
