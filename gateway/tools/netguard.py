"""Where ``web_fetch`` may connect: public addresses only, unless the operator opts out.

A chat user can ask the agent to fetch any URL, so without a guard the agent could read the
gateway's own API (no token on loopback), any internal service or a cloud metadata address.
The guard refuses loopback, link-local, private, CGNAT, multicast, unspecified and other
reserved addresses **after** DNS resolution, in the resolver aiohttp connects through, so
the address that was checked is the address connected to (no window for DNS rebinding).
A URL whose host is an IP literal never reaches a resolver, so it is checked before each
request; redirects are followed one hop at a time and every hop is checked again.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Ranges ``is_global`` lets through that are still not the public internet.
_EXTRA_BLOCKED: tuple[Network, ...] = (
    ipaddress.ip_network("100.64.0.0/10"),  # CGNAT (carrier-grade NAT, RFC 6598)
    ipaddress.ip_network("64:ff9b:1::/48"),  # local-use NAT64 (RFC 8215)
)


def blocked_reason(address: IPAddress) -> str | None:
    """Why ``address`` is refused (``"loopback"``, ``"private"``, …), or None if public."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return blocked_reason(address.ipv4_mapped)
    for name in ("loopback", "link_local", "multicast", "unspecified", "private", "reserved"):
        if getattr(address, f"is_{name}"):
            return name.replace("_", "-")
    if any(address in network for network in _EXTRA_BLOCKED):
        return "carrier-grade NAT" if address.version == 4 else "reserved"
    if not address.is_global:
        return "not globally reachable"
    return None


class NetworkGuard:
    """Checks addresses; ``blocked`` overrides the default ranges (tests use their own)."""

    def __init__(self, *, allow_private: bool, blocked: Sequence[Network] | None = None) -> None:
        self.allow_private = allow_private
        self._blocked = tuple(blocked) if blocked is not None else None

    def reason(self, address: IPAddress) -> str | None:
        """Why ``address`` may not be reached, or None."""
        if self.allow_private:
            return None
        if self._blocked is not None:
            return "blocked" if any(address in net for net in self._blocked) else None
        return blocked_reason(address)

    def check_literal(self, host: str) -> None:
        """Refuse ``host`` now when it is a blocked IP literal (names go through the resolver)."""
        try:
            address = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            return
        why = self.reason(address)
        if why is not None:
            raise BlockedAddressError(host, str(address), why)


class BlockedAddressError(OSError):
    """The host is, or resolves only to, an address ``web_fetch`` may not reach."""

    def __init__(self, host: str, address: str, reason: str) -> None:
        super().__init__(
            f"{host} is {address} ({reason}); web_fetch reaches public addresses only "
            "(agent.tools.webFetch.allowPrivateNetworks opts out)"
        )
        self.host = host
        self.address = address
        self.reason = reason


class GuardedResolver(AbstractResolver):
    """Resolves through ``inner`` and keeps only the addresses the guard allows."""

    def __init__(self, guard: NetworkGuard, inner: AbstractResolver | None = None) -> None:
        self._guard = guard
        self._inner = inner or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        allowed: list[ResolveResult] = []
        refused: tuple[str, str] | None = None
        for result in results:
            address = ipaddress.ip_address(result["host"])
            why = self._guard.reason(address)
            if why is None:
                allowed.append(result)
            elif refused is None:
                refused = (str(address), why)
        if not allowed and refused is not None:
            raise BlockedAddressError(host, *refused)
        return allowed

    async def close(self) -> None:
        await self._inner.close()
