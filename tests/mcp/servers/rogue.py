"""A small MCP server over stdio, written by hand (no SDK) so it can misbehave on purpose.

It speaks the handshake-era protocol (``initialize``), newline-delimited JSON-RPC. Its tools
either behave (``echo``, ``add``) or break the conversation in one specific way: crash, hang,
write garbage, answer out of order, send a JSON-RPC error, report a tool error, send progress,
change its tool list, or print its environment. Tests start it as a real subprocess.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

_PENDING: list[dict[str, Any]] = []  # calls held back to be answered out of order
_EXTRA_TOOLS: list[dict[str, Any]] = []
_ECHO_DESCRIPTION = ["Echo the text back{label}."]


def _send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _tool(name: str, description: str, **props: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": {k: {"type": v} for k, v in props.items()},
            "required": list(props),
        },
    }


def _tools() -> list[dict[str, Any]]:
    label = os.environ.get("ROGUE_LABEL", "")
    return [
        _tool("echo", _ECHO_DESCRIPTION[0].format(label=label), text="string"),
        _tool("add", "Add two integers.", a="integer", b="integer"),
        _tool("crash", "Exit the server process in the middle of the call."),
        _tool("hang", "Never answer."),
        _tool("garbage", "Write a line that is not JSON, then answer.", text="string"),
        _tool("hold", "Answered only after the next call (out of order).", text="string"),
        _tool("fail", "Report a tool error (isError).", text="string"),
        _tool("bad_request", "Answer with a JSON-RPC error."),
        _tool("progress", "Send progress notifications, then answer.", steps="integer"),
        _tool("grow", "Add a tool named 'extra' and announce tools/list_changed."),
        _tool("env", "Return the server's environment variables as JSON."),
        _tool("slow", "Answer after the given seconds.", seconds="number"),
        _tool("rewrite", "Change echo's description and announce tools/list_changed.", text="string"),
        _tool("read", "Return the text of a file.", path="string"),
        _tool("write", "Write 'written' to a file.", path="string"),
        *_EXTRA_TOOLS,
        # Names the client must rename: characters providers refuse, and clashes after that.
        *(
            _tool(name, f"Extra tool {name}.")
            for name in os.environ.get("ROGUE_NAMES", "").split(",")
            if name
        ),
    ]


def _text(text: str, *, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": error}


def _call(msg: dict[str, Any]) -> dict[str, Any] | None:  # noqa: PLR0911 - one branch per behaviour
    params = msg.get("params") or {}
    name, args = params.get("name"), params.get("arguments") or {}
    if name in {"echo", "extra"}:
        return _text(str(args.get("text", "")))
    if name == "add":
        return _text(str(int(args["a"]) + int(args["b"])))
    if name == "crash":
        sys.stderr.write("rogue: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(3)
    if name == "hang":
        time.sleep(3600)
    if name == "garbage":
        sys.stdout.write("this is not json {{{\n")
        sys.stdout.flush()
        return _text(str(args.get("text", "")))
    if name == "hold":
        _PENDING.append(msg)
        return None
    if name == "fail":
        return _text(f"cannot do that: {args.get('text', '')}", error=True)
    if name == "bad_request":
        raise _RpcError(-32602, "bad_request refuses every call (invalid params)")
    if name == "progress":
        token = (params.get("_meta") or {}).get("progressToken")
        steps = int(args.get("steps", 3))
        for n in range(1, steps + 1):
            if token is not None:
                _send(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/progress",
                        "params": {
                            "progressToken": token,
                            "progress": n,
                            "total": steps,
                            "message": f"step {n}",
                        },
                    }
                )
            time.sleep(0.02)
        return _text(f"done in {steps} steps")
    if name == "grow":
        if not _EXTRA_TOOLS:
            _EXTRA_TOOLS.append(_tool("extra", "A tool that appeared later.", text="string"))
        _send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return _text("grown")
    if name == "rewrite":
        _ECHO_DESCRIPTION[0] = str(args.get("text", "Echo, and also something else."))
        _send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return _text("rewritten")
    if name == "read":
        try:
            with open(str(args.get("path", ""))) as fh:
                return _text(fh.read())
        except OSError as exc:
            return _text(f"cannot read: {exc}", error=True)
    if name == "write":
        try:
            with open(str(args.get("path", "")), "w") as fh:
                fh.write("written")
        except OSError as exc:
            return _text(f"cannot write: {exc}", error=True)
        return _text("wrote")
    if isinstance(name, str) and name.startswith("x"):
        return _text(f"called {name}")
    if name == "env":
        return _text(json.dumps(dict(os.environ), sort_keys=True))
    if name == "slow":
        time.sleep(float(args.get("seconds", 1)))
        return _text("slept")
    raise _RpcError(-32602, f"unknown tool {name}")


class _RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _handle(msg: dict[str, Any]) -> None:
    method, mid = msg.get("method"), msg.get("id")
    if mid is None:
        return  # a notification
    try:
        if method == "initialize":
            result: dict[str, Any] | None = {
                "protocolVersion": "2025-06-18",
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "rogue", "version": "1.0"},
            }
        elif method == "tools/list":
            result = {"tools": _tools()}
        elif method == "tools/call":
            result = _call(msg)
        elif method == "ping":
            result = {}
        else:
            raise _RpcError(-32601, f"method not found: {method}")  # noqa: TRY301 - answered below
    except _RpcError as exc:
        _send({"jsonrpc": "2.0", "id": mid, "error": {"code": exc.code, "message": exc.message}})
        return
    if result is None:
        return
    _send({"jsonrpc": "2.0", "id": mid, "result": result})
    # Out of order: calls held back are answered after a later one.
    while _PENDING and (msg.get("params") or {}).get("name") != "hold":
        held = _PENDING.pop(0)
        text = (held["params"].get("arguments") or {}).get("text", "")
        _send({"jsonrpc": "2.0", "id": held["id"], "result": _text(f"held: {text}")})


def main() -> None:
    if os.environ.get("ROGUE_START") == "garbage":
        sys.stdout.write("garbage before the handshake\n")
        sys.stdout.flush()
    if os.environ.get("ROGUE_START") == "exit":
        sys.stderr.write("rogue: refusing to start\n")
        sys.exit(7)
    for line in sys.stdin:
        if line.strip():
            _handle(json.loads(line))


if __name__ == "__main__":
    main()
