"""``kpdiag trace --kernel``'s reading of nft monitor trace and its comparison with the simulated path
(kpdiag/trace/kernel.py), without the kernel: the lines are nft's own (recorded in a lab namespace), the path is the
healthy-nftables fixture's. On the real kernel: tests/lab/test_trace_kernel.py."""

from __future__ import annotations

import os

from click.testing import CliRunner

from kpdiag.cli import cli
from kpdiag.commands.trace import setup_trace
from kpdiag.trace.kernel import KernelPath, KernelTrace, compare
from kpdiag.trace.model import Packet
from tests.conftest import FIXTURES

# nft monitor trace of a node's own SYN to 192.168.50.1:22 (nftables v1.0.6), with kpdiag's table and its canary
LINES = """trace id 1a2b3c4d ip kpdiag_trace_7 out packet: oif "lo" ip saddr 127.0.0.1 ip daddr 127.0.0.1 udp sport 40000 udp dport 9
trace id 1a2b3c4d ip kpdiag_trace_7 out rule ip daddr 127.0.0.1 udp dport 9 udp sport 40000 meta nftrace set 1 (verdict continue)
trace id 67256cd8 ip kpdiag_trace_7 out packet: oif "lo" ip saddr 192.168.50.1 ip daddr 192.168.50.1 tcp sport 40000 tcp dport 22 tcp flags == syn
trace id 67256cd8 ip kpdiag_trace_7 out rule ip saddr 192.168.50.1 ip daddr 192.168.50.1 tcp sport 40000 tcp dport 22 meta nftrace set 1 (verdict continue)
trace id 67256cd8 ip kpdiag_trace_7 out policy accept
trace id 67256cd8 ip kube-proxy filter-output-pre-dnat rule ct state new jump firewall-check (verdict jump firewall-check)
trace id 67256cd8 ip kube-proxy nat-output rule jump services (verdict jump services)
trace id 67256cd8 ip kube-proxy filter-output rule ct state new jump service-endpoints-check (verdict jump service-endpoints-check)
trace id 67256cd8 ip kube-proxy filter-output rule ct state new jump cluster-ips-check (verdict jump cluster-ips-check)
trace id 67256cd8 ip kube-proxy nat-postrouting rule jump masquerading (verdict jump masquerading)
trace id 67256cd8 ip kube-proxy masquerading rule meta mark & 0x00004000 == 0x00000000 return (verdict return)
trace id 3f8c975c ip kube-proxy filter-prerouting-pre-dnat rule ct state new jump firewall-check (verdict jump firewall-check)
trace id 3f8c975c ip kube-proxy filter-input rule ct state new jump nodeport-endpoints-check (verdict jump nodeport-endpoints-check)
trace id 3f8c975c ip kube-proxy filter-input rule ct state new jump service-endpoints-check (verdict jump service-endpoints-check)
""".splitlines()


def _path():
    setup = setup_trace(bundle=os.path.join(FIXTURES, "healthy-nftables"))
    result = setup.tracer.trace(Packet("192.168.50.1", "192.168.50.1", "tcp", 22, origin="node"))
    assert len(result.paths) == 1
    return result.paths[0]


def _kernel(lines) -> KernelPath:
    kt = KernelTrace("192.168.50.1", "192.168.50.1", "tcp", 40000, 22)
    kt.table = "kpdiag_trace_7"
    return kt._path(lines)


def test_the_kernels_lines_are_read_without_kpdiags_own_table_and_canary():
    kernel = _kernel(LINES)
    assert [(t, c) for t, c, _, _ in kernel.rules][:2] == [
        ("kube-proxy", "filter-output-pre-dnat"),
        ("kube-proxy", "nat-output"),
    ]
    assert len(kernel.rules) == 9 and all(t == "kube-proxy" for t, _, _, _ in kernel.rules)
    assert kernel.rules[-4] == ("kube-proxy", "masquerading", "meta mark & 0x00004000 == 0x00000000 return", "return")
    assert not any("udp dport 9" in line for line in kernel.lines)


def test_the_kernel_and_the_path_agree_rule_by_rule():
    agree, says, _ = compare(_path(), _kernel(LINES))
    assert agree and says.startswith("AGREE: the kernel's 9 rules"), says


def test_a_kernel_rule_that_is_not_on_the_path_is_where_they_part():
    lines = LINES[:-1] + ["trace id 3f8c975c ip hostfw input rule tcp dport 22 drop (verdict drop)"]
    agree, says, _ = compare(_path(), _kernel(lines))
    assert not agree
    assert says == "the kernel's rule 'tcp dport 22 drop' in hostfw/input (verdict drop) is not on kpdiag's path"


def test_the_same_rules_in_another_order_do_not_agree():
    lines = LINES[:5] + [LINES[6], LINES[5]] + LINES[7:]
    agree, says, _ = compare(_path(), _kernel(lines))
    assert not agree and "filter-output-pre-dnat" in says


def test_nothing_from_the_kernel_is_no_agreement():
    agree, says, _ = compare(_path(), _kernel(LINES[:2]))
    assert not agree and says == "the kernel reported nothing for the probe"


def test_kernel_is_for_a_live_trace_from_the_node():
    for args in (
        ["--bundle", os.path.join(FIXTURES, "healthy-nftables"), "--from", "node"],
        ["--src", "10.0.0.1"],  # live, but from outside: kpdiag does not send a probe as someone else
        ["--from", "node", "--proto", "icmp"],
    ):
        dst = ["--dst", "192.168.50.1"] if "icmp" in args else ["--dst", "192.168.50.1:22"]
        res = CliRunner().invoke(cli, ["trace", *args, *dst, "--kernel"])
        assert res.exit_code == 2, (args, res.output)
        assert "--kernel is for a live trace of a TCP or UDP packet --from node" in res.output


def test_the_text_shows_each_kernel_rule_beside_kpdiags_step():
    from dataclasses import replace

    from kpdiag.render.trace import trace_to_text

    setup = setup_trace(bundle=os.path.join(FIXTURES, "healthy-nftables"))
    result = setup.tracer.trace(Packet("192.168.50.1", "192.168.50.1", "tcp", 22, origin="node"))
    kernel = _kernel(LINES)
    agree, says, steps = compare(result.paths[0], kernel)
    doc = dict(kernel.to_dict(), agree=agree, says=says, path=1)
    for rule, step in zip(doc["rules"], steps):
        rule["step"] = step
    text = trace_to_text(replace(result, kernel=doc))
    assert "kernel  AGREE: path 1 beside nft monitor trace of the probe" in text
    assert "1   kernel  kube-proxy/filter-output-pre-dnat: ct state new jump" in text
    assert "kpdiag  step 1: ip kube-proxy/filter-output-pre-dnat jump firewall-check" in text
    assert text.rstrip().endswith("AGREE: the kernel's 9 rules are kpdiag's path, in order")
