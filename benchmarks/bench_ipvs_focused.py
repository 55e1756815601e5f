#!/usr/bin/env python3
"""Benchmark: IPVS mode's focused read (`kpdiag node --service`: the Service's virtual servers one by one over netlink,
kpdiag/collect/ipvs_rules.py) against the whole IPVS table, on a kernel with N Services.

    sudo python3 benchmarks/bench_ipvs_focused.py [--services 10000]

This machine's kernel has no IPVS: Debian's kernel is booted under QEMU (software emulation, tests/ipvsvm/vm.py; the
image is built first, about 4 minutes, or taken from $KPDIAG_VM_CACHE). In the guest, a network namespace gets
kube-proxy's IPVS state for N Services (tests.synth: a virtual server per ClusterIP with two real servers, every tenth
Service a NodePort too; ipvsadm -R), then, in one Python process (tests/ipvsvm/inside.py), measured:
  - `ipvsadm -Sn` (the whole table as a shell reads it; what kpdiag's whole read runs when pyroute2 has no IPVS, as
    in Debian 12's python3-pyroute2 0.7.2);
  - the whole table over generic netlink (one dump of the virtual servers, one dump of each one's real servers);
  - the focused read of each Service in focus (IPVS_CMD_GET_SERVICE per address and port, GET_DEST per one found);
  - a whole `collect_node()` and a focused one (the rest of the node is read the same way in both).
Wall and CPU seconds (the process's own; ipvsadm's as its child's). Everything runs emulated: absolute times are
those of a CPU 10–50× slower than this host's, and system calls and netlink are emulated with it, so only the ratios
mean something. Results go to benchmarks/out/ipvs_focused.json (or $KPDIAG_BENCH_OUT).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.environ.get("KPDIAG_BENCH_OUT") or os.path.join(HERE, "out")
sys.path.insert(0, ROOT)

from tests.ipvsvm import scenarios as S  # noqa: E402
from tests.ipvsvm import vm  # noqa: E402


def _same_paths(whole: str, focused: str) -> bool:
    """The same paths, in any order (as tests/ipvsvm/test_ipvs_kernel.py compares them: ipvsadm sorts real servers,
    netlink gives the kernel's order), without the file:line of each step (the partial files are shorter)."""
    from tests.ipvsvm.test_ipvs_kernel import _unplaced

    def paths(doc: str) -> list:
        return sorted(_unplaced(json.loads(doc))["paths"], key=lambda p: json.dumps(p, sort_keys=True))

    return paths(whole) == paths(focused)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", type=int, default=10000, help="Services besides shop/web and kube-dns")
    ap.add_argument("--timeout", type=float, default=5400, help="seconds the VM may run")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (qemu, debootstrap)", file=sys.stderr)
        return 2
    n = args.services
    focus = ["shop/web", f"bulk/svc-{n // 2 - n // 2 % 10}", f"bulk/svc-{n - 1}"]  # a NodePort, a NodePort, a ClusterIP
    sc = S.Scenario("bench", f"{n} Services", bulk=n, lb=True, collect="kpdiag", focus=focus)
    # the live traces: each packet to shop/web and a ClusterIP Service (from a client), a NodePort
    packets = [p for p in S.trace_packets(sc) if p["frm"] == "external"][:6]
    work = os.environ.get("KPDIAG_VM_CACHE") or tempfile.mkdtemp(prefix="kpdiag-bench-vm-image-")
    t0 = time.monotonic()
    image = vm.build_image(work, log=lambda m: print(m, file=sys.stderr))
    built = time.monotonic() - t0
    share = tempfile.mkdtemp(prefix="kpdiag-bench-ipvs-")
    try:
        from tests.ipvsvm.test_ipvs_kernel import _copy_source

        os.makedirs(os.path.join(share, "src"))
        _copy_source(os.path.join(share, "src"))
        shutil.copy(os.path.join(ROOT, "tests", "ipvsvm", "inside.py"), share)
        spec = S.guest_spec(sc) | {"bench": True, "packets": packets}
        with open(os.path.join(share, "scenarios.json"), "w") as fh:
            json.dump([spec], fh)
        with open(os.path.join(share, "run.sh"), "w") as fh:
            fh.write("#!/bin/sh\nexec python3 /mnt/inside.py /mnt\n")
        os.chmod(os.path.join(share, "run.sh"), 0o755)
        t1 = time.monotonic()
        vm.boot(image, share, timeout=args.timeout)
        ran = time.monotonic() - t1
        with open(os.path.join(share, "results.json")) as fh:
            rec = json.load(fh)["bench"]
        traces_json = os.path.join(share, "out", "bench", "traces.json")
        if os.path.exists(traces_json):
            with open(traces_json) as fh:
                rec["traces"] = [dict(t, same=_same_paths(t["whole"], t["focused"])) for t in json.load(fh)]
        if "error" in rec:
            print(rec["error"], file=sys.stderr)
            return 1
    finally:
        shutil.rmtree(share, ignore_errors=True)
    rows = rec["focused"]
    first = rows[0]
    print(
        f"IPVS, {n + 3} Services, {first['whole_netlink']['services']} virtual servers (guest: Debian kernel "
        f"{image.version} under QEMU TCG, 2 vCPUs; image {built:.0f} s, boot and run {ran:.0f} s, "
        f"setup {rec.get('setup_seconds')} s)"
    )
    w = first["ipvsadm_Sn"]
    print(f"  ipvsadm -Sn (whole):                     {w['seconds']:8.3f} s wall {w['cpu']:8.3f} s CPU")
    w = first["whole_netlink"]
    print(f"  whole table over netlink:                {w['seconds']:8.3f} s wall {w['cpu']:8.3f} s CPU")
    if "whole_collection" in first:
        w = first["whole_collection"]
        print(f"  collect_node() (whole):                  {w['seconds']:8.3f} s wall {w['cpu']:8.3f} s CPU")
    for r in rows:
        i = r["ipvs"]
        print(
            f"  {r['service']:<18} focused IPVS read:   {i['seconds']:8.3f} s wall {i['cpu']:8.3f} s CPU "
            f"({i['asked']} asked, {i['found']} found); collect_node(focused): {r['seconds']:.3f} s wall "
            f"{r['cpu']:.3f} s CPU" + ("" if r.get("partial") else " — NOT FOCUSED: " + str(r.get("errors"))[:300])
        )
        slowest = sorted((r.get("timings") or {}).items(), key=lambda kv: -kv[1])[:4]
        print("      its slowest sources: " + ", ".join(f"{k} {v:.2f} s" for k, v in slowest))
    traces = rec.get("traces") or []
    if traces:  # a live kpdiag trace of each packet (kpdiag/collect/dest_rules.py), focused and whole
        w = traces[0]["whole_cost"]
        print(f"  live trace, the whole rules read (once):  {w['seconds']:8.3f} s wall {w['cpu']:8.3f} s CPU")
        for t in traces:
            p, c = t["packet"], t["cost"]
            same = "same paths" if t["same"] else "DIFFERENT PATHS"
            print(
                f"  live trace {p['proto']} {p['dst']}:{p['dport']} from {p['frm']:<8} focused: {c['seconds']:8.3f} s "
                f"wall {c['cpu']:8.3f} s CPU ({len((t['read'] or {}).get('virtual_servers') or [])} virtual servers "
                f"asked; {same})"
            )
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "ipvs_focused.json"), "w") as fh:
        doc = {"services": n, "kernel": image.version, "boot_and_run_seconds": ran, "rows": rows, "traces": traces}
        json.dump(doc, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
