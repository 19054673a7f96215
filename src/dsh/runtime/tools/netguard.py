"""Which network addresses a model-driven fetch may reach.

A model that can fetch any URL can be talked (by a page it read, say) into fetching
``http://169.254.169.254/`` (cloud credentials), ``http://localhost:8080/admin`` or a
router on the LAN: a server-side request forgery. :func:`check_url` is the guard against
that. It accepts only ``http`` and ``https`` URLs whose host resolves, every address of it,
to a globally routable unicast address; loopback, private, shared (CGNAT), link-local,
multicast, reserved and unspecified addresses are refused, and IPv4 addresses written as
IPv6 (``::ffff:127.0.0.1``, NAT64 ``64:ff9b::/96``) are judged as the IPv4 address they
carry. A caller that follows redirects must call it again for every hop.

``allow`` loosens the guard for a configuration that means it: ``True`` lets every
address through, a list of networks (``["10.1.0.0/16"]``) exempts just those.

DNS rebinding is not prevented: the host is resolved here and again by the HTTP client
when it connects, so a hostile DNS server that answers a public address first and a
private one a moment later gets through. Pinning the checked address would mean
connecting by IP while keeping the name for TLS (SNI, certificate checks), which httpx
does not offer; the guard stops the common case, a URL or redirect naming an internal
host, and the tool is not a sandbox.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from urllib.parse import urlsplit

from dsh.core.errors import InvalidArgumentError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

SCHEMES = ("http", "https")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class BlockedURLError(InvalidArgumentError):
    """The URL may not be fetched; the message is written for the model."""


class NonPublicAddressError(BlockedURLError):
    """The URL's host is (or resolves to) an address the guard does not allow."""


def parse_networks(values: Sequence[str]) -> tuple[Network, ...]:
    """CIDR strings (``10.0.0.0/8``, a bare address for one host) as networks.

    Raises ValueError naming the first one that is not a network.
    """
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value, strict=False))
        except ValueError:
            raise ValueError(f"not an IP network: {value!r}") from None
    return tuple(networks)


def unwrap(address: Address) -> Address:
    """The IPv4 address an IPv6 address carries (mapped or NAT64), else ``address``."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def why_blocked(address: Address) -> str | None:
    """What kind of non-public address ``address`` is, or None when it is public."""
    address = unwrap(address)
    for kind, flag in (("unspecified", address.is_unspecified),
                       ("loopback", address.is_loopback),
                       ("link-local", address.is_link_local),
                       ("multicast", address.is_multicast),
                       ("reserved", address.is_reserved),
                       ("private", address.is_private)):
        if flag:
            return kind
    if not address.is_global:  # e.g. shared address space 100.64.0.0/10
        return "non-public"
    return None


def allowed(address: Address, allow: bool | Sequence[Network]) -> bool:
    """Whether ``address`` may be reached under the ``allow`` setting."""
    if allow is True or why_blocked(address) is None:
        return True
    if allow is False:
        return False
    plain = unwrap(address)
    return any(plain in network or address in network for network in allow)


async def check_url(url: str, allow: bool | Sequence[Network]) -> None:
    """Refuse ``url`` (raise :class:`BlockedURLError`) unless its scheme is http(s) and every
    address its host resolves to is allowed. Resolution failures are refusals too: the
    fetch could not succeed, and the message says why."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in SCHEMES:
        raise BlockedURLError(f"only http and https URLs can be fetched, not {url!r}")
    host = parts.hostname
    if not host:
        raise BlockedURLError(f"the URL has no host: {url!r}")
    try:
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    except ValueError:
        raise BlockedURLError(f"the URL has an invalid port: {url!r}") from None
    for address in await resolve(host, port):
        if not allowed(address, allow):
            shown = host if str(address) == host else f"{host} ({address})"
            raise NonPublicAddressError(
                f"refused to fetch {url}: {shown} is a {why_blocked(address)} address, and "
                "only public addresses may be fetched")


async def resolve(host: str, port: int) -> list[Address]:
    """Every address ``host`` resolves to (an IP literal is its own answer)."""
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise BlockedURLError(f"cannot resolve host {host!r}: {exc}") from None
    addresses = []
    for *_, sockaddr in infos:
        # an IPv6 scope ("fe80::1%eth0") is not part of the address
        addresses.append(ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0]))
    if not addresses:
        raise BlockedURLError(f"cannot resolve host {host!r}: no addresses")
    return addresses
