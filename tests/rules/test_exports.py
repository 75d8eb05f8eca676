"""steward.rules exports exactly what agent.py and users need, sorted, and imports lightly."""

from __future__ import annotations

import subprocess
import sys

import steward.rules


def test_all_is_sorted_and_every_name_exists() -> None:
    assert steward.rules.__all__ == sorted(steward.rules.__all__)
    assert all(hasattr(steward.rules, name) for name in steward.rules.__all__)


def test_importing_the_rules_loads_neither_yaml_nor_sqlite() -> None:
    code = "import sys, steward.rules; print(sorted({'yaml', 'sqlite3'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
