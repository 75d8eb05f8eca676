"""A run's cost over the API (``GET /v1/runs/{id}/spent``, what the web page's run view shows) is
what its calls cost when it ran: prices changed in ``steward.toml`` since do not change it."""

from __future__ import annotations

from typing import Any

import pytest
from server_kit import Deployment, wait_for
from tests.server.test_page import ended, start_run

SCRIPT: list[object] = [{"tool": "tasks", "args": {"action": "add", "text": "first"}}, ended("done")]


def priced(deployment: Deployment, per_mtok: float) -> str:
    """The workspace's config, with a price for the persona's (scripted) model."""
    model = f"scripted:{deployment.workspace / 'personas' / 'worker.yaml'}"  # as the run names it
    return f'[prices."{model}"]\ninput_per_mtok = {per_mtok}\noutput_per_mtok = {per_mtok}\n'


def test_the_spent_a_run_shows_keeps_the_prices_it_ran_at(sqlite_deployment: Deployment) -> None:
    sqlite_deployment.persona("worker", SCRIPT, tools='["tasks"]')
    sqlite_deployment.config(priced(sqlite_deployment, 1_000.0))
    server = sqlite_deployment.start()
    run_id = start_run(server, "worker", "keep a list")
    with server.client() as client:

        def done() -> bool:
            return bool(client.get(f"/v1/runs/{run_id}").json()["status"] == "done")

        wait_for(done, f"run {run_id} to end")
        then: dict[str, Any] = client.get(f"/v1/runs/{run_id}/spent").json()
        sqlite_deployment.config(priced(sqlite_deployment, 9_000.0))  # the price changed after the run
        now: dict[str, Any] = client.get(f"/v1/runs/{run_id}/spent").json()
    assert then["tokens"] > 0 and then["cost_usd"] == pytest.approx(then["tokens"] * 1_000.0 / 1_000_000)
    assert now["cost_usd"] == then["cost_usd"]
    assert [p["cost_usd"] for p in now["phases"]] == [p["cost_usd"] for p in then["phases"]]
