"""Runs one ``execute_code`` program inside the sandbox (standalone: the standard library only).

``python -I -S _code_runner.py DIR``: ``DIR`` holds ``program.py`` (the model's code),
``tools.txt`` (the run's tools, one a line: the name, a tab, the parameter names separated by
commas) and ``channel.sock`` (the host's end). Each tool becomes a plain function; calling it
sends one frame (4-byte big-endian length, then JSON ``{"tool": ..., "arguments": {...}}``)
and waits for the answer (``{"ok": bool, "output": str}``). The program runs like a notebook
cell: when its last statement is an expression, its value is printed. An exception prints a
traceback that shows only the program's own frames, with its line numbers.

Start-up time is the tool's cost over ``bash``: only built-in modules are imported up front
(``_ast`` rather than ``ast``); ``json`` and ``_socket`` come with the first tool call,
``traceback`` with the first error.

Nothing here is trusted by the host: the program can rewrite or bypass these functions and
speak to the socket directly. The host decides on every call by itself.
"""

from __future__ import annotations

import _ast
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

PROGRAM = "<code>"
_ONLY_AST = 0x400  # ast.PyCF_ONLY_AST, without importing ast
_MAX_ANSWER = 16 * 1024 * 1024  # the host caps its answers well below this


class ToolCallError(Exception):
    """A tool call the host refused or that failed; the message says why."""


class _Channel:
    def __init__(self, path: str) -> None:
        self.path = path
        self.sock: Any = None

    def call(self, tool: str, arguments: dict[str, Any]) -> str:
        import json

        if self.sock is None:
            import _socket

            self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            self.sock.connect(self.path)
        body = json.dumps({"tool": tool, "arguments": arguments}, default=str).encode()
        self.sock.sendall(len(body).to_bytes(4, "big") + body)
        size = int.from_bytes(self._read(4), "big")
        if size > _MAX_ANSWER:
            raise ToolCallError(f"the host's answer is too large ({size} bytes)")
        answer = json.loads(self._read(size))
        if not answer.get("ok"):
            raise ToolCallError(str(answer.get("output", "")))
        return str(answer.get("output", ""))

    def _read(self, size: int) -> bytes:
        chunks: list[bytes] = []
        left = size
        while left > 0:  # bounded: each pass reads at least one byte or stops
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise ToolCallError(
                    "the channel to the host closed (the program's time or its tool calls ran out)"
                )
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


def _function(channel: _Channel, name: str, params: list[str]) -> Callable[..., str]:
    def call(*args: Any, **kwargs: Any) -> str:
        if len(args) > len(params):
            raise TypeError(f"{name}() takes at most {len(params)} positional arguments ({len(args)} given)")
        arguments = dict(zip(params, args, strict=False))
        for key, value in kwargs.items():
            if key in arguments:
                raise TypeError(f"{name}() got two values for argument {key!r}")
            arguments[key] = value
        return channel.call(name, arguments)

    call.__name__ = name
    call.__doc__ = f"{name}({', '.join(params)}): one call of the run's tool {name!r}."
    return call


def _python_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return cleaned if cleaned.isidentifier() else f"_{cleaned}"


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as file:  # noqa: PTH123 - pathlib costs start-up time here
        return file.read()


def _namespace(directory: str) -> dict[str, Any]:
    channel = _Channel(f"{directory}/channel.sock")
    namespace: dict[str, Any] = {"__name__": "__main__", "ToolCallError": ToolCallError}
    for line in _read_text(f"{directory}/tools.txt").splitlines():
        name, _, params = line.partition("\t")
        if name:
            namespace[_python_name(name)] = _function(channel, name, [p for p in params.split(",") if p])

    def call_tool(name: str, /, **arguments: Any) -> str:
        """Call the run's tool ``name`` by its exact name (for names that are not Python's)."""
        return channel.call(name, arguments)

    namespace["call_tool"] = call_tool
    return namespace


def _run(source: str, namespace: dict[str, Any]) -> None:
    tree = compile(source, PROGRAM, "exec", _ONLY_AST)
    last = tree.body[-1] if tree.body else None
    if isinstance(last, _ast.Expr):  # a notebook cell: the last expression's value is shown
        tree.body.pop()
    else:
        last = None
    exec(compile(tree, PROGRAM, "exec"), namespace)  # noqa: S102 - running the program is the point
    if last is not None:
        value = eval(compile(_ast.Expression(last.value), PROGRAM, "eval"), namespace)  # noqa: S307 - as above
        if value is not None:
            sys.stdout.write(f"{value!r}\n")


def _show_error(error: BaseException, source: str) -> None:
    """The traceback of the program's own frames (none of this runner's)."""
    import linecache
    import traceback

    linecache.cache[PROGRAM] = (len(source), None, source.splitlines(keepends=True), PROGRAM)
    shown = traceback.TracebackException.from_exception(error)
    frames = [frame for frame in shown.stack if frame.filename == PROGRAM]
    shown.stack = traceback.StackSummary.from_list(frames)
    sys.stderr.write("".join(shown.format()))


def main() -> int:
    directory = sys.argv[1]
    source = _read_text(f"{directory}/program.py")
    namespace = _namespace(directory)
    sys.argv = [PROGRAM]
    try:
        _run(source, namespace)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException as error:
        _show_error(error, source)
        return 1
    finally:
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
