"""Run in a lab pod: diagnose one Service N times in one process (the imports paid once), each a full `kpdiag svc`
(API, DNS, probes, checks, verdict) through the library the CLI calls; print one JSON line per run.

    python -m tests.lab.svc_repeat NS NAME KUBECONFIG NODE RUNS
"""

from __future__ import annotations

import json
import sys


def main(ns: str, name: str, kubeconfig: str, node: str, runs: int) -> None:
    from kpdiag import exitcodes
    from kpdiag.commands.svc import diagnose_service

    for _ in range(runs):
        report = diagnose_service(ns, name, kubeconfig=kubeconfig, node=node)
        code = exitcodes.for_findings(report.severities(), "error", report.readable)
        print(json.dumps({"code": code, "report": report.to_dict()}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
