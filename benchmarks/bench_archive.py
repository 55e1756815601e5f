#!/usr/bin/env python3
"""Benchmark: reading a bundle archive whose members are many and each just at the in-memory spool size.

    python3 benchmarks/bench_archive.py [--members 250] [--mib 4] [--repeat 1]

Writes a .tar.gz of a small real bundle (fixtures/healthy-iptables) plus N members of M MiB each (compressible
filler under node/, so the archive itself is small and the cost is the reading), then, in a fresh process each time:
  - opens it with kpdiag.bundle.store.Bundle.open (the archive is streamed once) and reads every member, and
  - runs `kpdiag analyze ARCHIVE -o json` end to end;
and reports wall time and peak RSS (ru_maxrss of that process). Results go to benchmarks/out/archive.json.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.environ.get("KPDIAG_BENCH_OUT") or os.path.join(HERE, "out")

READ_ALL = """
import sys, time
from kpdiag.bundle.store import Bundle
t = time.monotonic()
b = Bundle.open(sys.argv[1])
n = size = 0
for rel in b.list():
    data = b.read_bytes(rel)
    if data is not None:
        n += 1
        size += len(data)
print(n, size, round(time.monotonic() - t, 3), len(b.problems))
"""


def make_archive(path: str, members: int, mib: int) -> None:
    base = os.path.join(ROOT, "fixtures", "healthy-iptables")
    filler = (b"# kpdiag benchmark filler line, compressible\n" * (1 << 16))[: mib << 20]
    filler = filler + b"\n" * ((mib << 20) - len(filler))
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for dirpath, _, names in os.walk(base):
            for name in sorted(names):
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, base)
                if rel == "scenario.json":
                    continue
                tar.add(full, arcname=rel)
        for i in range(members):
            info = tarfile.TarInfo(f"node/filler-{i:04d}.txt")
            info.size = len(filler)
            tar.addfile(info, io.BytesIO(filler))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=250)
    ap.add_argument("--mib", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kpdiag-bench-archive-") as tmp:
        path = os.path.join(tmp, "bundle.tar.gz")
        make_archive(path, args.members, args.mib)
        result = {
            "members": args.members,
            "member_mib": args.mib,
            "archive_bytes": os.path.getsize(path),
            "read_all": [],
            "analyze": [],
        }
        for _ in range(args.repeat):
            # each measurement in its own interpreter, one after the other: RUSAGE_CHILDREN's peak is this child's
            result["read_all"].append(measure_isolated([sys.executable, "-c", READ_ALL, path]))
            result["analyze"].append(measure_isolated([sys.executable, "-m", "kpdiag", "analyze", path, "-o", "json"]))
    print(json.dumps(result, indent=1))
    with open(os.path.join(OUT, "archive.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    return 0


def measure_isolated(argv: list[str]) -> dict:
    """Run ARGV from a fresh helper process, so that RUSAGE_CHILDREN's peak is ARGV's alone."""
    helper = (
        "import json, resource, subprocess, sys, time\n"
        "t = time.monotonic()\n"
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
        "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps({'exit': p.returncode, 'wall_s': round(time.monotonic() - t, 2), "
        "'peak_rss_mib': round(u.ru_maxrss / 1024, 1), 'out': p.stdout.strip()[-120:] if 'analyze' not in sys.argv "
        "else None, 'err': p.stderr.strip()[-300:]}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", helper, *argv], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    return json.loads(proc.stdout)


if __name__ == "__main__":
    sys.exit(main())
