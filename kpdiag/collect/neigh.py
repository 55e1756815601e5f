"""The node's neighbour (ARP/NDP) tables, counted, and the kernel's log lines about the network — bounded reads for
node/neigh.json and node/kernel-log.txt (kpdiag/bundle/sources.py), read-only.

The neighbour tables are the kernel's, one per family and shared by every network namespace: gc_thresh1/2/3 bound
the entries of all of them together, and /proc/net/stat/arp_cache counts them all (its ``entries``) and the times a
new entry was refused (``table_fulls``). The entries of the collector's own namespace (the node's) are counted by
state and device through pyroute2."""

from __future__ import annotations

import errno
import os
import re

FORMAT = "kpdiag.neigh/v1"
MAX_DUMP = 100_000  # more entries than this in the node's namespace: counted by /proc only, not dumped
MAX_DEVICES = 16  # devices listed by count (the largest)
STAT_FILES = {"ipv4": "arp_cache", "ipv6": "ndisc_cache"}
STAT_KEYS = ("entries", "forced_gc_runs", "table_fulls")

# the kernel's log lines kept (the rest of the log is not the network's, and may hold anything)
NET_LOG = re.compile(
    r"neighbou?r table overflow|nf_conntrack: (?:nf_conntrack: )?table full|nf_conntrack: expectation table full"
)
MAX_LOG_LINES = 200
MAX_LOG_RECORDS = 200_000  # /dev/kmsg records read at most (the ring buffer holds far fewer)
MAX_LINE = 400

NUD = {
    0x01: "INCOMPLETE",
    0x02: "REACHABLE",
    0x04: "STALE",
    0x08: "DELAY",
    0x10: "PROBE",
    0x20: "FAILED",
    0x40: "NOARP",
    0x80: "PERMANENT",
}
NTF_EXT_LEARNED = 0x10


def read_stat(proc: str, family: str) -> dict | None:
    """The kernel's counters of one family's neighbour table (/proc/net/stat/arp_cache: hex columns, one line per
    CPU; ``entries`` is the table's, the same on every line; the others are summed): None when not readable (a
    network namespace other than the host's has no such file)."""
    try:
        with open(os.path.join(proc, "net/stat", STAT_FILES[family]), encoding="ascii") as fh:
            head, *rows = fh.read(256 * 1024).splitlines()
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    names = head.split()
    out = {k: 0 for k in STAT_KEYS if k in names}
    for row in rows:
        cells = row.split()
        if len(cells) != len(names):
            continue
        for key in out:
            value = int(cells[names.index(key)], 16)
            out[key] = value if key == "entries" else out[key] + value
    return out if rows else None


def count_neighbours(ipr, family: int) -> dict:
    """One family's entries of this namespace, counted: ``entries`` (those the kernel may collect: neither permanent,
    nor NOARP, nor learnt from outside — what gc_thresh bounds), ``permanent``, ``states``, ``devices``."""
    names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
    states: dict[str, int] = {}
    devices: dict[str, int] = {}
    counted = exempt = 0
    for n, msg in enumerate(ipr.get_neighbours(family=family)):
        if n >= MAX_DUMP:
            return {"truncated": True, "read": n}
        state = msg.get("state", 0)
        name = NUD.get(state, f"0x{state:x}")
        states[name] = states.get(name, 0) + 1
        if state & 0xC0 or msg.get("flags", 0) & NTF_EXT_LEARNED:
            exempt += 1
            continue
        counted += 1
        dev = names.get(msg.get("ifindex"), str(msg.get("ifindex")))
        devices[dev] = devices.get(dev, 0) + 1
    top = dict(sorted(devices.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_DEVICES])
    return {"entries": counted, "permanent": exempt, "states": states, "devices": top}


def neighbours(proc: str = "/proc") -> tuple[dict, list[str]]:
    """The document of node/neigh.json and what could not be read (each a sentence)."""
    from socket import AF_INET, AF_INET6

    doc: dict = {"format": FORMAT}
    errors: list[str] = []
    try:
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            for family, af in (("ipv4", AF_INET), ("ipv6", AF_INET6)):
                doc[family] = count_neighbours(ipr, af)
    except Exception as exc:  # pyroute2 missing or netlink refused: the kernel's counters may still say enough
        errors.append(f"the neighbour table could not be read over netlink ({exc.__class__.__name__}: {exc})")
    stat = {family: s for family in STAT_FILES if (s := read_stat(proc, family)) is not None}
    if stat:
        doc["stat"] = stat
    else:
        errors.append(f"{proc}/net/stat/arp_cache is not readable: the table's own count (all namespaces) is unknown")
    return doc, errors


def _kmsg_lines(path: str = "/dev/kmsg") -> list[str] | None:
    """The kernel's ring buffer as dmesg prints it ("[seconds] message"), read without waiting; None when it cannot
    be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    out = []
    try:
        for _ in range(MAX_LOG_RECORDS):
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:
                break  # the end of the buffer
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # a record was overwritten while reading: go on with the next
                break
            if not rec:
                break
            head, _, msg = rec.decode("utf-8", "replace").partition(";")
            fields = head.split(",")
            usec = int(fields[2]) if len(fields) > 2 and fields[2].isdigit() else 0
            out.append(f"[{usec // 1_000_000:5d}.{usec % 1_000_000:06d}] {msg.splitlines()[0] if msg else ''}")
    finally:
        os.close(fd)
    return out


def network_lines(lines) -> str:
    """The lines about the network (NET_LOG), the last MAX_LOG_LINES, each at most MAX_LINE characters."""
    kept = [line[:MAX_LINE] for line in lines if NET_LOG.search(line)]
    return "".join(line + "\n" for line in kept[-MAX_LOG_LINES:])
