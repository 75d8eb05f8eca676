"""``python -m steward`` is the same as the ``steward`` command."""

from steward.cli.app import main

main()
