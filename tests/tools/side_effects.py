"""Tools whose calls the execute_code tests can count: each call appends to a list here.

A program's nested calls run in the test's own process (the sandboxed program reaches them over
the channel), so a list is where "ran once", "ran twice" or "never ran" shows.
"""

from __future__ import annotations

import pytest

from steward import tool

TALLIES: list[str] = []
DEPLOYS: list[str] = []


@tool
def tally(word: str) -> str:
    """Count a word (a side effect the test can see).

    Args:
        word: The word.
    """
    TALLIES.append(word)
    return f"tallied {word}"


@tool
def deploy(target: str) -> str:
    """Deploy to a target.

    Args:
        target: Where to deploy.
    """
    DEPLOYS.append(target)
    return f"deployed to {target}"


@pytest.fixture(autouse=True)
def cleared() -> None:
    """Each test starts with no calls counted (use it as an autouse fixture by importing it)."""
    TALLIES.clear()
    DEPLOYS.clear()
