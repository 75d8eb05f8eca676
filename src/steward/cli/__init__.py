"""Command line: steward run, stdio and demo."""
