"""``steward``: the command line's entry point.

Exit codes: 0 solved, 3 answered (without saying the goal was done), 1 partial, stuck or
failed, 2 usage or configuration error, 130 interrupted (``steward.cli.options``). A user's
mistake is one line naming the fix, never a traceback.

This module imports nothing heavy: the command table (``steward.cli.commands``) is loaded
inside ``main``. Most of a command's start-up is importing, so Ctrl-C then ends with one line
instead of a traceback from the middle of some library.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

_EXIT_NOT_SOLVED, _EXIT_USAGE, _EXIT_INTERRUPTED = 1, 2, 130  # as in ``steward.cli.options``


def main() -> None:
    """Entry point: turns Steward's own errors into one line and a usage exit code."""
    try:
        code = _main()
    except KeyboardInterrupt:
        _say("\nsteward: interrupted.")
        code = _EXIT_INTERRUPTED
    # What is left is the interpreter's shutdown: a Ctrl-C now just ends the process (no
    # KeyboardInterrupt raised in some exit handler's middle, and so no traceback).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(code)


def _main() -> int:
    import atexit
    import gc
    import threading

    # The interpreter's last garbage collection walks every object the imported libraries made
    # (~60 ms of a 400 ms command) to free memory the process gives back anyway. Registered
    # first, this runs after every other exit handler; what needs closing is closed by then.
    atexit.register(gc.freeze)
    threading.excepthook = _quiet_after_the_loop(threading.excepthook)
    from steward.errors import ConfigError, ModelError, StewardError

    try:
        from steward.cli.commands import app

        app()  # typer ends with SystemExit (a Ctrl-C inside a command: 130, silently)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        _say(str(exc.code))
        return _EXIT_NOT_SOLVED
    except ConfigError as exc:
        _say(f"steward: {exc}")
        return _EXIT_USAGE
    except (ModelError, StewardError) as exc:
        _say(f"steward: {exc}")
        return _EXIT_NOT_SOLVED
    except Exception as exc:
        if os.environ.get("STEWARD_DEBUG"):
            raise
        _say(
            f"steward: internal error: {type(exc).__name__}: {exc}. This is a bug in Steward; "
            "run again with STEWARD_DEBUG=1 to see the traceback, and please report it."
        )
        return _EXIT_NOT_SOLVED
    return 0


def _quiet_after_the_loop(hook: Callable[[Any], object]) -> Callable[[Any], object]:
    """A thread that finishes its work after Ctrl-C closed the event loop (a database driver's
    worker, say) can only fail to hand its result back; that is the stop, not a bug to show."""

    def quiet(args: Any) -> object:
        failed = args.exc_value
        if isinstance(failed, RuntimeError) and str(failed) == "Event loop is closed":
            return None
        return hook(args)

    return quiet


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: nobody to tell
        pass


def __getattr__(name: str) -> Any:
    # ``steward.cli.app.app``, the typer application, as it was before the table moved out.
    if name == "app":
        from steward.cli.commands import app

        return app
    raise AttributeError(name)
