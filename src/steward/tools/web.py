"""The ``fetch_url`` tool: read a web page or text file from an allowed domain, as text.

It runs on the host, not in the sandbox, and reaches only what the sandbox's egress proxy
would: domains on ``[sandbox] allowed_domains`` (``ctx.settings.allowed_domains``), by a
checked, globally routable address (``steward.safety.sandbox.egress``). The HTTP client is httpcore2
with a network backend that resolves the name itself, checks every address and connects to
the checked one; TLS still verifies the certificate for the host name (and sends it as SNI).
Every redirect is checked again the same way. Each connection is noted in the result's notes
as ``("egress", line)`` for the loop to log, whether the fetch worked or not.

Result text: one header line ``URL: ... | status: ... | content-type: ...``, a blank line,
then the body. HTML becomes readable text (scripts and styles dropped, block elements on their
own lines, whitespace collapsed, ``<pre>`` kept). Binary content is refused. A notice in square
brackets ends a body that was cut.
"""

from __future__ import annotations

import asyncio
import codecs
import functools
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urljoin, urlsplit

from steward.errors import ConfigError, ToolError
from steward.tools.base import Tool, ToolContext, ToolResult, tool
from steward.tools.reach import (
    AddressCheck,
    DomainAllowlist,
    EgressError,
    EgressGuard,
    Resolver,
    address_allowed,
    system_resolver,
)

if TYPE_CHECKING:
    import ssl

    import httpcore2

MAX_REDIRECTS = 5
MAX_BODY_BYTES = 2 * 1024 * 1024
"""Bytes of body read (after decompression); the rest is not fetched."""
MAX_CHARS = 200_000
"""The largest ``max_chars`` honoured."""
FETCH_TIMEOUT_S = 60.0
"""The whole fetch, redirects included."""
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 30.0
USER_AGENT = "steward-fetch_url/0.1"

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_TEXT_TYPES = frozenset(
    {"application/json", "application/xml", "application/javascript", "application/x-javascript",
     "application/ecmascript", "application/x-sh", "application/x-yaml", "application/yaml",
     "application/toml", "application/sql", "application/graphql", "application/x-ndjson",
     "application/x-www-form-urlencoded"}
)  # fmt: skip
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_SNIFF_BYTES = 8192
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
# Characters left as they are when a URL's path or query is percent-encoded (RFC 3986 + '%').
_URL_SAFE = "/%:@!$&'()*+,;=-._~?"


# --- the tool ---------------------------------------------------------------------------


def make_fetch_url(
    *,
    resolve: Resolver = system_resolver,
    address_ok: AddressCheck = address_allowed,
    ssl_context: ssl.SSLContext | None = None,
) -> Tool:
    """A ``fetch_url`` tool. The parameters are seams for tests (a test domain resolved to a
    local server, a test certificate authority); the defaults reach only public addresses."""

    @tool(name="fetch_url")
    async def fetch_url(ctx: ToolContext, url: str, max_chars: int | None = None) -> ToolResult:
        """Fetch a web page or text file over HTTP(S) and return it as readable text.

        Only domains listed in [sandbox] allowed_domains (steward.toml) can be fetched; private
        and loopback addresses never. HTML is turned into plain text; binary files are refused.

        Args:
            url: An http:// or https:// URL on an allowed domain.
            max_chars: Most characters of text to return (default: the tool output limit).
        """
        fetcher = _Fetcher(ctx, resolve=resolve, address_ok=address_ok, ssl_context=ssl_context)
        try:
            text = await fetcher.fetch(url, _char_cap(ctx, max_chars))
        except ToolError as exc:  # refused or failed: the connections tried are noted all the same
            return ToolResult(str(exc), is_error=True, notes=tuple(fetcher.notes))
        return ToolResult(text, notes=tuple(fetcher.notes))

    return fetch_url


fetch_url = make_fetch_url()


def web_tools() -> list[Tool]:
    """The web tools: fetch_url."""
    return [fetch_url]


def _char_cap(ctx: ToolContext, max_chars: int | None) -> int:
    if max_chars is None:
        return min(ctx.settings.output_cap_chars, MAX_CHARS)
    if max_chars < 1:
        raise ToolError(f"max_chars must be at least 1 (got {max_chars}); omit it for the default.")
    return min(max_chars, MAX_CHARS)


# --- fetching ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Target:
    url: str  # as shown to the model
    scheme: str
    host: str
    port: int
    target: str  # origin-form: path and query, percent-encoded


def _parse_url(url: str) -> _Target:
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        what = f"a {scheme}: URL" if scheme else "a URL without http:// or https://"
        raise ToolError(f"fetch_url reads http:// and https:// URLs only, and {url!r} is {what}.")
    if parts.username is not None or parts.password is not None:
        raise ToolError(f"Remove the user:password@ part from {url!r}; fetch_url sends no credentials.")
    host = parts.hostname
    if not host:
        raise ToolError(f"{url!r} has no host name; write it as https://example.com/path.")
    try:
        port = parts.port if parts.port is not None else (443 if scheme == "https" else 80)
    except ValueError:
        port = 0
    if not 0 < port < 65536:
        raise ToolError(f"The port in {url!r} is not a number from 1 to 65535.")
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise ToolError(f"{host!r} is not a valid host name.") from None
    path = quote(parts.path or "/", safe=_URL_SAFE)
    query = f"?{quote(parts.query, safe=_URL_SAFE)}" if parts.query else ""
    shown = parts._replace(fragment="").geturl()
    return _Target(shown, scheme, host, port, path + query)


class _Fetcher:
    """One call of fetch_url: checks, connections (noted in ``notes``) and the redirects."""

    def __init__(
        self,
        ctx: ToolContext,
        *,
        resolve: Resolver,
        address_ok: AddressCheck,
        ssl_context: ssl.SSLContext | None,
    ) -> None:
        self.ctx = ctx
        self.notes: list[tuple[str, str]] = []
        self.resolve = resolve
        self.address_ok = address_ok
        self.ssl_context = ssl_context

    async def fetch(self, url: str, cap: int) -> str:
        try:
            allowlist = DomainAllowlist(self.ctx.settings.allowed_domains)
        except ConfigError as exc:
            raise ToolError(f"fetch_url cannot run: {exc}") from None
        guard = EgressGuard(allowlist, resolve=self.resolve, address_ok=self.address_ok)
        import httpcore2

        pool = httpcore2.AsyncConnectionPool(
            ssl_context=self.ssl_context,
            network_backend=_backend_type()(guard, self.notes),
            max_connections=2,
            retries=0,
        )
        try:
            async with asyncio.timeout(FETCH_TIMEOUT_S), pool:
                return await self._follow(url, guard, pool, cap)
        except TimeoutError:
            raise ToolError(
                f"Fetching {url} took longer than {FETCH_TIMEOUT_S:g} s; nothing was read."
            ) from None
        except EgressError as exc:
            if exc.refused:
                raise ToolError(f"fetch_url refused: {exc.reason}") from None
            raise ToolError(f"Could not fetch {url}: {exc.reason}") from None
        except httpcore2.TimeoutException as exc:
            raise ToolError(f"Fetching {url} timed out ({type(exc).__name__}); try again later.") from None
        except httpcore2.NetworkError as exc:
            raise ToolError(f"Could not fetch {url}: {exc or type(exc).__name__}.") from None
        except httpcore2.ProtocolError as exc:
            raise ToolError(f"{url} did not answer in valid HTTP: {exc or type(exc).__name__}.") from None

    async def _follow(
        self, url: str, guard: EgressGuard, pool: httpcore2.AsyncConnectionPool, cap: int
    ) -> str:
        current, original = url, url
        for _ in range(MAX_REDIRECTS + 1):
            target = _parse_url(current)
            refusal = guard.allowlist.refusal(target.host)
            if refusal is not None:
                self.notes.append(("egress", f"fetch_url {target.host}:{target.port} refused: {refusal}"))
                came = f" (redirected from {original})" if current != original else ""
                raise ToolError(f"fetch_url refused {target.url}{came}: {refusal}")
            async with pool.stream(
                "GET",
                _core_url(target),
                headers=[
                    (b"User-Agent", USER_AGENT.encode()),
                    (b"Accept", b"text/html, text/plain;q=0.9, application/json;q=0.9, */*;q=0.5"),
                    (b"Accept-Encoding", b"identity"),
                ],
                extensions={
                    "timeout": {
                        "connect": CONNECT_TIMEOUT_S,
                        "read": READ_TIMEOUT_S,
                        "write": READ_TIMEOUT_S,
                        "pool": CONNECT_TIMEOUT_S,
                    },
                },
            ) as response:
                location = _header(response.headers, b"location")
                if response.status in _REDIRECTS and location:
                    current = urljoin(target.url, location)
                    continue
                return await _render(target.url, original, response, cap)
        raise ToolError(
            f"{original} redirected more than {MAX_REDIRECTS} times (last to {current}); "
            "fetch the final URL directly if you know it."
        )


def _core_url(target: _Target) -> httpcore2.URL:
    import httpcore2

    return httpcore2.URL(
        scheme=target.scheme.encode("ascii"),
        host=target.host.encode("ascii"),
        port=target.port,
        target=target.target.encode("ascii"),
    )


@functools.cache
def _backend_type() -> type[Any]:
    """The network backend class (built on first use: httpcore2 is slow to import)."""
    import httpcore2

    class CheckedBackend(httpcore2.AsyncNetworkBackend):
        """Resolves and checks on its own, then connects to a checked address only."""

        def __init__(self, guard: EgressGuard, notes: list[tuple[str, str]]) -> None:
            self.guard = guard
            self.notes = notes
            self.inner = httpcore2.AnyIOBackend()

        async def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's interface
            local_address: str | None = None,
            socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
        ) -> httpcore2.AsyncNetworkStream:
            try:
                addresses = await self.guard.addresses(host, port)
            except EgressError as exc:
                self.notes.append(("egress", f"fetch_url {host}:{port} refused: {exc.reason}"))
                raise
            failures: list[str] = []
            for ip in addresses:
                try:
                    # The checked address, not the name: nothing resolves it again (no rebinding);
                    # TLS is started later with the name, so the certificate is checked for it.
                    stream = await self.inner.connect_tcp(
                        str(ip), port, timeout=timeout, local_address=local_address,
                        socket_options=socket_options,
                    )  # fmt: skip
                except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                    failures.append(f"{ip}: {exc or type(exc).__name__}")
                    continue
                self.notes.append(("egress", f"fetch_url {host}:{port} via {ip} allowed"))
                return stream
            reason = f"could not connect to {host}:{port} ({'; '.join(failures)})"
            self.notes.append(("egress", f"fetch_url {host}:{port} failed: {reason}"))
            raise EgressError(reason[0].upper() + reason[1:] + ".", refused=False)

        async def connect_unix_socket(
            self,
            path: str,
            timeout: float | None = None,  # noqa: ASYNC109 - httpcore2's interface
            socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
        ) -> httpcore2.AsyncNetworkStream:
            raise EgressError("fetch_url does not connect to UNIX sockets.", refused=True)

        async def sleep(self, seconds: float) -> None:
            await self.inner.sleep(seconds)

    return CheckedBackend


# --- the answer as text -------------------------------------------------------------------


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1").strip()
    return ""


def _kind(content_type: str) -> str:
    """'html', 'text', 'binary' or 'unknown' (no type given: the bytes decide)."""
    mime = content_type.split(";", 1)[0].strip().lower()
    if not mime:
        return "unknown"
    if mime in _HTML_TYPES:
        return "html"
    if mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml")):
        return "text"
    return "binary"


def _binary(url: str, status: int, content_type: str, detail: str) -> ToolError:
    return ToolError(
        f"{url} (HTTP {status}) is {content_type or 'binary content'}{detail}; fetch_url returns text "
        "only. To download it, use bash with curl or wget (the sandbox's egress proxy allows the same "
        "domains when the call is granted the network)."
    )


async def _render(url: str, original: str, response: httpcore2.Response, cap: int) -> str:
    content_type = _header(response.headers, b"content-type")
    kind = _kind(content_type)
    if kind == "binary":  # refused before a byte of the body is read
        raise _binary(url, response.status, content_type, "")
    body, cut = await _read_body(response, _header(response.headers, b"content-encoding"))
    if kind == "unknown":
        if b"\x00" in body[:_SNIFF_BYTES]:
            raise _binary(url, response.status, content_type, " (it contains NUL bytes)")
        start = body[:_SNIFF_BYTES].lstrip()[:15].lower()
        kind = "html" if start.startswith((b"<!doctype html", b"<html")) else "text"
    text = body.decode(_charset(content_type, body if kind == "html" else b""), errors="replace")
    if kind == "html":
        # Parsing up to 2 MiB of HTML takes a while: keep the event loop free meanwhile.
        text = await asyncio.to_thread(html_to_text, text)
    text = text.strip()
    phrase = response.extensions.get("reason_phrase", b"")
    status = f"{response.status} {phrase.decode('latin-1') if isinstance(phrase, bytes) else ''}".strip()
    header = f"URL: {url} | status: {status} | content-type: {content_type or 'none'}"
    if url != original:
        header += f" | redirected from: {original}"
    notices = []
    if cut:
        notices.append(f"[the body was cut at {MAX_BODY_BYTES // 1024} KiB; the rest was not fetched]")
    if len(text) > cap:
        more = f"; call again with a larger max_chars (up to {MAX_CHARS}) for more" if cap < MAX_CHARS else ""
        notices.append(f"[cut at {cap} of {len(text)} chars{more}]")
        text = text[:cap]
    return "\n".join([header, "", text, *notices]).rstrip()


async def _read_body(response: httpcore2.Response, encoding: str) -> tuple[bytes, bool]:
    """The body, decompressed, at most ``MAX_BODY_BYTES``; and whether it was cut."""
    encoding = encoding.lower()
    if encoding in ("", "identity"):
        decoder = None
    elif encoding in ("gzip", "x-gzip"):
        decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        decoder = zlib.decompressobj()
    else:
        raise ToolError(f"The server sent the body encoded as {encoding!r}, which fetch_url cannot decode.")
    body = bytearray()
    # Bounded by the body cap (and, for a slow server, by the read timeout and FETCH_TIMEOUT_S).
    async for chunk in response.aiter_stream():
        if decoder is None:
            body += chunk
        else:
            try:
                # max_length bounds what a small compressed chunk may expand to.
                body += decoder.decompress(chunk, MAX_BODY_BYTES + 1 - len(body))
            except zlib.error as exc:
                raise ToolError(f"The server's {encoding} body is corrupt ({exc}).") from None
        if len(body) > MAX_BODY_BYTES:
            return bytes(body[:MAX_BODY_BYTES]), True
    return bytes(body), False


def _charset(content_type: str, html: bytes) -> str:
    declared = re.search(r"charset\s*=\s*\"?([A-Za-z0-9_.:-]+)", content_type, re.IGNORECASE)
    name = declared.group(1) if declared else ""
    if not name and html:
        meta = _META_CHARSET.search(html[:_SNIFF_BYTES])
        name = meta.group(1).decode("ascii") if meta else ""
    try:
        return codecs.lookup(name).name if name else "utf-8"
    except LookupError:
        return "utf-8"


# --- HTML to readable text ------------------------------------------------------------------

_SKIP = frozenset({"script", "style", "noscript", "template", "svg", "math", "iframe", "object", "canvas"})
_BLOCK = frozenset(
    {"address", "article", "aside", "blockquote", "br", "dd", "details", "div", "dl", "dt", "fieldset",
     "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr",
     "li", "main", "nav", "ol", "p", "section", "summary", "table", "tr", "ul", "caption"}
)  # fmt: skip


class _Readable(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[str] = []
        self.line: list[str] = []
        self.title: list[str] = []
        self.skip = 0
        self.pre = 0
        self.in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self.skip += 1
        elif tag == "title":
            self.in_title = True
        elif tag == "pre":
            self._flush()
            self.pre += 1
        elif tag in _BLOCK:
            self._flush()
            if tag == "li":
                self.line.append("- ")
            elif tag[0] == "h" and tag[1:].isdigit():
                self.line.append("#" * int(tag[1:]) + " ")
        elif tag in ("td", "th"):
            self.line.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self.skip = max(0, self.skip - 1)
        elif tag == "title":
            self.in_title = False
        elif tag == "pre":
            self._flush()
            self.pre = max(0, self.pre - 1)
        elif tag in _BLOCK:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        (self.title if self.in_title else self.line).append(data)

    def _flush(self) -> None:
        text = "".join(self.line)
        self.line = []
        if self.pre:
            text = "\n".join(line.rstrip() for line in text.strip("\n").splitlines())
        else:
            text = " ".join(text.split())
            if text in ("-", "#") or (text.startswith("#") and not text.strip("# ")):
                return  # an empty list item or heading
        if text:
            self.blocks.append(text)

    def text(self) -> str:
        self._flush()
        title = " ".join("".join(self.title).split())
        return "\n".join([f"Title: {title}", *self.blocks] if title else self.blocks)


def html_to_text(html: str) -> str:
    """Readable text of an HTML document: no scripts or styles, one line per block element."""
    parser = _Readable()
    parser.feed(html)
    parser.close()
    return parser.text()
