"""Parsers for ``ipvsadm -Sn`` (save format) and ``ipvsadm -Ln`` (list format, also --stats/--rate)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InputError
from .addr import hostport

_PROTO_FLAG = {"-t": "tcp", "--tcp-service": "tcp", "-u": "udp", "--udp-service": "udp", "--sctp-service": "sctp"}
_FWD = {
    "-g": "route",
    "--gatewaying": "route",
    "-i": "tunnel",
    "--ipip": "tunnel",
    "-m": "masq",
    "--masquerading": "masq",
}


@dataclass
class RealServer:
    addr: str
    port: int
    forward: str = "masq"
    weight: int = 1
    active: int | None = None  # ActiveConn (list format only)
    inactive: int | None = None
    line: int = 0

    @property
    def target(self) -> str:
        return hostport(self.addr, self.port)


@dataclass
class VirtualService:
    proto: str  # tcp | udp | sctp | fwmark
    addr: str | None
    port: int | None
    fwmark: int | None = None
    scheduler: str = "wlc"
    persistent: int | None = None  # seconds
    flags: list[str] = field(default_factory=list)
    reals: list[RealServer] = field(default_factory=list)
    line: int = 0

    @property
    def key(self) -> tuple:
        return ("fwmark", self.fwmark) if self.fwmark is not None else (self.proto, self.addr, self.port)

    @property
    def name(self) -> str:
        return f"fwmark {self.fwmark}" if self.fwmark is not None else f"{self.proto.upper()} {self.addr}:{self.port}"


def _split_addr(text: str, source: str, lineno: int) -> tuple[str, int]:
    if text.startswith("["):
        host, _, port = text[1:].partition("]:")
    else:
        host, _, port = text.rpartition(":")
    if not host or not (port.isascii() and port.isdigit()):
        raise InputError(source, f"not an address:port: {text!r}", lineno)
    return host, int(port)


def _save_opts(toks: list[str]) -> dict[str, str | None]:
    """The options of one ``ipvsadm -S`` line: flag → its value (None for a flag without one)."""
    opts: dict[str, str | None] = {}
    i = 1
    while i < len(toks):
        t = toks[i]
        if i + 1 < len(toks) and not toks[i + 1].startswith("-"):
            opts[t] = toks[i + 1]
            i += 2
        else:
            opts[t] = None
            i += 1
    return opts


def _service_key(
    opts: dict[str, str | None], line: str, source: str, lineno: int
) -> tuple[str, str, int] | tuple[str, int]:
    """The virtual service a line names: (proto, address, port) for -t/-u/--sctp-service, ("fwmark", N) for -f."""
    flag = next((f for f in _PROTO_FLAG if f in opts), None)
    if flag is not None:
        addr, port = _split_addr(opts[flag] or "", source, lineno)
        return (_PROTO_FLAG[flag], addr, port)
    if "-f" in opts or "--fwmark-service" in opts:
        mark = opts.get("-f") or opts.get("--fwmark-service") or ""
        try:
            return ("fwmark", int(mark, 0))
        except ValueError:
            raise InputError(source, f"bad fwmark {mark!r}", lineno) from None
    raise InputError(source, f"no service (-t/-u/-f) in: {line[:120]}", lineno)


def _virtual_service(
    key: tuple[str, str, int] | tuple[str, int], opts: dict[str, str | None], lineno: int
) -> VirtualService:
    """The virtual service an ``-A`` line adds."""
    vs = VirtualService(
        key[0],
        key[1] if len(key) == 3 else None,
        key[2] if len(key) == 3 else None,
        key[1] if len(key) == 2 else None,
        scheduler=opts.get("-s") or opts.get("--scheduler") or "wlc",
        line=lineno,
    )
    if "-p" in opts or "--persistent" in opts:
        value = opts.get("-p") or opts.get("--persistent") or "300"
        vs.persistent = int(value) if value.isascii() and value.isdigit() else 300
    return vs


def _real_server(opts: dict[str, str | None], line: str, source: str, lineno: int) -> RealServer:
    """The real server an ``-a`` line adds."""
    real = opts.get("-r") or opts.get("--real-server")
    if not real:
        raise InputError(source, f"-a without -r: {line[:120]}", lineno)
    addr, port = _split_addr(real, source, lineno)
    fwd = next((m for f, m in _FWD.items() if f in opts), "route")
    weight = opts.get("-w") or opts.get("--weight") or "1"
    if not (weight.isascii() and weight.isdigit()):
        raise InputError(source, f"bad weight {weight!r}", lineno)
    return RealServer(addr, port, fwd, int(weight), line=lineno)


def parse_ipvsadm_save(text: str, source: str = "ipvsadm -Sn") -> dict[tuple[object, ...], VirtualService]:
    services: dict[tuple[object, ...], VirtualService] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        toks = line.split()
        if not toks or toks[0].startswith("#"):
            continue
        verb = toks[0]
        if verb not in ("-A", "--add-service", "-a", "--add-server"):
            raise InputError(source, f"expected -A or -a: {line[:120]}", lineno)
        opts = _save_opts(toks)
        key = _service_key(opts, line, source, lineno)
        if verb in ("-A", "--add-service"):
            services[key] = _virtual_service(key, opts, lineno)
            continue
        vs = services.get(key)
        if vs is None:
            raise InputError(source, "real server for a virtual service not added before", lineno)
        vs.reals.append(_real_server(opts, line, source, lineno))
    return services


def parse_ipvsadm_list(text: str, source: str = "ipvsadm -Ln") -> dict[tuple[object, ...], VirtualService]:
    """``ipvsadm -Ln`` (and ``--stats``/``--rate``, where connection counts are not given)."""
    services: dict[tuple[object, ...], VirtualService] = {}
    current: VirtualService | None = None
    columns = "conn"
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("IP Virtual Server"):
            continue
        if s.startswith("Prot LocalAddress"):
            columns = "stats" if "Conns" in s else ("rate" if "CPS" in s else "conn")
            continue
        if s.startswith("-> RemoteAddress"):
            continue
        toks = s.split()
        if toks[0] in ("TCP", "UDP", "SCTP", "FWM"):
            if len(toks) < 2:
                raise InputError(source, f"virtual service line without an address: {s[:120]}", lineno)
            if toks[0] == "FWM":
                try:
                    vs = VirtualService("fwmark", None, None, int(toks[1], 0), line=lineno)
                except ValueError:
                    raise InputError(source, f"bad fwmark {toks[1]!r}", lineno) from None
            else:
                addr, port = _split_addr(toks[1], source, lineno)
                vs = VirtualService(toks[0].lower(), addr, port, line=lineno)
            if columns == "conn" and len(toks) > 2:
                vs.scheduler = toks[2]
                if "persistent" in toks:
                    k = toks.index("persistent")
                    vs.persistent = (
                        int(toks[k + 1])
                        if k + 1 < len(toks) and toks[k + 1].isascii() and toks[k + 1].isdigit()
                        else 300
                    )
            services[vs.key] = vs
            current = vs
        elif toks[0] == "->":
            if current is None:
                raise InputError(source, "real server line before any virtual service", lineno)
            if len(toks) < 2:
                raise InputError(source, f"real server line without an address: {s[:120]}", lineno)
            addr, port = _split_addr(toks[1], source, lineno)
            rs = RealServer(addr, port, line=lineno)
            if columns == "conn" and len(toks) >= 6:
                rs.forward = {"Masq": "masq", "Route": "route", "Tunnel": "tunnel", "Local": "local"}.get(
                    toks[2], toks[2].lower()
                )
                try:
                    rs.weight, rs.active, rs.inactive = int(toks[3]), int(toks[4]), int(toks[5])
                except ValueError:
                    raise InputError(
                        source, f"weight and connection counts must be numbers: {s[:120]}", lineno
                    ) from None
            current.reals.append(rs)
        else:
            raise InputError(source, f"unexpected line: {s[:120]}", lineno)
    return services
