"""The workspace's ``.steward/`` folder, made so that git leaves it alone.

Steward keeps its database, tool pins and placeholder ledger there. Without a rule, ``git
status`` lists the folder as untracked and ``git add .`` commits a database by accident, so
the folder is created with a ``.gitignore`` of its own that ignores everything in it. One that
is already there is never overwritten: a project that commits its skills from
``.steward/skills`` says so in it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

STATE_DIR = ".steward"
"""The folder at a workspace's root where Steward keeps its state (a protected path)."""

GITIGNORE = (
    "# Steward's own state (its database, logs and bookkeeping): not for version control.\n"
    "# To commit something kept here, such as skills, add lines like these below:\n"
    "#   !/skills/\n"
    "#   !/skills/**\n"
    "*\n"
)


def make_dir(path: Path) -> None:
    """``path.mkdir(parents=True, exist_ok=True)``; a ``.steward`` folder made now also gets
    its ``.gitignore``. Errors other than the folder existing are raised as by ``mkdir``."""
    try:
        path.mkdir(parents=True)
    except FileExistsError:
        if not path.is_dir():
            raise
        return
    if path.name == STATE_DIR:
        # Exclusive creation: whatever is there already (another process was quicker) stays.
        with contextlib.suppress(OSError), (path / ".gitignore").open("x", encoding="utf-8") as out:
            out.write(GITIGNORE)
