"""Secret files in a workspace: which names hold secrets.

A file whose name matches one of the patterns (``[sandbox] secret_files``) is masked inside
the sandbox (an empty read-only file is mounted over it), refused by the file tools unless a
policy rule allows it, and the values it holds are redacted from every tool output.

Patterns are globs matched against the file's *name* (not its path), case-sensitively, like
``.gitignore`` patterns without a slash.
"""

from __future__ import annotations

import fnmatch
import itertools
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

# --- the values secret files hold ------------------------------------------------------------

MAX_SECRET_FILE_BYTES = 1 << 20
"""How much of one secret file is read for its values; the rest is not looked at."""

MAX_VALUES_PER_FILE = 2_000
"""Values taken from one file, at most (a guard against a huge generated file)."""

MIN_SECRET_CHARS = 8
"""Shorter values are not redacted: short common strings would wreck normal output."""

MAX_VALUE_CHARS = 256
"""Longer values are redacted as pieces of this size (all of them shown means all replaced)."""

MAX_REDACTED_CHARS = 262_144
"""The values one ``Redactor`` looks for, in characters, at most; it counts what it left out."""

_DOTENV_NAMES = (".env", ".env.*", "*.env", ".envrc")
_SECRET_WORDS = frozenset(
    {
        "auth", "authtoken", "apikey", "bearer", "cookie", "credential", "credentials", "creds",
        "dsn", "jwt", "key", "pass", "passphrase", "passwd", "password", "pat", "private", "pwd",
        "secret", "session", "signature", "token",
    }
)  # fmt: skip
_PLAIN_VALUES = frozenset({"true", "false", "yes", "no", "on", "off", "none", "null", "undefined"})
_NUMERIC = re.compile(r"[\d\s.,:;_+\-/]+")
_LOCAL = re.compile(r"(?:localhost|127(?:\.\d{1,3}){3}|0\.0\.0\.0|\[?::1\]?)(?::\d+)?", re.IGNORECASE)
_VARIABLE = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*(?::?[-=?+][^}]*)?\}?")
# Shapes that are ordinary configuration, not credentials, unless the key says otherwise.
_WORDISH = re.compile(r"[a-z]+(?:[-_.][a-z]+)*")
_HOSTNAME = re.compile(r"(?:[a-z0-9-]+\.)+[a-z]{2,}(?::\d+)?")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[a-z]{2,}")
_PATHLIKE = re.compile(r"(?:~|\.{1,2})?/[^\s]*")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://\S+")
_TOKENISH = re.compile(r"(?=[^\s]*[A-Za-z])(?=[^\s]*\d)[A-Za-z0-9_\-.~+/=]{16,}")
_PEM = re.compile(
    r"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY[A-Z ]*)-----(.*?)(?:-----END [A-Z0-9 ]*-----|\Z)", re.DOTALL
)
_KEY_VALUE = re.compile(r"""^\s*["']?([A-Za-z0-9_.\-/:@]+?)["']?\s*[:=]\s*(.*?)\s*,?\s*$""")
_DOTENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_.\-]*)\s*=\s*(.*)$")
_CAMEL = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def secret_values(path: Path) -> list[str]:
    """The secret values the file at ``path`` holds, found by its format (from its name).

    ``.env`` files (``KEY=VALUE``, ``export``, quotes, comments, multi-line values), ``.npmrc``,
    ``.pypirc`` and other ini/YAML/JSON-style files (values of keys that look secret),
    ``.netrc``, ``.pgpass``, ``.git-credentials``, docker config JSON, and the body lines of
    private keys in any of them. Values shorter than ``MIN_SECRET_CHARS`` or obviously not
    secret (booleans, numbers, localhost, URLs without credentials) are left out. At most
    ``MAX_SECRET_FILE_BYTES`` are read; a file that cannot be read holds nothing.
    """
    text = _read(path)
    if text is None:
        return []
    name = path.name
    values = [*_by_format(name, text), *_private_key_lines(text)]
    pieces = (piece for v in values if len(v) >= MIN_SECRET_CHARS for piece in _pieces(v))
    return list(dict.fromkeys(pieces))[:MAX_VALUES_PER_FILE]


def _pieces(value: str) -> list[str]:
    """A long value cut to ``MAX_VALUE_CHARS`` pieces (the last one never too short to redact)."""
    if len(value) <= MAX_VALUE_CHARS:
        return [value]
    cuts = list(range(0, len(value), MAX_VALUE_CHARS))
    if len(value) - cuts[-1] < MIN_SECRET_CHARS:
        cuts.pop()
    return [value[a:b] for a, b in itertools.pairwise([*cuts, len(value)])]


def _read(path: Path) -> str | None:
    import os
    import stat

    try:
        # Non-blocking, and regular files only: a FIFO named .env must not hang the run.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as file:
            data = file.read(MAX_SECRET_FILE_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    if b"\0" in data:  # binary (a keystore, a .p12): no text value to look for in text output
        return None
    return data.decode("utf-8", errors="replace")


def _by_format(name: str, text: str) -> list[str]:
    if any(fnmatch.fnmatchcase(name, pattern) for pattern in _DOTENV_NAMES):
        return _dotenv(text)
    parsers: dict[str, Callable[[str], list[str]]] = {
        ".npmrc": _npmrc,
        ".netrc": _netrc,
        "_netrc": _netrc,
        ".pgpass": _pgpass,
        ".git-credentials": _git_credentials,
    }
    parser = parsers.get(name)
    if parser is not None:
        return parser(text)
    if text.lstrip().startswith("{"):  # docker's config.json and .dockercfg, other JSON
        found = _json(text)
        if found is not None:
            return found
    return _generic(text)


def _secret_key(key: str) -> bool:
    """Whether a setting called ``key`` holds a secret (``DB_PASSWORD``, ``_authToken``, ``api-key``)."""
    words = {w.lower() for part in re.split(r"[^A-Za-z0-9]+", key) for w in _CAMEL.findall(part)}
    joined = re.sub(r"[^a-z0-9]", "", key.lower())
    return bool(words & _SECRET_WORDS) or joined in _SECRET_WORDS or joined.endswith(("token", "password"))


def _kept(value: str, *, secret_key: bool) -> list[str]:
    """What of one setting's value to redact: all of it, the credentials in it, or nothing."""
    v = value.strip()
    if len(v) < MIN_SECRET_CHARS or _VARIABLE.fullmatch(v):
        return []
    if v.lower() in _PLAIN_VALUES or _NUMERIC.fullmatch(v) or _LOCAL.fullmatch(v):
        return []
    if _URL.fullmatch(v):
        return _url_credentials(v)
    if secret_key:
        return [v]
    ordinary = (_WORDISH, _HOSTNAME, _EMAIL, _PATHLIKE)
    if any(p.fullmatch(v) for p in ordinary) or any(c.isspace() for c in v):
        return []
    return [v]


def _url_credentials(url: str) -> list[str]:
    """The password in ``scheme://user:pass@host``, and path or query parts that look like
    tokens (a webhook URL's key); a plain URL holds none."""
    from urllib.parse import unquote, urlsplit

    try:
        parts = urlsplit(url)
        password, username = parts.password, parts.username
    except ValueError:
        return []
    found: list[str] = []
    if password:
        found += [password, unquote(password)]
    elif username and _TOKENISH.fullmatch(username):  # https://TOKEN@host
        found.append(username)
    pieces = re.split(r"[/?&=#;]", f"{parts.path}?{parts.query}")
    found += [p for p in pieces if _TOKENISH.fullmatch(p)]
    return found


# --- formats -----------------------------------------------------------------------------


def _dotenv(text: str) -> list[str]:
    lines = text.splitlines()
    found: list[str] = []
    i = 0
    while i < len(lines):  # every pass consumes at least one line
        match = _DOTENV_LINE.match(lines[i])
        i += 1
        if match is None:
            continue
        key, rest = match.groups()
        if rest[:1] in ("'", '"'):
            value, i = _quoted(rest[0], rest[1:], lines, i)
            forms = [value, _unescape(value)] if rest[0] == '"' else [value]
        else:
            forms = [re.split(r"\s#", rest, maxsplit=1)[0].strip()]
        secret = _secret_key(key)
        for form in dict.fromkeys(forms):
            if "\n" not in form:
                found += _kept(form, secret_key=secret)
                continue
            # A multi-line value (a key pasted into a variable): whole, and each line on its own.
            parts = [kept for line in _lines_of(form) for kept in _kept(line, secret_key=secret)]
            found += [form, *parts] if parts else []
    return found


def _quoted(quote: str, first: str, lines: list[str], i: int) -> tuple[str, int]:
    """A quoted value that starts with ``first`` and may go on over the next lines; the value and
    the index of the line after it. An unclosed quote takes the rest of the file."""
    parts = [first]
    end = _closing(first, quote)
    while end < 0 and i < len(lines):  # bounded by the number of lines
        parts.append(lines[i])
        i += 1
        end = _closing(lines[i - 1], quote)
    if end >= 0:
        parts[-1] = parts[-1][:end]
    return "\n".join(parts), i


def _closing(text: str, quote: str) -> int:
    """Where the closing ``quote`` is in ``text`` (-1: not in it); ``\\"`` does not close."""
    escaped = False
    for n, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\" and quote == '"':
            escaped = True
        elif ch == quote:
            return n
    return -1


def _unescape(value: str) -> str:
    """A double-quoted value as the program gets it (``\\n`` is a newline)."""
    escapes = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}
    return re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(0)), value)


def _lines_of(value: str) -> list[str]:
    """The lines of a multi-line value, without a PEM block's armour lines."""
    return [line.strip() for line in value.splitlines() if not line.strip().startswith("-----")]


def _npmrc(text: str) -> list[str]:
    import base64
    import binascii

    found: list[str] = []
    for line in text.splitlines():
        if line.lstrip().startswith((";", "#")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key, value = key.strip(), value.strip().strip("\"'")
        setting = key.rpartition(":")[2]  # //registry.example.com/:_authToken
        found += _kept(value, secret_key=_secret_key(setting))
        if setting in ("_auth", "_password") and len(value) >= MIN_SECRET_CHARS:
            # Stored base64-encoded ("user:pass" for _auth): the plain password may be shown too.
            try:
                decoded = base64.b64decode(value, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                continue
            found += [decoded, decoded.partition(":")[2]] if setting == "_auth" else [decoded]
    return found


def _netrc(text: str) -> list[str]:
    # A macro definition runs to the next blank line; it holds commands, not credentials.
    text = re.sub(r"(?ms)^\s*macdef\b.*?(?:^\s*$|\Z)", "", text)
    tokens = text.split()
    found: list[str] = []
    for keyword, value in itertools.pairwise(tokens):
        if keyword == "password":
            found += _kept(value, secret_key=True)
        elif keyword in ("login", "account") and _TOKENISH.fullmatch(value) and "@" not in value:
            found.append(value)  # some services take a token as the login
    return found


def _pgpass(text: str) -> list[str]:
    found: list[str] = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        fields = re.split(r"(?<!\\):", line, maxsplit=4)  # host:port:db:user:password
        if len(fields) == 5:
            password = fields[4]
            for form in (password, password.replace("\\:", ":").replace("\\\\", "\\")):
                found += _kept(form, secret_key=True)
    return found


def _git_credentials(text: str) -> list[str]:
    found: list[str] = []
    for line in text.split():
        found += _url_credentials(line)
    return found


def _json(text: str) -> list[str] | None:
    """Values under secret-looking keys of a JSON file; docker's ``auth`` (base64 of
    ``user:password``) also gives the password. None: not JSON."""
    import json

    try:
        data = json.loads(text)
    except ValueError:
        return None
    found: list[str] = []
    stack: list[tuple[str, object]] = [("", data)]
    for _ in range(100_000):  # nodes visited, at most
        if not stack:
            break
        key, node = stack.pop()
        if isinstance(node, dict):
            stack.extend((str(k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((key, v) for v in node)
        elif isinstance(node, str):
            found += _kept(node, secret_key=_secret_key(key))
            if key == "auth":
                found += _basic_auth_password(node)
    return found


def _basic_auth_password(value: str) -> list[str]:
    import base64
    import binascii

    try:
        decoded = base64.b64decode(value, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return []
    return [decoded.partition(":")[2]]


def _generic(text: str) -> list[str]:
    """``key = value`` / ``key: value`` lines whose key looks secret (ini, ``.pypirc``, YAML),
    or the whole of a file that is one token (an API key saved on its own)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) == 1 and (_TOKENISH.fullmatch(lines[0]) or not _KEY_VALUE.match(lines[0])):
        return _kept(lines[0], secret_key=True) if " " not in lines[0] else []
    found: list[str] = []
    for line in lines:
        if line.lstrip().startswith(("#", ";", "[")):
            continue
        match = _KEY_VALUE.match(line)
        if match is None:
            continue
        key, value = match.groups()
        value = re.split(r"\s[#;]", value, maxsplit=1)[0].strip().strip("\"'")
        if _secret_key(key):
            found += _kept(value, secret_key=True)
        elif _URL.fullmatch(value):
            found += _url_credentials(value)
    return found


def _private_key_lines(text: str) -> list[str]:
    """Every base64 line in the body of each ``-----BEGIN ... PRIVATE KEY-----`` block."""
    found: list[str] = []
    for block in _PEM.finditer(text):
        for line in re.split(r"\\[rn]|[\r\n]", block.group(2)):  # escaped newlines too (a .env value)
            body = line.strip()
            if body and ":" not in body:  # "Proc-Type: 4,ENCRYPTED" and such are headers
                found.append(body)
    return found


# --- redaction ---------------------------------------------------------------------------


def encoded_forms(value: str) -> list[str]:
    """``value`` and the forms a command could print it in: base64 and base64url (alone, and
    inside a longer base64 text at each of the three byte alignments), URL-encoded, hex,
    reversed, upper- and lower-cased.

    Forms shorter than ``MIN_SECRET_CHARS`` are left out.
    """
    import base64
    from urllib.parse import quote, quote_plus

    data = value.encode()
    forms = [value, base64.b64encode(data).decode(), base64.urlsafe_b64encode(data).decode()]
    # Inside a longer base64 text (``base64 .env``) the value starts at some byte offset: 0, 1
    # or 2 bytes into a 3-byte group. The first characters then also encode the bytes before it
    # and the last ones the bytes after it; only the characters in between are known.
    for offset, unknown in ((0, 0), (1, 2), (2, 3)):
        shifted = b"\0" * offset + data
        whole = shifted[: len(shifted) - len(shifted) % 3]
        forms.append(base64.b64encode(whole).decode()[unknown:])
        forms.append(base64.urlsafe_b64encode(whole).decode()[unknown:])
    forms += [quote(value, safe=""), quote_plus(value, safe="")]
    # Cheap transformations a command would use to slip a value past a match on its spelling.
    forms += [value[::-1], value.upper(), value.lower(), data.hex(), data.hex().upper()]
    return [f for f in dict.fromkeys(forms) if len(f) >= MIN_SECRET_CHARS]


class Redactor:
    """Replaces every known secret value, and its encoded forms, with a marker naming its file.

    One compiled pattern matches all of them in one pass over the text (a trie of the forms, so
    a position is tried against the few forms that start with its character, not all of
    them); where forms overlap the longest wins.
    """

    def __init__(self, secrets: Mapping[str, Iterable[str]]) -> None:
        source: dict[str, str] = {}
        budget = MAX_REDACTED_CHARS
        #: Values left out because there were more than ``MAX_REDACTED_CHARS`` of them.
        self.left_out = 0
        for name, values in secrets.items():
            for value in values:
                if len(value) < MIN_SECRET_CHARS:
                    continue
                if len(value) > budget:
                    self.left_out += 1
                    continue
                budget -= len(value)
                for form in encoded_forms(value):
                    source.setdefault(form, name)
        self._source = source
        self._pattern = re.compile(_alternation(sorted(source))) if source else None

    def __len__(self) -> int:
        """How many forms are redacted."""
        return len(self._source)

    def redact(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(self._marker, text)

    def _marker(self, match: re.Match[str]) -> str:
        return f"[redacted: secret from {self._source[match.group()]}]"


def _shared(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` have in common."""
    n = 0
    for x, y in zip(a, b, strict=False):  # bounded by the shorter word
        if x != y:
            break
        n += 1
    return n


_MAX_NESTING = 100
"""Nested groups in the pattern, at most (the regex compiler recurses on them)."""


def _alternation(words: list[str], depth: int = 0) -> str:
    """A pattern matching any of ``words`` (sorted, distinct), the longest where several match.

    Words are grouped by their first character and a group's common prefix is written once, so
    a position in the text is tried against the few words that start with its character.
    """
    optional = bool(words) and words[0] == ""  # a word ends here; longer ones are tried first
    rest = words[1:] if optional else words
    if depth >= _MAX_NESTING:  # prefixes of prefixes of ... (a crafted file): one flat group
        branches = [re.escape(w) for w in sorted(rest, key=len, reverse=True)]
    else:
        branches = []
        for _, grouped in itertools.groupby(rest, key=lambda w: w[0]):
            group = list(grouped)
            # Sorted: what the first and the last word share, all of them share.
            common = group[0][: _shared(group[0], group[-1])]
            below = _alternation([w[len(common) :] for w in group], depth + 1)
            branches.append(re.escape(common) + below)
    if not branches:
        return ""
    if optional:
        return "(?:" + "|".join(branches) + ")?"
    return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"


class SecretWatch:
    """The ``Redactor`` for the secret files there are now, rebuilt only when they change.

    ``files`` lists the secret files (a workspace scan); it is called at most every
    ``rescan_s`` seconds (0: on every use). The files it found are checked on every use: the
    redactor is rebuilt when the set of files or any one's size, mtime or inode changed. Copies
    of a file need no rescan: they hold the same values, which are redacted wherever they appear.
    """

    def __init__(
        self,
        files: Callable[[], Iterable[Path]],
        *,
        rescan_s: float = 0.0,
        extra: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        """``extra``: values redacted as well, by where they come from (the configuration's)."""
        self._files = files
        self.rescan_s = rescan_s
        self._extra = {name: list(values) for name, values in (extra or {}).items()}
        self._lock = threading.Lock()
        self._listed: tuple[Path, ...] = ()
        self._listed_at: float | None = None
        self._current: tuple[tuple[_Stamp, ...], Redactor] | None = None
        self._racy = False

    def settled(self) -> Redactor | None:
        """The current redactor when answering needs no I/O (no rescan due, no secret files to
        check), else None: the caller then asks ``redactor`` off its event loop."""
        with self._lock:
            due = self._listed_at is None or time.monotonic() - self._listed_at >= self.rescan_s
            if due or self._listed or self._current is None:
                return None
            return self._current[1]

    def redactor(self) -> Redactor:
        """The redactor for the files as they are now (safe to call from several threads)."""
        with self._lock:
            now = time.monotonic()
            if self._listed_at is None or now - self._listed_at >= self.rescan_s:
                self._listed, self._listed_at = tuple(sorted(set(self._files()))), now
            stamp = tuple(_stamp(path) for path in self._listed)
            if self._current is None or self._current[0] != stamp or self._racy:
                # Timestamps are coarse: a file changed again within the same tick as this read
                # would keep its stamp, so one stamped that recently is read again next time.
                self._racy = any(time.time_ns() - mtime_ns < _RACY_NS for *_, mtime_ns in stamp)
                by_name: dict[str, list[str]] = {name: list(v) for name, v in self._extra.items()}
                for path in self._listed:
                    by_name.setdefault(path.name, []).extend(secret_values(path))
                self._current = (stamp, Redactor(by_name))
            return self._current[1]


_RACY_NS = 50_000_000
_Stamp = tuple[str, int, int, int]  # path, size, inode, mtime_ns


def _stamp(path: Path) -> _Stamp:
    try:
        info = path.stat()
    except OSError:
        return (str(path), -1, -1, 0)  # gone or unreadable: it holds nothing
    return (str(path), info.st_size, info.st_ino, info.st_mtime_ns)
