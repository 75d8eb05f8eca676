"""Relay 127.0.0.1:PORT inside the sandbox to Steward's egress proxy on a UNIX socket.

    python -I -S forward.py PORT UNIX_SOCKET_PATH && exec "$@"

Runs inside the sandbox with a cleared environment, so it uses the standard library only and
imports nothing of Steward's. It binds first and forks only once the bind succeeded: the parent
exits 0 with the port already accepting, so the command that follows never races it; on a
failed bind it exits 1 with one line on stderr. The child relays every accepted TCP connection
to a new connection on the UNIX socket, bytes both ways (half-closes included), in one thread
with a selector: threads would count against the sandbox's process limit. It runs until it is
killed: the sandbox's PID namespace ends with the command and takes it along. (Outside a PID
namespace it stops within seconds of the proxy's socket file being removed.)
"""

from __future__ import annotations

import os
import selectors
import socket
import stat
import sys
from pathlib import Path

MAX_CONNECTIONS = 128
"""Relayed connections at once; more wait in the listen backlog until one ends."""
BUFFER = 64 * 1024
"""Bytes held per direction of a connection; reading stops while the other side is slower."""
CONNECT_TIMEOUT_S = 10.0
_BACKLOG = 128
_CHECK_S = 2.0
_UNREACHABLE = (
    b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n"
    b"Steward egress proxy is not reachable from the sandbox.\n"
)


class _Side:
    """One socket of a relayed pair and the bytes waiting to be written to it."""

    __slots__ = ("eof", "pending", "registered", "shut", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.pending = bytearray()
        self.eof = False  # it sent EOF: nothing more will be read from it
        self.shut = False  # we sent it EOF
        self.registered = 0  # selector events it is registered for


class _Pair:
    __slots__ = ("client", "proxy")

    def __init__(self, client: _Side, proxy: _Side) -> None:
        self.client = client
        self.proxy = proxy

    def peer(self, side: _Side) -> _Side:
        return self.proxy if side is self.client else self.client

    def finished(self) -> bool:
        return all(s.eof and not self.peer(s).pending for s in (self.client, self.proxy))


class Relay:
    """The selector loop: the listening socket plus every relayed pair."""

    def __init__(self, listener: socket.socket, socket_path: str) -> None:
        self.listener = listener
        self.socket_path = socket_path
        self.selector = selectors.DefaultSelector()
        self.pairs: set[_Pair] = set()
        self.accepting = False

    def run(self) -> None:
        self.listener.setblocking(False)
        self._accept_when_room()
        # It serves until the sandbox ends and kills it (see the docstring). Where no PID
        # namespace does that (a test, a benchmark), it stops once the proxy's socket is gone.
        while Path(self.socket_path).exists():
            for key, events in self.selector.select(timeout=_CHECK_S):
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    pair, side = key.data
                    self._on_ready(pair, side, events)
            self._accept_when_room()

    def _accept_when_room(self) -> None:
        room = len(self.pairs) < MAX_CONNECTIONS
        if room and not self.accepting:
            self.selector.register(self.listener, selectors.EVENT_READ)
        elif not room and self.accepting:
            self.selector.unregister(self.listener)
        self.accepting = room

    def _accept(self) -> None:
        try:
            client, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return
        proxy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # Blocking but bounded: the proxy is local and accepts at once unless it is gone.
            proxy.settimeout(CONNECT_TIMEOUT_S)
            proxy.connect(self.socket_path)
        except OSError:
            proxy.close()
            try:
                client.settimeout(1.0)
                client.sendall(_UNREACHABLE)
            except OSError:
                pass
            client.close()
            return
        client.setblocking(False)
        proxy.setblocking(False)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = _Pair(_Side(client), _Side(proxy))
        self.pairs.add(pair)
        self._update(pair)

    def _on_ready(self, pair: _Pair, side: _Side, events: int) -> None:
        peer = pair.peer(side)
        try:
            if events & selectors.EVENT_READ:
                data = side.sock.recv(BUFFER)
                if data:
                    peer.pending += data
                else:
                    side.eof = True
            if events & selectors.EVENT_WRITE and side.pending:
                sent = side.sock.send(side.pending)
                del side.pending[:sent]
            for target in (side, peer):
                # Pass an EOF on once everything before it has been written.
                if pair.peer(target).eof and not target.pending and not target.shut:
                    target.shut = True
                    target.sock.shutdown(socket.SHUT_WR)
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._close(pair)
            return
        if pair.finished():
            self._close(pair)
        else:
            self._update(pair)

    def _update(self, pair: _Pair) -> None:
        for side in (pair.client, pair.proxy):
            wanted = 0
            if not side.eof and len(pair.peer(side).pending) < BUFFER:
                wanted |= selectors.EVENT_READ
            if side.pending:
                wanted |= selectors.EVENT_WRITE
            if wanted == side.registered:
                continue
            if not wanted:
                self.selector.unregister(side.sock)
            elif not side.registered:
                self.selector.register(side.sock, wanted, (pair, side))
            else:
                self.selector.modify(side.sock, wanted, (pair, side))
            side.registered = wanted

    def _close(self, pair: _Pair) -> None:
        for side in (pair.client, pair.proxy):
            if side.registered:
                self.selector.unregister(side.sock)
                side.registered = 0
            side.sock.close()
        self.pairs.discard(pair)


def _bind(port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(_BACKLOG)
    except OSError:
        listener.close()
        raise
    return listener


def _daemonize() -> None:
    """Fork: the parent exits 0 (the port is already bound); the child leaves the caller's
    terminal, output pipes and directory alone so the command's output ends when it does."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    os.chdir("/")


def _fail(message: str) -> int:
    sys.stderr.write(f"forward.py: {message}\n")
    return 1


def main(argv: list[str]) -> int:
    if len(argv) != 3 or not argv[1].isdigit() or not 0 < int(argv[1]) < 65536:
        return _fail("usage: python -I -S forward.py PORT UNIX_SOCKET_PATH (PORT 1-65535)")
    port, socket_path = int(argv[1]), argv[2]
    try:
        is_socket = stat.S_ISSOCK(Path(socket_path).stat().st_mode)
    except OSError as exc:
        return _fail(f"no egress proxy socket at {socket_path} ({exc.strerror})")
    if not is_socket:
        return _fail(f"{socket_path} is not a socket; pass the egress proxy's UNIX socket")
    try:
        listener = _bind(port)
    except OSError as exc:
        return _fail(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}")
    _daemonize()
    Relay(listener, socket_path).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
