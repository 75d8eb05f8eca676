"""Bearer tokens of ``steward serve``: named, kept hashed in one file of the user's config dir.

The file (``$XDG_CONFIG_HOME/steward/tokens.json``, mode 0600) holds a SHA-256 of each token,
never the token: a token is shown once, when it is made (on the server's first start, or by
``steward serve --new-token NAME``). Checking compares digests in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from steward.atomic import write_atomic
from steward.config import user_config_path
from steward.errors import ConfigError

_PREFIX = "stw_"  # tells a Steward token apart in a leaked log or a secret scanner


def tokens_path() -> Path:
    return user_config_path().parent / "tokens.json"


@dataclass(frozen=True, slots=True)
class TokenEntry:
    name: str
    digest: str
    created_at: float


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Tokens:
    """The server's tokens, read from ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[TokenEntry] = []
        self._read_mtime = -1.0

    def entries(self) -> list[TokenEntry]:
        """The tokens as the file has them now (read again when it changed: a token made by
        ``--new-token`` while the server runs works at once)."""
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            return []
        if mtime != self._read_mtime:
            try:
                raw = json.loads(self.path.read_text(encoding="utf-8"))
                self._entries = [
                    TokenEntry(str(e["name"]), str(e["sha256"]), float(e["created_at"])) for e in raw
                ]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ConfigError(
                    f"{self.path} is not a token file Steward wrote ({exc}); move it away and run "
                    "`steward serve --new-token NAME` for a new one"
                ) from None
            self._read_mtime = mtime
        return list(self._entries)

    def check(self, token: str) -> str | None:
        """The name of ``token``, or None when it is not one of the server's."""
        if not token.startswith(_PREFIX):
            return None
        digest = _digest(token)
        found = None
        for entry in self.entries():  # every entry compared: no early exit to time
            if hmac.compare_digest(entry.digest, digest):
                found = entry.name
        return found

    def create(self, name: str) -> str:
        """Make a token named ``name`` (replacing one of that name) and return it: the only time
        it is seen."""
        name = name.strip()
        if not name or len(name) > 64:
            raise ConfigError("a token's name is 1-64 characters, e.g. --new-token laptop")
        token = _PREFIX + secrets.token_urlsafe(32)
        kept = [e for e in self.entries() if e.name != name]
        kept.append(TokenEntry(name, _digest(token), time.time()))
        self._write(kept)
        return token

    def revoke(self, name: str) -> bool:
        entries = self.entries()
        kept = [e for e in entries if e.name != name]
        if len(kept) == len(entries):
            return False
        self._write(kept)
        return True

    def _write(self, entries: list[TokenEntry]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = [{"name": e.name, "sha256": e.digest, "created_at": e.created_at} for e in entries]
        # Made 0600 from the first byte (not chmod after): no moment where others may read it;
        # under a name of its own, as two servers (or threads) may write at the same moment.
        write_atomic(self.path, json.dumps(data, indent=1), mode=0o600)
        self._read_mtime = -1.0
