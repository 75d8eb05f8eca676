"""fetch_url: text from allowed domains only, never from loopback or private addresses.

A real HTTP(S) server on the host's loopback counts every request. The tool under test is
built with the seams of ``make_fetch_url``: ``allowed.test`` resolves to that server and the
address check lets 127.0.0.1 (and only it) through on top of the default; every other name
and address meets the default checks.
"""

from __future__ import annotations

import datetime
import gzip
import ipaddress
import socket
import ssl
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from steward.safety.sandbox.egress import IPAddress, address_allowed
from steward.tools.base import Tool, ToolContext, ToolSettings
from steward.tools.builtin import builtin_toolset
from steward.tools.web import MAX_BODY_BYTES, fetch_url, make_fetch_url

PAGE = """<!doctype html><html><head><title>The  Title</title>
<style>body { color: red }</style><script>var secret = "script text";</script></head>
<body><nav><ul><li>Home</li><li>Docs</li></ul></nav>
<h1>Main   heading</h1><p>First &amp; foremost,
   a paragraph.</p><p>Second<br>line</p>
<pre>def f():
    return 1</pre><noscript>enable js</noscript><table><tr><td>a</td><td>b</td></tr></table>
</body></html>"""


@dataclass
class Site:
    """What the test server was asked, by path (query dropped)."""

    port: int = 0
    hits: Counter[str] = field(default_factory=Counter)
    sni: list[str | None] = field(default_factory=list)


def handler_for(site: Site) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def send(self, status: int, body: bytes, content_type: str | None, **headers: str) -> None:
            self.send_response(status)
            if content_type is not None:
                self.send_header("Content-Type", content_type)
            for name, value in headers.items():
                self.send_header(name.replace("_", "-"), value)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            site.hits[parts.path] += 1
            query = parse_qs(parts.query)
            match parts.path:
                case "/page":
                    self.send(200, PAGE.encode(), "text/html; charset=utf-8")
                case "/plain":
                    self.send(200, b"just text\n", "text/plain")
                case "/json":
                    self.send(200, b'{"a": 1}', "application/json")
                case "/image":
                    self.send(200, b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40, "image/png")
                case "/nul":
                    self.send(200, b"abc\x00def", None)
                case "/untyped-html":
                    self.send(200, b"<!DOCTYPE html><p>untyped <b>page</b></p>", None)
                case "/latin1":
                    self.send(200, "café".encode("latin-1"), "text/plain; charset=iso-8859-1")
                case "/gzip":
                    self.send(
                        200, gzip.compress(b"zipped text " * 100), "text/plain", Content_Encoding="gzip"
                    )
                case "/big":
                    self.send(200, b"y" * (MAX_BODY_BYTES + 500_000), "text/plain")
                case "/missing":
                    self.send(404, b"no such page", "text/plain")
                case "/to":
                    self.send(302, b"", "text/plain", Location=query["target"][0])
                case _ if parts.path.startswith("/hops/"):
                    left = int(parts.path.rsplit("/", 1)[1])
                    self.send(302, b"", "text/plain", Location=f"/hops/{left - 1}" if left else "/plain")
                case _:
                    self.send(404, b"unknown", "text/plain")

    return Handler


@pytest.fixture
def serve() -> Iterator[Callable[..., Site]]:
    servers: list[ThreadingHTTPServer] = []

    def start(host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> Site:
        site = Site()
        server = ThreadingHTTPServer((host, 0), handler_for(site))
        if tls is not None:

            def remember(sock: ssl.SSLObject, name: str | None, context: ssl.SSLContext) -> None:
                site.sni.append(name)

            tls.sni_callback = remember
            server.socket = tls.wrap_socket(server.socket, server_side=True)
        site.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        servers.append(server)
        return site

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def site(serve: Callable[..., Site]) -> Site:
    return serve()


RESOLVED: dict[str, Sequence[str]] = {
    "allowed.test": ["127.0.0.1"],
    "sneaky.test": ["127.0.0.2"],
    "internal.test": ["10.0.0.5"],
    "metadata.test": ["169.254.169.254"],
    "mapped.test": ["::ffff:127.0.0.1"],
    "localhost": ["127.0.0.2"],
}
LISTED = ("allowed.test", "sneaky.test", "internal.test", "metadata.test", "mapped.test", "localhost")


class Resolver:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.asked.append(host)
        if host not in RESOLVED:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [ipaddress.ip_address(a) for a in RESOLVED[host]]


def server_or_default(ip: IPAddress) -> bool:
    """The address seam: the test server's 127.0.0.1 besides what the default allows."""
    return ip == ipaddress.ip_address("127.0.0.1") or address_allowed(ip)


@pytest.fixture
def resolve() -> Resolver:
    return Resolver()


@pytest.fixture
def tool(resolve: Resolver) -> Tool:
    return make_fetch_url(resolve=resolve, address_ok=server_or_default)


def context(tmp_path: Path, domains: Sequence[str] = LISTED) -> ToolContext:
    return ToolContext(workspace=tmp_path, settings=ToolSettings(allowed_domains=tuple(domains)))


async def fetch(tool: Tool, ctx: ToolContext, url: str, **arguments: object) -> tuple[str, bool]:
    result = await tool.call({"url": url, **arguments}, ctx)
    return result.content, result.is_error


async def noted(tool: Tool, ctx: ToolContext, url: str) -> tuple[str, bool, tuple[tuple[str, str], ...]]:
    """``fetch``, with the notes that came back with the result."""
    result = await tool.call({"url": url}, ctx)
    return result.content, result.is_error, result.notes


# --- what it returns --------------------------------------------------------------------------


async def test_html_becomes_readable_text_with_a_header_line(tool: Tool, site: Site, tmp_path: Path) -> None:
    text, error = await fetch(tool, context(tmp_path), f"http://allowed.test:{site.port}/page")
    assert not error, text
    header, blank, *body = text.splitlines()
    assert (
        header
        == f"URL: http://allowed.test:{site.port}/page | status: 200 OK | content-type: text/html; charset=utf-8"
    )
    assert blank == ""
    assert body == [
        "Title: The Title",
        "- Home",
        "- Docs",
        "# Main heading",
        "First & foremost, a paragraph.",
        "Second",
        "line",
        "def f():",
        "    return 1",
        "a b",
    ]


@pytest.mark.parametrize(
    ("path", "expected"),
    [("/plain", "just text"), ("/json", '{"a": 1}'), ("/latin1", "café"), ("/gzip", ("zipped text " * 100).strip()),
     ("/untyped-html", "untyped page")],
)  # fmt: skip
async def test_text_bodies_come_back_decoded(
    tool: Tool, site: Site, tmp_path: Path, path: str, expected: str
) -> None:
    text, error = await fetch(tool, context(tmp_path), f"http://allowed.test:{site.port}{path}")
    assert not error, text
    assert text.split("\n", 2)[2] == expected


async def test_an_error_status_is_shown_not_hidden(tool: Tool, site: Site, tmp_path: Path) -> None:
    text, error = await fetch(tool, context(tmp_path), f"http://allowed.test:{site.port}/missing")
    assert not error
    assert "| status: 404 Not Found |" in text.splitlines()[0]
    assert text.endswith("no such page")


@pytest.mark.parametrize("path", ["/image", "/nul"])
async def test_binary_content_is_refused_with_what_to_do(
    tool: Tool, site: Site, tmp_path: Path, path: str
) -> None:
    text, error = await fetch(tool, context(tmp_path), f"http://allowed.test:{site.port}{path}")
    assert error
    assert "returns text only" in text and "curl" in text


async def test_max_chars_cuts_the_text_with_a_notice(tool: Tool, site: Site, tmp_path: Path) -> None:
    text, error = await fetch(tool, context(tmp_path), f"http://allowed.test:{site.port}/page", max_chars=20)
    assert not error
    assert text.split("\n", 2)[2].startswith("Title: The Title\n- H\n[cut at 20 of")
    assert text.endswith("for more]") and "[cut at 20 of" in text
    text, error = await fetch(tool, context(tmp_path), f"http://allowed.test:{site.port}/page", max_chars=0)
    assert error and "max_chars must be at least 1" in text


async def test_a_body_over_the_cap_is_not_read_to_the_end(tool: Tool, site: Site, tmp_path: Path) -> None:
    text, error = await fetch(tool, context(tmp_path), f"http://allowed.test:{site.port}/big", max_chars=100)
    assert not error
    assert "[the body was cut at 2048 KiB; the rest was not fetched]" in text


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://allowed.test/x",
        "allowed.test/page",
        "http:///nohost",
        "http://allowed.test:0/",
    ],
)
async def test_only_http_and_https_urls_are_fetched(tool: Tool, tmp_path: Path, url: str) -> None:
    text, error = await fetch(tool, context(tmp_path), url)
    assert error
    assert "http://" in text


async def test_credentials_in_the_url_are_refused(tool: Tool, site: Site, tmp_path: Path) -> None:
    text, error = await fetch(tool, context(tmp_path), f"http://me:pw@allowed.test:{site.port}/plain")
    assert error and "user:password@" in text
    assert not site.hits


# --- what it refuses --------------------------------------------------------------------------


async def test_a_domain_not_on_the_list_is_refused_with_the_fix(
    tool: Tool, site: Site, resolve: Resolver, tmp_path: Path
) -> None:
    text, error = await fetch(tool, context(tmp_path, ["pypi.org"]), f"http://allowed.test:{site.port}/plain")
    assert error
    assert "allowed.test is not in [sandbox] allowed_domains" in text
    assert 'add it to [sandbox] allowed_domains in steward.toml: allowed_domains = ["allowed.test"]' in text
    assert resolve.asked == [] and not site.hits


async def test_an_empty_list_refuses_everything(tool: Tool, site: Site, tmp_path: Path) -> None:
    text, error = await fetch(tool, context(tmp_path, []), f"http://allowed.test:{site.port}/plain")
    assert error and "allowed_domains is empty" in text and 'allowed_domains = ["allowed.test"]' in text
    assert not site.hits


async def test_a_bad_pattern_is_reported_naming_the_key(tool: Tool, tmp_path: Path) -> None:
    text, error = await fetch(tool, context(tmp_path, ["https://example.com/"]), "https://example.com/")
    assert error and "[sandbox] allowed_domains" in text and "not a domain name" in text


async def test_the_default_checks_never_reach_a_loopback_server(site: Site, tmp_path: Path) -> None:
    ctx = context(tmp_path)
    notes: list[tuple[str, str]] = []
    for url in (
        f"http://127.0.0.1:{site.port}/plain",  # an IP literal
        f"http://[::1]:{site.port}/plain",
        f"http://localhost:{site.port}/plain",  # listed, and resolved by the host to loopback
    ):
        text, error, more = await noted(fetch_url, ctx, url)
        notes += more
        assert error, text
        assert "never reachable" in text
    defaults_but_test_names = make_fetch_url(resolve=Resolver())
    text, error, more = await noted(defaults_but_test_names, ctx, f"http://allowed.test:{site.port}/plain")
    notes += more
    assert error and "allowed.test resolves to 127.0.0.1, which may not be reached" in text
    assert not site.hits
    assert all(kind == "egress" and "refused" in line for kind, line in notes)


@pytest.mark.parametrize("name", ["internal.test", "metadata.test", "mapped.test"])
async def test_a_listed_name_that_resolves_to_a_private_address_is_refused(
    tool: Tool, site: Site, tmp_path: Path, name: str
) -> None:
    ctx = context(tmp_path)
    text, error, notes = await noted(tool, ctx, f"http://{name}:{site.port}/plain")
    assert error and "never reachable" in text
    assert notes == (
        ("egress", f"fetch_url {name}:{site.port} refused: {text.removeprefix('fetch_url refused: ')}"),
    )
    assert not site.hits


@pytest.mark.parametrize(
    "target",
    ["http://sneaky.test:{secret}/secret", "http://127.0.0.2:{secret}/secret", "http://localhost:{secret}/secret",
     "http://internal.test:{secret}/secret", "http://metadata.test/latest/meta-data/", "http://unlisted.test/"],
)  # fmt: skip
async def test_a_redirect_to_a_private_or_unlisted_place_is_refused(
    tool: Tool, serve: Callable[..., Site], tmp_path: Path, target: str
) -> None:
    site = serve()
    secret = serve(host="127.0.0.2")  # reachable from the host, never through fetch_url
    ctx = context(tmp_path)
    text, error = await fetch(
        tool, ctx, f"http://allowed.test:{site.port}/to?target={target.format(secret=secret.port)}"
    )
    assert error, text
    assert "never reachable" in text or "not in [sandbox] allowed_domains" in text
    assert site.hits["/to"] == 1
    assert not secret.hits


async def test_redirects_are_followed_five_times_at_most(tool: Tool, site: Site, tmp_path: Path) -> None:
    text, error = await fetch(tool, context(tmp_path), f"http://allowed.test:{site.port}/hops/4")
    assert not error, text
    assert f"URL: http://allowed.test:{site.port}/plain |" in text
    assert f"redirected from: http://allowed.test:{site.port}/hops/4" in text
    text, error = await fetch(tool, context(tmp_path), f"http://allowed.test:{site.port}/hops/5")
    assert error and "redirected more than 5 times" in text
    assert site.hits["/plain"] == 1


async def test_each_connection_is_noted_for_the_event_log(tool: Tool, site: Site, tmp_path: Path) -> None:
    ctx = context(tmp_path)
    _, _, notes = await noted(tool, ctx, f"http://allowed.test:{site.port}/hops/1")
    assert notes
    assert all(
        note == ("egress", f"fetch_url allowed.test:{site.port} via 127.0.0.1 allowed") for note in notes
    )


async def test_fetch_url_is_a_builtin_tool_once_a_domain_is_allowed(tmp_path: Path) -> None:
    specs = await builtin_toolset().get_tools(ToolContext(workspace=tmp_path))
    assert "fetch_url" not in [spec.name for spec in specs]  # it could only fail
    allowed = ToolContext(workspace=tmp_path, settings=ToolSettings(allowed_domains=("example.com",)))
    assert "fetch_url" in [spec.name for spec in await builtin_toolset().get_tools(allowed)]


# --- TLS: the address is pinned, the certificate is still checked for the name -------------------


@dataclass
class Pki:
    ca: Path
    cert: Path
    key: Path


def make_pki(directory: Path, name: str) -> Pki:
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Steward test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(1).not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    leaf = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(2)
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    pki = Pki(directory / "ca.pem", directory / "cert.pem", directory / "key.pem")
    pki.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.cert.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    pki.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return pki


def tls_server(pki: Pki) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.cert, pki.key)
    return context


async def test_https_connects_to_the_checked_address_and_verifies_the_name(
    serve: Callable[..., Site], resolve: Resolver, tmp_path: Path
) -> None:
    pki = make_pki(tmp_path, "allowed.test")
    site = serve(tls=tls_server(pki))
    tool = make_fetch_url(
        resolve=resolve, address_ok=server_or_default, ssl_context=ssl.create_default_context(cafile=pki.ca)
    )
    text, error = await fetch(tool, context(tmp_path), f"https://allowed.test:{site.port}/plain")
    assert not error, text
    assert text.endswith("just text")
    assert site.sni == ["allowed.test"]  # the name went to the server, though 127.0.0.1 was dialled


async def test_https_with_a_certificate_for_another_name_fails(
    serve: Callable[..., Site], resolve: Resolver, tmp_path: Path
) -> None:
    pki = make_pki(tmp_path, "other.test")
    site = serve(tls=tls_server(pki))
    tool = make_fetch_url(
        resolve=resolve, address_ok=server_or_default, ssl_context=ssl.create_default_context(cafile=pki.ca)
    )
    text, error = await fetch(tool, context(tmp_path), f"https://allowed.test:{site.port}/plain")
    assert error
    assert "certificate" in text.lower() or "hostname" in text.lower()
    assert not site.hits
