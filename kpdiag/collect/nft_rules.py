"""nf_tables rules decoded from netlink into the JSON ``nft -j list chain`` prints (kpdiag/collect/nft_netlink.py reads
them): each expression kube-proxy's nftables proxier writes, its registers followed from load to match; what is not
known exactly raises :class:`kpdiag.collect.nft_netlink.Undecodable`."""

from __future__ import annotations

import struct

from kpdiag.collect.nft_netlink import (
    CT_STATES,
    NAT_FLAGS,
    RTN_TYPES,
    RULE_COMPAT,
    RULE_EXPRESSIONS,
    RULE_HANDLE,
    RULE_USERDATA,
    SetInfo,
    Undecodable,
    _be32,
    _be64,
    _ip_text,
    _str,
    _value,
    attr_list,
    attrs,
    typed_value,
    udata,
    verdict_json,
)


def _reg32(r: int) -> int:
    """A register number as the index of its first 32-bit register (NFT_REG_1…4 are 16 bytes wide)."""
    if 1 <= r <= 4:
        return (r - 1) * 4
    if 8 <= r <= 23:
        return r - 8
    raise Undecodable(f"register {r}")


# payload fields kube-proxy matches: (base, offset, length) → (protocol, field, value kind); per family
NETWORK_FIELDS = {
    "ip": {12: ("ip", "saddr", 4), 16: ("ip", "daddr", 4)},
    "ip6": {8: ("ip6", "saddr", 16), 24: ("ip6", "daddr", 16)},
}
TRANSPORT_FIELDS = {0: "sport", 2: "dport"}
META_KEYS = {3: "mark", 16: "l4proto", 15: "nfproto"}
CT_KEYS = {0: "state"}


class _Reg:
    """What a register holds: the JSON of the expression that loaded it, and how to print values compared with it."""

    __slots__ = ("expr", "kind", "length", "prefix_of", "mask")

    def __init__(self, expr, kind, length, prefix_of=None, mask=None):
        self.expr, self.kind, self.length, self.prefix_of, self.mask = expr, kind, length, prefix_of, mask


class RuleDecoder:
    """Decodes one table's rules; ``sets(name)`` gives a named or anonymous set's (SetInfo, elements)."""

    def __init__(self, family: str, table: str, sets):
        if family not in NETWORK_FIELDS:
            raise Undecodable(f"family {family}")
        self.family, self.table, self.sets = family, table, sets

    def rule(self, chain: str, a: dict[int, bytes]) -> tuple[dict, list[str], list[str]]:
        """(the rule's JSON, chains it jumps/goes to, named sets it uses)."""
        if RULE_COMPAT in a:
            raise Undecodable("a rule with xtables compatibility data")
        exprs = [self._expr_attrs(e) for _, e in attr_list(a.get(RULE_EXPRESSIONS, b""))]
        self.regs: dict[int, _Reg] = {}
        self.out: list[dict] = []
        self.targets: list[str] = []
        self.used: list[str] = []
        self.dep: int | None = None  # the index in out of a "meta l4proto == X" a transport payload may absorb
        for name, data in exprs:
            fn = self.DECODERS.get(name)
            if fn is None:
                raise Undecodable(f"expression {name!r}")
            fn(self, attrs(data))
        body: dict = {"family": self.family, "table": self.table, "chain": chain}
        body["handle"] = _be64(a[RULE_HANDLE]) if RULE_HANDLE in a else None
        ud = udata(a.get(RULE_USERDATA, b""))
        if 0 in ud:
            body["comment"] = _str(ud[0])
        body["expr"] = self.out
        return {"rule": body}, self.targets, self.used

    @staticmethod
    def _expr_attrs(e: bytes) -> tuple[str, bytes]:
        a = attrs(e)
        return _str(a.get(1, b"")), a.get(2, b"")

    def _load(self, dreg: bytes, reg: _Reg) -> None:
        i = _reg32(_be32(dreg))
        for k in range(i, i + max(1, (reg.length + 3) // 4)):
            self.regs.pop(k, None)
        self.regs[i] = reg

    def _get(self, sreg: bytes) -> _Reg:
        r = self.regs.get(_reg32(_be32(sreg)))
        if r is None:
            raise Undecodable("a register read before it is loaded")
        return r

    # loads ------------------------------------------------------------------------------------------------
    def _x_payload(self, a):
        if 5 in a:
            raise Undecodable("payload set")
        base, off, length = _be32(a[2]), _be32(a[3]), _be32(a[4])
        if base == 1:
            f = NETWORK_FIELDS[self.family].get(off)
            if f is None or length > f[2]:
                raise Undecodable(f"network header payload @{off}/{length}")
            expr = {"payload": {"protocol": f[0], "field": f[1]}}
            kind = "ip4" if f[2] == 4 else "ip6"
            self._load(a[1], _Reg(expr, kind, length, prefix_of=f[2] if length < f[2] else None))
        elif base == 2:
            if off not in TRANSPORT_FIELDS or length != 2:
                raise Undecodable(f"transport header payload @{off}/{length}")
            proto = "th"
            if self.dep is not None:  # nft prints "tcp dport" and drops the "meta l4proto tcp" it depends on
                proto = self.out.pop(self.dep)["match"]["right"]
                self.dep = None
            self._load(a[1], _Reg({"payload": {"protocol": proto, "field": TRANSPORT_FIELDS[off]}}, "port", 2))
        else:
            raise Undecodable(f"payload base {base}")

    def _x_meta(self, a):
        key = _be32(a[2])
        if key not in META_KEYS:
            raise Undecodable(f"meta key {key}")
        if 3 in a:  # meta set
            if key != 3:
                raise Undecodable(f"meta set of key {key}")
            src = self._get(a[3])
            self.out.append({"mangle": {"key": {"meta": {"key": "mark"}}, "value": src.expr}})
            self.dep = None
            return
        kind = {3: "hostint", 16: "proto", 15: "nfproto"}[key]
        self._load(a[1], _Reg({"meta": {"key": META_KEYS[key]}}, kind, 4 if key == 3 else 1))

    def _x_ct(self, a):
        key = _be32(a[2])
        if key not in CT_KEYS or 3 in a or 4 in a:
            raise Undecodable(f"ct key {key}")
        self._load(a[1], _Reg({"ct": {"key": CT_KEYS[key]}}, "ctstate", 4))

    def _x_fib(self, a):
        result, flags = _be32(a[2]), _be32(a[3])
        if result != 3 or flags not in (1, 2):
            raise Undecodable(f"fib result {result} flags {flags}")
        expr = {"fib": {"result": "type", "flags": ["saddr" if flags == 1 else "daddr"]}}
        self._load(a[1], _Reg(expr, "rtn", 4))

    def _x_numgen(self, a):
        if _be32(a.get(3, b"\0\0\0\1")) != 1:
            raise Undecodable("numgen that is not random")
        expr = {"numgen": {"mode": "random", "mod": _be32(a[2]), "offset": _be32(a[4]) if 4 in a else 0}}
        self._load(a[1], _Reg(expr, "int", 4))

    def _x_immediate(self, a):
        dreg = _be32(a[1])
        if dreg == 0:
            self.out.append(verdict_json(a[2]))
            v = self.out[-1]
            for k in ("jump", "goto"):
                if k in v:
                    self.targets.append(v[k]["target"])
            self.dep = None
            return
        self._load(a[1], _Reg(None, "raw", len(_value(a[2])), mask=_value(a[2])))

    def _x_bitwise(self, a):
        if 6 in a and _be32(a[6]) != 0:
            raise Undecodable("bitwise shift")
        src = self._get(a[1])
        length = _be32(a[3])
        mask, xor = _value(a[4]), _value(a[5])
        m, x = int.from_bytes(mask, "big"), int.from_bytes(xor, "big")
        full = (1 << (8 * length)) - 1
        if src.kind in ("ip4", "ip6") and x == 0 and src.prefix_of is None:
            bits = bin(m).count("1")
            if m != (full >> (8 * length - bits)) << (8 * length - bits):
                raise Undecodable("an address mask that is not a prefix")
            reg = _Reg(src.expr, src.kind, length, prefix_of=length, mask=bits)
        elif src.kind == "hostint" and src.expr == {"meta": {"key": "mark"}}:
            mi, xi = struct.unpack("=I", mask)[0], struct.unpack("=I", xor)[0]
            if xi == 0:
                expr = {"&": [src.expr, mi]}
            elif mi == 0xFFFFFFFF:
                expr = {"^": [src.expr, xi]}
            elif mi & xi == 0 and mi | xi == 0xFFFFFFFF:
                expr = {"|": [src.expr, xi]}
            else:
                raise Undecodable("a mark mask and xor nft prints otherwise")
            reg = _Reg(expr, "hostint", 4)
        elif src.kind == "ctstate" and x == 0:
            reg = _Reg(src.expr, "ctflags", 4, mask=struct.unpack("=I", mask)[0])
        else:
            raise Undecodable("bitwise on this value")
        self._load(a[2], reg)

    # matches ----------------------------------------------------------------------------------------------
    def _x_cmp(self, a):
        src = self._get(a[1])
        op = _be32(a[2])
        data = _value(a[3])
        if op not in (0, 1):
            raise Undecodable(f"cmp op {op}")
        opname = "==" if op == 0 else "!="
        if src.kind == "ctflags":
            if op != 1 or any(data) or src.mask not in CT_STATES:
                raise Undecodable("a ct state test nft prints otherwise")
            self.out.append({"match": {"op": "in", "left": src.expr, "right": CT_STATES[src.mask]}})
            self.dep = None
            return
        if src.kind in ("ip4", "ip6"):
            width = 4 if src.kind == "ip4" else 16
            if src.prefix_of is not None:
                bits = src.mask if src.mask is not None else 8 * src.length
                addr = _ip_text(data + b"\0" * (width - len(data)))
                right = {"prefix": {"addr": addr, "len": bits}}
            else:
                right = _ip_text(data)
        elif src.kind == "port":
            right = struct.unpack(">H", data[:2])[0]
        elif src.kind == "proto":
            right = typed_value("proto", data)
        elif src.kind == "hostint":
            right = struct.unpack("=I", data)[0]
        elif src.kind == "rtn":
            code = struct.unpack("=I", data)[0]
            if code not in RTN_TYPES:
                raise Undecodable(f"route type {code}")
            right = RTN_TYPES[code]
        else:
            raise Undecodable(f"cmp on {src.kind}")
        self.out.append({"match": {"op": opname, "left": src.expr, "right": right}})
        is_dep = src.expr == {"meta": {"key": "l4proto"}} and op == 0 and right in ("tcp", "udp", "sctp")
        self.dep = len(self.out) - 1 if is_dep else None

    def _key(self, sreg: bytes, info: SetInfo):
        """The expression a lookup's key is made of: one register, or consecutive registers (a concatenation)."""
        i = _reg32(_be32(sreg))
        parts = []
        for _kind, length in info.fields:
            r = self.regs.get(i)
            if r is None or r.expr is None or r.prefix_of is not None:
                raise Undecodable("a set key from registers this module cannot name")
            if r.length != length and not (r.kind == "proto" and length == 1):
                raise Undecodable("a set key whose parts do not fit its type")
            parts.append(r.expr)
            i += (length + 3) // 4
        return parts[0] if len(parts) == 1 else {"concat": parts}

    def _x_lookup(self, a):
        name = _str(a.get(1, b""))
        data = self.sets(name)
        info = data.info
        key = self._key(a[2], info)
        inv = 5 in a and _be32(a[5]) & 1
        if info.anonymous and info.interval:
            right = {"set": data.intervals()}
        elif info.anonymous:
            elems = data.sorted(range(len(data)))
            right = {"set": [e[0] for e in elems]}
            for _, _, verdict, _ in elems:
                for k in ("jump", "goto"):
                    if verdict and k in verdict:
                        self.targets.append(verdict[k]["target"])
        else:
            right = "@" + name
            self.used.append(name)
        if 3 in a:  # a verdict map
            if _be32(a[3]) != 0 or not info.is_map or inv:
                raise Undecodable("a data map lookup")
            self.out.append({"vmap": {"key": key, "data": right}})
        else:
            if info.is_map:
                raise Undecodable("a map lookup without a destination")
            self.out.append({"match": {"op": "!=" if inv else "==", "left": key, "right": right}})
        self.dep = None

    # statements -------------------------------------------------------------------------------------------
    def _x_nat(self, a):
        flags = _be32(a[7]) if 7 in a else 0
        same = all(a.get(lo) == a.get(hi) or hi not in a for lo, hi in ((3, 4), (5, 6)))
        if _be32(a[1]) != 1 or flags & ~0x3 or not same:  # MAP_IPS, PROTO_SPECIFIED: what "dnat to A:P" sets
            raise Undecodable("nat other than a plain dnat to an address and port")
        body: dict = {}
        if 3 in a:
            r = self._get(a[3])
            if r.kind != "raw":
                raise Undecodable("dnat to an address that is not a constant")
            body["addr"] = _ip_text(r.mask)
        if 5 in a:
            r = self._get(a[5])
            if r.kind != "raw":
                raise Undecodable("dnat to a port that is not a constant")
            body["port"] = struct.unpack(">H", r.mask[:2])[0]
        self.out.append({"dnat": body})
        self.dep = None

    def _x_masq(self, a):
        if 2 in a or 3 in a:
            raise Undecodable("masquerade to ports")
        flags = _be32(a[1]) if 1 in a else 0
        names = [n for bit, n in NAT_FLAGS if flags & bit]
        if flags & ~sum(bit for bit, _ in NAT_FLAGS):
            raise Undecodable(f"masquerade flags {flags}")
        self.out.append({"masquerade": {"flags": names[0] if len(names) == 1 else names} if names else None})
        self.dep = None

    def _x_reject(self, a):
        kind, code = _be32(a[1]), a.get(2, b"\0")[0]
        want = {"ip": (0, 3, "icmp"), "ip6": (0, 4, "icmpv6")}[self.family]
        if (kind, code) != want[:2]:
            raise Undecodable(f"reject type {kind} code {code}")
        self.out.append({"reject": {"type": want[2], "expr": "port-unreachable"}})
        self.dep = None

    def _x_counter(self, a):
        self.out.append({"counter": {"packets": _be64(a.get(2, b"\0" * 8)), "bytes": _be64(a.get(1, b"\0" * 8))}})
        self.dep = None

    def _x_notrack(self, a):
        self.out.append({"notrack": None})
        self.dep = None

    def _x_dynset(self, a):
        timeout = _be64(a[6]) if 6 in a else 0  # 0: the set's own timeout
        if _be32(a[3]) != 1 or 5 in a or timeout or 7 in a or 10 in a or (9 in a and _be32(a[9])):
            raise Undecodable("a set statement other than a plain update")
        name = _str(a[1])
        info = self.sets(name).info
        if info.anonymous:
            raise Undecodable("a set statement on an anonymous set")
        key = self._key(a[4], info)
        self.out.append({"set": {"op": "update", "elem": key, "set": "@" + name}})
        self.used.append(name)
        self.dep = None

    # the expression kinds decoded (kube-proxy's): any other makes the rule undecodable
    DECODERS = {
        "payload": _x_payload,
        "meta": _x_meta,
        "ct": _x_ct,
        "fib": _x_fib,
        "numgen": _x_numgen,
        "immediate": _x_immediate,
        "bitwise": _x_bitwise,
        "cmp": _x_cmp,
        "lookup": _x_lookup,
        "nat": _x_nat,
        "masq": _x_masq,
        "reject": _x_reject,
        "counter": _x_counter,
        "notrack": _x_notrack,
        "dynset": _x_dynset,
    }
