"""What a tool or a command may reach on the network: the rules, shared by ``fetch_url`` and
the sandbox's egress proxy (``steward.safety.sandbox.egress``).

1. ``DomainAllowlist``: the host must be a domain name on ``[sandbox] allowed_domains``
   (exact names, ``*.example.com`` for any depth of subdomain but not the apex). An IP
   literal (also the legacy spellings ``127.1`` or ``0x7f000001``) never matches.
2. ``EgressGuard`` resolves the name on the host and keeps only addresses that
   ``address_allowed`` accepts: globally routable unicast, with IPv4 hidden in IPv6
   (mapped, compatible, 6to4, NAT64, Teredo) unwrapped and checked too.
3. The connection goes to the checked address itself: nothing resolves the name again.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass

from steward.errors import ConfigError, StewardError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[Sequence[IPAddress]]]
"""``(host, port) -> addresses``: how a name becomes addresses (default: the host's getaddrinfo)."""
AddressCheck = Callable[[IPAddress], bool]
"""Whether an address may be connected to (default: ``address_allowed``)."""

ALLOWED_DOMAINS_KEY = "[sandbox] allowed_domains"
NEVER_REACHABLE = (
    "Loopback, private, link-local and reserved addresses are never reachable, whatever "
    f"{ALLOWED_DOMAINS_KEY} says."
)


def domain_fix(name: str) -> str:
    """How to let ``name`` through, as a sentence to append to a refusal."""
    return (
        f'To allow it, add it to {ALLOWED_DOMAINS_KEY} in steward.toml: allowed_domains = ["{name}"] '
        f'(an entry "*.{name}" allows its subdomains).'
    )


CONNECT_TIMEOUT_S = 10.0
MAX_ADDRESSES = 4
"""Resolved addresses tried per connection (each with its own connect timeout)."""
CHUNK = 64 * 1024


# --- errors ------------------------------------------------------------------------------


class EgressError(StewardError):
    """A connection did not happen; ``reason`` says why and names the fix.

    ``refused``: the allowlist or the address check said no (HTTP 403 from the proxy);
    otherwise the destination was allowed but could not be resolved or reached (502)."""

    def __init__(self, reason: str, *, refused: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.refused = refused

    @property
    def status(self) -> int:
        return 403 if self.refused else 502


# --- host names and the allowlist ---------------------------------------------------------

# One DNS label: letters, digits, '-' inside, '_' tolerated (some real host names carry it).
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_MAX_NAME = 253


def normalize_host(host: str) -> str | None:
    """``host`` lower-cased without its trailing dot, or None when it is not a DNS name."""
    if not host.isascii():
        return None  # clients send IDNs as xn-- labels; anything else is not a host name
    name = host.lower().removesuffix(".")
    if not name or len(name) > _MAX_NAME:
        return None
    if not all(_LABEL.fullmatch(label) for label in name.split(".")):
        return None
    return name


def is_ip_literal(host: str) -> bool:
    """Whether ``host`` names an address rather than a domain, in any spelling a resolver takes.

    Besides ``1.2.3.4`` and ``[::1]`` that is ``127.1``, ``0x7f.1``, ``2130706433`` (inet_aton
    accepts them all) and any name whose last label is numeric (no top-level domain is)."""
    bare = host.strip("[]").removesuffix(".")
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(bare)
        return True
    with contextlib.suppress(OSError, ValueError):
        socket.inet_aton(bare)
        return True
    return bare.rsplit(".", 1)[-1].isdigit()


@dataclass(frozen=True, slots=True)
class _Patterns:
    exact: frozenset[str]
    suffixes: frozenset[str]  # "example.com" for "*.example.com"


class DomainAllowlist:
    """The domains egress may reach: exact names and ``*.`` wildcards; empty allows nothing.

    Matching ignores case and a trailing dot; ``*.example.com`` matches ``a.example.com`` and
    ``a.b.example.com`` but not ``example.com``. A bad pattern raises ``ConfigError``.
    """

    __slots__ = ("_patterns", "patterns")

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(patterns)
        self._patterns = _compile(self.patterns)

    def __repr__(self) -> str:
        return f"DomainAllowlist({list(self.patterns)!r})"

    @property
    def empty(self) -> bool:
        return not self.patterns

    def allows(self, host: str) -> bool:
        return self.refusal(host) is None

    def refusal(self, host: str) -> str | None:
        """Why ``host`` may not be reached (with the fix), or None when it may."""
        if is_ip_literal(host):
            return (
                f"{host} is an IP address; only domain names listed in {ALLOWED_DOMAINS_KEY} are "
                f"reachable. Use the server's domain name. {NEVER_REACHABLE}"
            )
        name = normalize_host(host)
        if name is None:
            return f"{host!r} is not a valid host name."
        if self.empty:
            return (
                f"No domain may be reached: {ALLOWED_DOMAINS_KEY} is empty. Add the domains needed in "
                f'steward.toml, e.g. allowed_domains = ["{name}"].'
            )
        if name in self._patterns.exact:
            return None
        labels = name.split(".")
        # Bounded by the label count (at most 127 in a 253-char name).
        if any(".".join(labels[i:]) in self._patterns.suffixes for i in range(1, len(labels))):
            return None
        return f"{name} is not in {ALLOWED_DOMAINS_KEY}. {domain_fix(name)}"


def _compile(patterns: Sequence[str]) -> _Patterns:
    exact: set[str] = set()
    suffixes: set[str] = set()
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise ConfigError(f"{ALLOWED_DOMAINS_KEY}: {pattern!r} is not a string; list domain names.")
        wildcard = pattern.startswith("*.")
        name = _pattern_name(pattern.removeprefix("*.") if wildcard else pattern, pattern)
        if wildcard:
            if "." not in name:
                raise ConfigError(
                    f'{ALLOWED_DOMAINS_KEY}: "{pattern}" would allow a whole top-level domain; list the '
                    'domains you need, e.g. "*.example.com".'
                )
            suffixes.add(name)
        else:
            exact.add(name)
    return _Patterns(frozenset(exact), frozenset(suffixes))


def _pattern_name(text: str, pattern: str) -> str:
    """The normalized name of one pattern (without its ``*.``), or a ConfigError naming the fix."""
    if not text.isascii():
        try:
            text = text.encode("idna").decode("ascii")
        except UnicodeError:
            raise ConfigError(
                f'{ALLOWED_DOMAINS_KEY}: "{pattern}" is not a valid domain name; write it in its '
                "xn-- (punycode) form."
            ) from None
    if is_ip_literal(text):
        raise ConfigError(
            f'{ALLOWED_DOMAINS_KEY}: "{pattern}" is an IP address; list domain names only. {NEVER_REACHABLE}'
        )
    name = normalize_host(text)
    if name is None:
        raise ConfigError(
            f'{ALLOWED_DOMAINS_KEY}: "{pattern}" is not a domain name. Write names like "example.com", '
            'or "*.example.com" for every subdomain (the "*." only at the start; no scheme, port or path).'
        )
    return name


# --- addresses -----------------------------------------------------------------------------

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")


def address_allowed(ip: IPAddress | str) -> bool:
    """Whether ``ip`` is a globally routable unicast address (the only kind egress reaches).

    IPv4 carried inside IPv6 (mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4
    ``2002::/16``, Teredo ``2001::/32``) is unwrapped and must pass too; the deprecated
    IPv4-compatible form ``::a.b.c.d`` is refused outright."""
    if isinstance(ip, str):
        try:
            ip = ipaddress.ip_address(ip)
        except ValueError:
            return False
    if isinstance(ip, ipaddress.IPv4Address):
        return _routable(ip)
    if ip in _COMPATIBLE:  # deprecated IPv4-compatible form: nothing legitimate uses it
        return False
    return all(_routable(inner) for inner in _unwrapped(ip))


def _unwrapped(ip: ipaddress.IPv6Address) -> list[IPAddress]:
    """The addresses an IPv6 address stands for: the IPv4 it carries, or itself (and for 6to4
    and Teredo, whose own prefixes are routable, both)."""
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    if ip in _NAT64:
        # Python counts the NAT64 prefix as reserved; what matters is the IPv4 it translates to.
        return [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
    inner: list[IPAddress] = [ip]
    if ip.sixtofour is not None:
        inner.append(ip.sixtofour)
    if ip.teredo is not None:
        inner.extend(ip.teredo)
    return inner


def _routable(ip: IPAddress) -> bool:
    # is_global alone lets multicast (ff0e::) and some reserved space through.
    return ip.is_global and not (
        ip.is_multicast or ip.is_reserved or ip.is_unspecified or ip.is_loopback or ip.is_link_local
    )


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """The host's own resolution (getaddrinfo), de-duplicated, in the order it answered."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    found: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        with contextlib.suppress(ValueError):
            ip = ipaddress.ip_address(str(sockaddr[0]))
            if ip not in found:
                found.append(ip)
    return found


# --- the resolver step ---------------------------------------------------------------------


class EgressGuard:
    """Checks a destination and connects to it by a checked address only.

    ``resolve`` and ``address_ok`` are seams for tests (a test domain resolved to a loopback
    server); their defaults never let loopback or private addresses through.
    """

    __slots__ = ("address_ok", "allowlist", "connect_timeout_s", "resolve")

    def __init__(
        self,
        allowlist: DomainAllowlist,
        *,
        resolve: Resolver = system_resolver,
        address_ok: AddressCheck = address_allowed,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        self.allowlist = allowlist
        self.resolve = resolve
        self.address_ok = address_ok
        self.connect_timeout_s = connect_timeout_s

    def check_host(self, host: str) -> str:
        """The normalized host when the allowlist takes it; ``EgressError`` (refused) otherwise."""
        refusal = self.allowlist.refusal(host)
        if refusal is not None:
            raise EgressError(refusal, refused=True)
        name = normalize_host(host)
        assert name is not None  # the allowlist took it, so it is a name
        return name

    async def addresses(self, host: str, port: int) -> list[IPAddress]:
        """The checked addresses of ``host`` to connect to, in order (at most ``MAX_ADDRESSES``).

        The allowlist is asked before anything is resolved: a name that is not allowed is never
        even looked up."""
        name = self.check_host(host)
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                found = list(await self.resolve(name, port))
        except TimeoutError:
            raise EgressError(
                f"Resolving {name} timed out after {self.connect_timeout_s:g} s.", refused=False
            ) from None
        except OSError as exc:
            raise EgressError(f"Could not resolve {name}: {exc.strerror or exc}.", refused=False) from None
        if not found:
            raise EgressError(f"{name} has no address.", refused=False)
        checked = [ip for ip in found if self.address_ok(ip)]
        if not checked:
            shown = ", ".join(str(ip) for ip in found[:MAX_ADDRESSES])
            raise EgressError(
                f"{name} resolves to {shown}, which may not be reached. {NEVER_REACHABLE}", refused=True
            )
        return checked[:MAX_ADDRESSES]

    async def open_connection(
        self, host: str, port: int, *, limit: int = CHUNK
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, IPAddress]:
        """A TCP connection to a checked address of ``host``; the address is returned too."""
        failures: list[str] = []
        for ip in await self.addresses(host, port):
            try:
                async with asyncio.timeout(self.connect_timeout_s):
                    # An address, not the name: nothing is resolved again (no rebinding).
                    reader, writer = await asyncio.open_connection(str(ip), port, limit=limit)
            except TimeoutError:
                failures.append(f"{ip}: timed out after {self.connect_timeout_s:g} s")
            except OSError as exc:
                failures.append(f"{ip}: {exc.strerror or exc}")
            else:
                return reader, writer, ip
        raise EgressError(f"Could not connect to {host}:{port} ({'; '.join(failures)}).", refused=False)
