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
    return str(ipaddress.IPv6Address(value))


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
