"""Addresses and cloud ids in redaction: the one pattern that finds them in a text, and their keyed pseudonyms.

:func:`addr_regex` is one pass, one pattern: at each place the first alternative that matches wins, so an address is
mapped once. :class:`AddressMap` maps an address by a keyed prefix-preserving permutation (two addresses that share
their first N bits still share them; an IP stays an IP of the same family; a network address stays one), and MACs,
UUIDs, AWS account ids and 32-hex-digit ids by keyed pseudonyms of the same shape. kpdiag/bundle/redact.py's
:class:`~kpdiag.bundle.redact.Redactor` is an AddressMap that also knows names.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import secrets

from kpdiag.bundle.scrub import REDACTED
from kpdiag.parse.addr import v6_text

# ---------------------------------------------------------------- addresses and cloud ids
# One pass, one pattern: at each place the first alternative that matches wins, so an address is mapped once
# (``::ffff:10.0.0.1`` is an IPv6 address, its IPv4 tail is not mapped a second time). ``run`` is any maximal run of
# hex digits, colons and dots: the code decides what it is (IPv6 in any spelling, IPv4 even with leading zeros or a
# tcpdump port, a MAC, 32 hex digits), trying the spellings a sentence or a tool wraps it in.
_HX = "0-9A-Fa-f"
_AWS_ID_PREFIX = (
    "i|vol|eni|sg|subnet|vpc|ami|snap|rtb|igw|nat|eipalloc|eipassoc|acl|lt|tgw|tgw-attach|vpce|pcx|fs|r|elb|sir|"
    "dopt|vgw|cgw|vpn|eigw|lb|asg|fsap|efs|ebs"
)
_AZ_SEGMENTS = (
    "resourceGroups|virtualMachineScaleSets|virtualMachines|networkInterfaces|virtualNetworks|subnets|"
    "loadBalancers|publicIPAddresses|managedClusters|storageAccounts|vaults|disks|networkSecurityGroups|"
    "routeTables|applicationGateways|privateEndpoints|userAssignedIdentities|registries|agentPools|snapshots|images|"
    "instances|clusters|nodePools|instanceGroups|instanceGroupManagers|networks|subnetworks|serviceAccounts"
)


# each alternative with what a piece must contain for it to be tried (a substring or a cheap search): a piece is
# matched by the alternatives it can hold only, which keeps ordinary bundles fast
def _has(*subs):
    return lambda t: any(x in t for x in subs)


def _search(pattern):
    rx = re.compile(pattern)
    return lambda t: rx.search(t) is not None


_ADDR_ALTS = [
    (
        r'(?P<nftp>"prefix":\s{0,8}\{\s{0,8}"addr":\s{0,8}")(?P<nftaddr>[0-9A-Fa-f:.]{1,45})(?P<nftmid>",\s{0,8}"len":\s{0,8})(?P<nftlen>\d{1,3})',
        _has('"prefix"'),
    ),
    (r"(?P<arpa6>(?<![0-9A-Za-z.])(?:[0-9A-Fa-f]\.){1,32})(?=(?i:ip6\.arpa)\b)", _has("arpa", "ARPA", "Arpa")),
    (r"(?P<arpa4>(?<![0-9A-Za-z.])(?:\d{1,3}\.){1,4})(?=(?i:in-addr\.arpa)\b)", _has("arpa", "ARPA", "Arpa")),
    (
        r"(?P<guid>(?<![0-9A-Za-z-])[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}(?![0-9A-Za-z-]))",
        _search(r"-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-"),
    ),
    (
        r"(?P<macd>(?<![0-9A-Za-z-])[0-9A-Fa-f]{2}(?:-[0-9A-Fa-f]{2}){5,19}(?![0-9A-Za-z-]))",
        _search(r"-[0-9A-Fa-f]{2}-[0-9A-Fa-f]{2}-[0-9A-Fa-f]{2}-"),
    ),
    (
        r"(?P<cisco>(?<![0-9A-Za-z.])[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}(?![0-9A-Za-z.]))",
        _search(r"\.[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}"),
    ),
    (
        r"(?P<dash4>(?<![0-9])(?<!\d-)\d{1,3}-\d{1,3}-\d{1,3}-\d{1,3}(?![0-9])(?!-\d))",
        _search(r"-\d{1,3}-\d{1,3}-\d"),
    ),
    (r"(?P<url6>(?<![0-9A-Za-z%:])[0-9A-Fa-f]{0,4}(?:%3[Aa][0-9A-Fa-f]{0,4}){2,8}(?![0-9A-Za-z]))", _has("%3A", "%3a")),
    (
        r"(?P<img>(?<![/\w.@-])(?:[a-z0-9-]{1,63}\.){1,10}[a-z][a-z0-9-]{0,62}(?::\d{1,5})?/[a-z0-9._/-]{1,255}"
        r"(?::[A-Za-z0-9_.-]{1,128}(?:@sha256:[0-9a-f]{64})?|@sha256:[0-9a-f]{64}))",
        _search(r"\.[a-z][a-z0-9-]{0,62}(?::\d{1,5})?/[a-z0-9._/-]{1,255}[:@]"),
    ),
    (
        r"(?P<awsid>(?<![A-Za-z0-9-])(?:" + _AWS_ID_PREFIX + r")-[0-9a-f]{8,17}(?![A-Za-z0-9-]))",
        _search(r"-[0-9a-f]{8}"),
    ),
    (
        r"(?P<arn>(?<![A-Za-z0-9])arn:aws[a-z-]{0,16}:[a-z0-9-]{0,32}:[a-z0-9-]{0,32}:)(?P<arnacct>\d{12})?:(?P<arnres>[^\s\"',;)\]}]{1,512})",
        _has("arn:aws"),
    ),
    (
        r"(?P<email>(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64})@(?=[A-Za-z0-9-]{1,63}\.[A-Za-z0-9.-]{0,200}[A-Za-z])",
        _has("@"),
    ),
    (r"(?P<ecr>(?<![0-9A-Za-z])\d{12})(?=\.dkr\.ecr)", _has(".dkr.ecr")),
    (
        r"(?P<acctk>(?i:account|owner)[-_ A-Za-z]{0,12}\\{0,8}[\"']?\s{0,4}[:= ]\s{0,4}\\{0,8}[\"']?)(?P<acct>\d{12})(?!\d)",
        _search(r"\d{12}"),
    ),
    (
        r"(?P<gce>gce://)(?P<gceproj>[^/\s\"']{1,64})/(?P<gcezone>[^/\s\"']{1,64})/(?P<gcename>[^/\s\"',;]{1,128})",
        _has("gce://"),
    ),
    (
        r"(?P<gcp>(?<![A-Za-z0-9_.-])(?:projects/|(?:[a-z]{2,4}\.)?gcr\.io/|[a-z0-9-]{2,40}-docker\.pkg\.dev/))(?P<gproj>[a-z][a-z0-9-]{4,28}[a-z0-9])(?![A-Za-z0-9_-])",
        _has("projects/", "gcr.io/", "docker.pkg.dev/"),
    ),
    (
        r"(?P<az>/(?i:" + _AZ_SEGMENTS + r")/)(?P<azname>[^/\s\"',;]{1,128})",
        _search(r"(?i)/(?:" + _AZ_SEGMENTS + r")/"),
    ),
    (
        r"(?P<run>(?<![0-9A-Fa-f:.])(?=[:.]?[0-9A-Fa-f]{0,4}[:.][0-9A-Fa-f:.]|[0-9A-Fa-f]{32})[0-9A-Fa-f:.]++)(?P<zone>%[A-Za-z0-9_.-]{1,32})?(?:/(?P<plen>\d{1,3})(?!\d))?",
        None,
    ),
]
_ADDR_CACHE: dict[tuple, re.Pattern] = {}
TOP_GROUPS = [m.group(1) for p, _ in _ADDR_ALTS if (m := re.match(r"\(\?P<(\w+)>", p))]  # each names its group


def addr_regex(text: str) -> re.Pattern:
    """The address pattern for ``text``: the alternatives it can hold, in their order (the first to match wins)."""
    key = tuple(t is None or t(text) for _, t in _ADDR_ALTS)
    rx = _ADDR_CACHE.get(key)
    if rx is None:
        rx = _ADDR_CACHE[key] = re.compile("|".join(p for (p, _), on in zip(_ADDR_ALTS, key) if on))
    return rx


CACHE_MAX = 200_000  # entries of a redaction cache (cleared when full: memory stays bounded)
_RUN_MAX = 64  # a longer run of hex digits, colons and dots is no address (at most 45 characters)
_MAC_COLON = re.compile(r"[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5,19}")
_HEX32 = re.compile(r"[0-9A-Fa-f]{32}")
_CISCO = re.compile(r"[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}")
V4_IN = re.compile(r"(?<![0-9])\d{1,3}(?:\.\d{1,3}){3}(?![0-9])")


class AddressMap:
    """Keyed pseudonyms of addresses and ids, the same for the same salt."""

    def __init__(self, salt: str | None = None):
        self.salt = salt or secrets.token_hex(8)
        self._key = hashlib.sha256(f"kpdiag-redact:{self.salt}".encode()).digest()
        self.ips: dict[str, str] = {}  # the addresses replaced: original → pseudonym
        self._ipcache: dict[str, str] = {}
        self._runcache: dict[str, str] = {}  # a run of hex digits, colons and dots → its redaction
        self.macs: dict[str, str] = {}
        self._bits: dict[tuple, int] = {}
        ordinary = [o for o in range(1, 224) if o not in (127, 169)]
        shuffled = sorted(ordinary, key=lambda o: self._h(f"octet:{o}"))
        self._octet = dict(zip(ordinary, shuffled))

    def _h(self, text: str, n: int = 8) -> str:
        return hmac.new(self._key, text.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()[:n]

    # ------------------------------------------------------------ names
    def _bit(self, tag: str, i: int, prefix: int) -> int:
        key = (tag, i, prefix)
        b = self._bits.get(key)
        if b is None:
            b = hmac.new(self._key, f"{tag}:{i}:{prefix}".encode(), hashlib.sha256).digest()[0] & 1
            self._bits[key] = b
        return b

    def _permute(self, value: int, nbits: int, keep: int, tag: str) -> int:
        """Prefix-preserving: bit i flips by a keyed function of the bits before it; the first ``keep`` bits stay."""
        out = value
        for i in range(keep, nbits):
            if self._bit(tag, i, value >> (nbits - i)):
                out ^= 1 << (nbits - 1 - i)
        return out

    def _v4(self, a: int) -> tuple[int, int]:
        """(mapped address, bits kept as they are)."""
        o = a >> 24
        if o in (0, 127) or o >= 224:
            return a, 32
        low = self._permute(a & 0xFFFFFF, 24, 0, f"4:{o}")
        return ((self._octet.get(o, o) << 24) | low), (8 if o == 169 else 0)

    def _v6(self, a: int) -> tuple[int, int]:
        if a in (0, 1) or a >> 120 == 0xFF:  # ::, ::1, multicast
            return a, 128
        if (
            a >> 32 in (0, 0xFFFF) or a >> 32 == 0x0064FF9B << 64
        ):  # IPv4-compatible, IPv4-mapped, NAT64: the IPv4 inside
            v4, keep = self._v4(a & 0xFFFFFFFF)
            return (a & ~0xFFFFFFFF) | v4, 96 + keep
        for prefix_len, prefix in ((10, 0x3FA), (7, 0x7E), (3, 0x1)):  # link-local, ULA, global unicast
            if a >> (128 - prefix_len) == prefix:
                keep = 64 if prefix_len == 10 else prefix_len
                return self._permute(a, 128, keep, f"6:{prefix}"), keep
        return self._permute(a, 128, 16, "6:other"), 16

    def ip(self, value: str, prefixlen: int | None = None) -> str:
        """An IP address (maybe with a zone), or a network when ``prefixlen`` is given and the host bits are zero."""
        zone = ""
        if "%" in value:
            value, zone = value.split("%", 1)
            zone = "%" + zone
        key = value if prefixlen is None else f"{value}/{prefixlen}"
        if key in self._ipcache:
            return self._ipcache[key] + zone
        try:
            addr = ipaddress.ip_address(value)
        except ValueError:
            return value + zone
        nbits = addr.max_prefixlen
        mapped, kept = (self._v4 if addr.version == 4 else self._v6)(int(addr))
        if prefixlen is not None and prefixlen <= nbits:
            hostmask = (1 << (nbits - prefixlen)) - 1
            if (
                int(addr) & hostmask == 0
            ):  # a network address: stays one (or stays as it is when shorter than what is kept)
                mapped = int(addr) if prefixlen < kept else mapped & ~hostmask
        if addr.version == 4:
            text = str(ipaddress.IPv4Address(mapped))
        elif ":" in value and value.count(":") == 7 and "::" not in value and len(value) == 39:
            text = v6_text(mapped, exploded=True)
        elif "." in value and mapped >> 32 == 0xFFFF:  # written dotted, stays dotted (hex stays hex: v6_text)
            text = "::ffff:" + str(ipaddress.IPv4Address(mapped & 0xFFFFFFFF))
        else:
            text = v6_text(mapped)
        if value.isupper() if any(c.isalpha() for c in value) else False:
            text = text.upper()
        self._ipcache[key] = text
        if text != value:
            self.ips[key] = text
        return text + zone

    def mac(self, value: str) -> str:
        """A hardware address of any length (Ethernet 6 bytes, EUI-64 8, InfiniBand 20) with ``:`` or ``-`` between
        bytes, or Cisco's dotted ``aabb.ccdd.eeff``: a keyed pseudonym of the same length and spelling."""
        digits = re.sub(r"[^0-9A-Fa-f]", "", value).lower()
        raw = bytes.fromhex(digits)
        if raw == b"\0" * len(raw) or raw == b"\xff" * len(raw):
            return value
        if digits not in self.macs:
            h = b""
            i = 0
            while len(h) < len(raw):
                h += hmac.new(self._key, f"mac:{i}:{digits}".encode(), hashlib.sha256).digest()
                i += 1
            h = h[: len(raw)]
            if len(raw) in (6, 8):
                h = bytes([(h[0] & 0xFC) | 0x02]) + h[1:]  # locally administered, unicast
            self.macs[digits] = h.hex()
        out = self.macs[digits]
        if "." in value:
            text = ".".join(out[i : i + 4] for i in range(0, len(out), 4))
        else:
            sep = "-" if "-" in value else ":"
            text = sep.join(out[i : i + 2] for i in range(0, len(out), 2))
        return text.upper() if value.isupper() else text

    def uid(self, value: str) -> str:
        """A UUID/GUID (object uids, Azure subscriptions and tenants, boot ids): a keyed UUID, the same everywhere."""
        h = self._h("uid:" + value.lower(), 32)
        out = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        return out.upper() if value.isupper() else out

    def account(self, value: str) -> str:
        """A 12-digit AWS account id: 12 keyed digits."""
        return str(int(self._h("account:" + value, 16), 16) % 10**12).zfill(12)

    def _hex32(self, value: str) -> str:
        """32 hex digits: an IPv6 address as /proc/net/if_inet6 and ipv6_route write it (mapped like any address),
        or a machine id or digest (then a keyed pseudonym: no prefix is kept)."""
        a = int(value, 16)
        mapped, kept = self._v6(a)
        if kept >= 128 and not (a < 2 or (a >> 120 == 0xFF and a & ((1 << 112) - 1) < 1 << 16)):
            mapped = int(self._h("hex32:" + value.lower(), 32), 16)
        out = f"{mapped:032x}"
        return out.upper() if value.isupper() else out

    def _v4_text(self, parts: list[str], plen: str | None = None) -> str:
        """Four decimal octets as written (leading zeros kept as zero padding): mapped like any IPv4 address."""
        canon = ".".join(str(int(p)) for p in parts)
        mapped = self.ip(canon, int(plen) if plen else None).split(".")
        return ".".join(o.zfill(len(p)) if len(p) > 1 and p.startswith("0") else o for o, p in zip(mapped, parts))

    def _v4_run(self, run: str, plen: str | None) -> str | None:
        """Dotted decimal: 4 octets (an address), 5 (tcpdump's host.port), 6 or more (each four in turn)."""
        parts = run.split(".")
        if not all(p.isdigit() for p in parts) or len(parts) < 4:
            return None
        if any(int(p) > 255 or len(p) > 3 for p in parts[:4]):
            return None
        if len(parts) == 4:
            return self._v4_text(parts, plen) + (f"/{plen}" if plen else "")
        out = [self._v4_text(parts[:4])]
        rest = parts[4:]
        while len(rest) >= 4 and all(len(p) <= 3 and int(p) <= 255 for p in rest[:4]):
            out.append(self._v4_text(rest[:4]))
            rest = rest[4:]
        return ".".join(out + rest) + (f"/{plen}" if plen else "")

    def _v6_text(self, raw: str, zone: str, plen: str | None) -> str | None:
        try:
            ipaddress.IPv6Address(raw)
        except ValueError:
            return None
        return self.ip(raw + zone, int(plen) if plen and int(plen) <= 128 else None) + (f"/{plen}" if plen else "")

    def _run(self, m: re.Match) -> str:
        whole = m.group(0)
        out = self._runcache.get(whole)
        if out is None:
            if len(self._runcache) > CACHE_MAX:
                self._runcache.clear()
            out = self._runcache[whole] = self._run_uncached(m)
        return out

    def _run_uncached(self, m: re.Match) -> str:
        whole, run = m.group(0), m.group("run")
        zone, plen = m.group("zone") or "", m.group("plen")
        rest = whole[len(run) :]
        if len(run) > _RUN_MAX:
            return REDACTED + rest if run.count(":") + run.count(".") >= 4 else whole
        # what wraps an address in a sentence or a tool's output: "addr:fd00::1", "x.10.0.0.1", "fd00::1:" at the end
        lead = ""
        while run[:1] in (":", ".") and not run.startswith("::"):
            lead, run = lead + run[0], run[1:]
        trail = ""
        while run[-1:] in (":", ".") and not run.endswith("::") and not (zone or plen):
            run, trail = run[:-1], run[-1] + trail
        if not run:
            return whole
        if (_MAC_COLON.fullmatch(run) or _CISCO.fullmatch(run)) and not (zone or plen):
            return lead + self.mac(run) + trail
        if ":" in run:
            out = self._v6_text(run, zone, plen)
            if out is None and "." in run:  # tcpdump's fd00::1.53: the address, then the port
                addr, _, port = run.rpartition(".")
                if port.isdigit() and (v6 := self._v6_text(addr, "", None)) is not None:
                    return lead + v6 + "." + port + trail + rest
            if out is None and ":" in run:  # host:port, a timestamp …: any IPv4 inside it still mapped
                return lead + V4_IN.sub(lambda v: self._v4_run(v.group(0), None) or v.group(0), run) + trail + rest
            return whole if out is None else lead + out + trail
        if "." in run:
            out = self._v4_run(run, plen)
            if out is None:  # glued to hex letters (a10.0.0.1, 10.0.0.1ab): the address inside
                inner = V4_IN.sub(lambda v: self._v4_run(v.group(0), None) or v.group(0), run)
                return lead + inner + trail + rest
            return lead + out + trail + (zone if zone else "")
        if _HEX32.fullmatch(run):
            return lead + self._hex32(run) + trail + rest
        return whole

    def _arpa(self, nibbles: str, v6: bool) -> str:
        """A reverse-DNS name's address part (ip6.arpa nibbles, in-addr.arpa octets), mapped as the network it
        names: the same prefix of the same mapped address, written the same way."""
        labels = nibbles.rstrip(".").split(".")
        if v6:
            n = len(labels)
            value = int("".join(reversed(labels)).ljust(32, "0"), 16)
            mapped = self.ip(v6_text(value), 4 * n if n < 32 else None)
            hexs = f"{int(ipaddress.IPv6Address(mapped)):032x}"[:n]
            if nibbles.isupper():
                hexs = hexs.upper()
            return ".".join(reversed(hexs)) + "."
        if any(int(o) > 255 for o in labels):
            return nibbles
        n = len(labels)
        octets = list(reversed(labels)) + ["0"] * (4 - n)
        parts = self.ip(".".join(str(int(o)) for o in octets), 8 * n if n < 4 else None).split(".")[:n]
        return ".".join(reversed(parts)) + "."
