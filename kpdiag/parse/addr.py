"""Fast IP address / prefix parsing into integers (IPv4 fast path, IPv6 via ipaddress)."""

from __future__ import annotations

import ipaddress
from typing import NamedTuple


class Prefix(NamedTuple):
    """An address prefix as integers: ``addr & mask == net`` tests membership."""

    net: int
    mask: int
    version: int
    text: str

    def contains(self, addr: int, version: int = 4) -> bool:
        return version == self.version and (addr & self.mask) == self.net

    @property
    def is_host(self) -> bool:
        return self.mask == (0xFFFFFFFF if self.version == 4 else (1 << 128) - 1)


def ip4_to_int(text: str) -> int:
    """Dotted quad to int; raises ValueError on anything else."""
    parts = text.split(".")
    if len(parts) != 4:
        raise ValueError(f"not an IPv4 address: {text!r}")
    value = 0
    for part in parts:
        if not (part.isascii() and part.isdigit()) or len(part) > 3:
            raise ValueError(f"not an IPv4 address: {text!r}")
        octet = int(part)
        if octet > 255:
            raise ValueError(f"not an IPv4 address: {text!r}")
        value = (value << 8) | octet
    return value


def int_to_ip(value: int, version: int = 4) -> str:
    if version == 4:
        return f"{value >> 24 & 255}.{value >> 16 & 255}.{value >> 8 & 255}.{value & 255}"
    return v6_text(value)


def v6_text(value: int, exploded: bool = False) -> str:
    """An IPv6 address as text (RFC 5952, or all eight groups in full), the same on every Python: an IPv4-mapped
    address (::ffff:0:0/96) keeps its last 32 bits in hex, ``::ffff:a00:1`` — Python 3.13 writes it ``::ffff:10.0.0.1``
    where 3.12 and older write hex."""
    n = int(value)
    if n >> 32 == 0xFFFF:
        hi, lo = n >> 16 & 0xFFFF, n & 0xFFFF
        return f"0000:0000:0000:0000:0000:ffff:{hi:04x}:{lo:04x}" if exploded else f"::ffff:{hi:x}:{lo:x}"
    address = ipaddress.IPv6Address(n)
    return address.exploded if exploded else str(address)


def parse_ip(text: str) -> tuple[int, int]:
    """Return (int, version) for an IPv4 or IPv6 address."""
    if ":" in text:
        return int(ipaddress.IPv6Address(text)), 6
    return ip4_to_int(text), 4


def parse_prefix(text: str) -> Prefix:
    """Parse ``a.b.c.d``, ``a.b.c.d/nn``, ``a.b.c.d/255.255.0.0`` or IPv6 forms (host bits dropped)."""
    addr_text, _, plen_text = text.partition("/")
    if ":" in addr_text:
        net = ipaddress.IPv6Network(text, strict=False)
        return Prefix(int(net.network_address), int(net.netmask), 6, text)
    addr = ip4_to_int(addr_text)
    if not plen_text:
        mask = 0xFFFFFFFF
    elif plen_text.isascii() and plen_text.isdigit():
        plen = int(plen_text)
        if plen > 32:
            raise ValueError(f"bad prefix length in {text!r}")
        mask = (0xFFFFFFFF << (32 - plen)) & 0xFFFFFFFF
    else:
        mask = ip4_to_int(plen_text)
    return Prefix(addr & mask, mask, 4, text)


def hostport(ip: str, port) -> str:
    """An address with its port as kube-proxy, ipvsadm and the kernel write it: ip:port, [ipv6]:port; the
    address alone without a port."""
    if port is None:
        return ip
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
