"""Record fixtures/dns-* in the lab (root): ``python -m tests.dns.make_fixtures [NAME …]``.

Each scenario of tests.dns.dnslab is built for real (network namespaces, kube-proxy's rules, the lab DNS server), kpdiag's
DNS probe runs in the client pod, and the API side is read from tests.apiserver with ClusterCollector.dns_objects().
"""

import os
import shutil
import sys
import tempfile

from tests.dns.dnslab import SCENARIOS, run_scenario, write_fixture
from tests.lab.netlab import Lab, can_run_lab

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "fixtures")


def main(names: list[str]) -> int:
    ok, why = can_run_lab()
    if not ok:
        print(f"cannot record: {why}", file=sys.stderr)
        return 2
    for name in names or sorted(SCENARIOS):
        with Lab() as lab, tempfile.TemporaryDirectory() as tmp:
            doc, took, files, _ = run_scenario(lab, name, tmp)
        out = os.path.join(FIXTURES, name)
        shutil.rmtree(out, ignore_errors=True)
        write_fixture(out, name, files)
        print(f"{name}: {doc['result']} in {took:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
