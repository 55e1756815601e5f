"""IPVS mode on recorded-format state: parsers, shares by scheduler and weight, missing virtual services."""

import os

import pytest

from kpdiag.bundle.store import Bundle
from kpdiag.parse.ipvs import parse_ipvsadm_list, parse_ipvsadm_save
from kpdiag.state.node import NodeState
from tests.synth import Endpoint, Port, Service, ipvs_files
from kpdiag.trace.model import Packet
from kpdiag.trace.ipvs import IpvsTracer
from kpdiag.errors import InputError
from tests.conftest import FIXTURES

SAVE = """-A -t 10.96.0.1:443 -s rr
-a -t 10.96.0.1:443 -r 192.168.0.10:6443 -m -w 1
-A -u 10.96.0.10:53 -s wrr -p 10800
-a -u 10.96.0.10:53 -r 10.244.0.2:53 -m -w 3
-a -u 10.96.0.10:53 -r 10.244.0.3:53 -m -w 1
-A -f 100 -s sh
-a -f 100 -r 10.244.0.9:80 -g -w 1
"""

LIST = """IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.96.0.1:443 rr
  -> 192.168.0.10:6443            Masq    1      3          0
UDP  10.96.0.10:53 wrr persistent 10800
  -> 10.244.0.2:53                Masq    3      0          12
  -> 10.244.0.3:53                Masq    0      4          1
FWM  100 sh
  -> 10.244.0.9:80                Route   1      0          0
"""

STATS = """IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes
  -> RemoteAddress:Port
TCP  10.96.0.1:443                     120     5000     4800    1.2M    3.4M
  -> 192.168.0.10:6443                 120     5000     4800    1.2M    3.4M
"""


def test_parse_save_and_list_formats():
    s = parse_ipvsadm_save(SAVE, "s")
    assert s[("udp", "10.96.0.10", 53)].scheduler == "wrr" and s[("udp", "10.96.0.10", 53)].persistent == 10800
    assert [r.weight for r in s[("udp", "10.96.0.10", 53)].reals] == [3, 1]
    assert s[("fwmark", 100)].reals[0].forward == "route"
    lst = parse_ipvsadm_list(LIST, "l")
    reals = lst[("udp", "10.96.0.10", 53)].reals
    assert (reals[1].weight, reals[1].active, reals[1].inactive) == (0, 4, 1)
    assert lst[("tcp", "10.96.0.1", 443)].reals[0].forward == "masq"
    stats = parse_ipvsadm_list(STATS, "st")
    assert stats[("tcp", "10.96.0.1", 443)].reals[0].target == "192.168.0.10:6443"
    with pytest.raises(InputError) as exc:
        parse_ipvsadm_save("-a -t 1.2.3.4:80 -r 10.0.0.1:80 -m\n", "bad.txt")
    assert str(exc.value).startswith("bad.txt:1:")


def _tracer(weights=None, scheduler="rr", endpoints=3):
    svc = Service(
        "shop",
        "web",
        "10.96.0.20",
        [Port("http", 80, 8080)],
        [Endpoint(f"10.244.1.{10 + i}") for i in range(endpoints)],
    )
    files = ipvs_files([svc], weights=weights or {}, scheduler=scheduler)
    state = NodeState(Bundle.from_files("ipvs", {k: v.encode() for k, v in files.items()}))
    return IpvsTracer(state.iptables(), state.routing, state.ipsets, state.ipvs)


def test_weights_1_1_1_give_a_third_each():
    r = _tracer().trace(Packet("192.168.50.77", "10.96.0.20", "tcp", 80))
    assert r.dnat_set() == {"10.244.1.10:8080", "10.244.1.11:8080", "10.244.1.12:8080"}
    assert [p.probability for p in r.paths] == pytest.approx([1 / 3] * 3)
    assert all(p.masquerade for p in r.paths)  # KUBE-SERVICES marked the off-cluster client for masquerade
    assert not r.uncertain


def test_weight_zero_gets_no_path_and_wrr_shares():
    r = _tracer(weights={"10.244.1.12": 0}).trace(Packet("10.244.9.9", "10.96.0.20", "tcp", 80, origin="pod"))
    assert r.dnat_set() == {"10.244.1.10:8080", "10.244.1.11:8080"}
    assert not any(p.masquerade for p in r.paths)
    r = _tracer(weights={"10.244.1.10": 3}, scheduler="wrr").trace(
        Packet("10.244.9.9", "10.96.0.20", "tcp", 80, origin="pod")
    )
    assert {p.dnat: p.probability for p in r.paths} == pytest.approx(
        {"10.244.1.10:8080": 0.6, "10.244.1.11:8080": 0.2, "10.244.1.12:8080": 0.2}
    )


def test_cluster_ip_without_virtual_service_is_named():
    tracer = _tracer()
    r = tracer.trace(Packet("10.244.9.9", "10.96.0.20", "tcp", 443, origin="pod"))
    # bound on kube-ipvs0, no virtual service on 443: KUBE-IPVS-FILTER rejects it
    assert r.verdicts() == {"reject"}
    tracer.services.pop(("tcp", "10.96.0.20", 80))
    r = tracer.trace(Packet("10.244.9.9", "10.96.0.20", "tcp", 80, origin="pod"))
    assert r.dnat_set() == set()
    assert any("no IPVS virtual service for tcp 10.96.0.20:80 (KP302)" in n for n in r.paths[0].notes)


def test_trace_cli_picks_ipvs_from_the_bundle():
    from click.testing import CliRunner

    from kpdiag.cli import cli

    out = CliRunner().invoke(
        cli,
        [
            "trace",
            "--bundle",
            os.path.join(FIXTURES, "ipvs-terminating"),
            "--src",
            "192.168.50.77",
            "--dst",
            "10.96.0.20",
            "--dport",
            "80",
            "-o",
            "json",
        ],
        standalone_mode=False,
    )
    import json

    data = json.loads(out.output)
    assert data["mode"] == "ipvs"
    assert sorted(p["dnat"] for p in data["paths"]) == ["10.244.1.11:8080", "10.244.1.12:8080"]


def test_live_preflight_ipvs_reports_without_error():
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "kpdiag", "node", "--preflight", "ipvs", "-o", "json", "--host-root", "/"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr
    import json

    report = json.loads(proc.stdout)
    if not os.path.exists("/proc/net/ip_vs"):
        kp301 = [f for f in report["findings"] if f["id"] == "KP301"]
        assert kp301 and "IPVS is not available" in kp301[0]["summary"] or "not loaded" in kp301[0]["summary"]
        assert proc.returncode == 1
