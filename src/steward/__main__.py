"""``python -m steward`` is the same as the ``steward`` command."""

try:
    from steward.cli.app import main
except KeyboardInterrupt:  # Ctrl-C this early: one line, as later (``steward.cli.app``)
    import sys

    sys.stderr.write("\nsteward: interrupted.\n")
    raise SystemExit(130) from None

main()
