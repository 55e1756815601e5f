"""Unit tests of the node's small parsers (kpdiag/parse/node.py): what each line becomes, where it was read, and the
one-line error (file and line) for a line that is not what the command prints."""

from __future__ import annotations

import pytest

from kpdiag.errors import InputError
from kpdiag.parse import node as p

SYSCTL = """net.ipv4.ip_forward = 1
sysctl: permission denied on key 'fs.protected_regular'
net.ipv4.conf.all.route_localnet = 0

net.bridge.bridge-nf-call-iptables = 1
kernel.core_pattern = |/usr/lib/systemd/systemd-coredump %P %u
"""


def test_sysctl_values_lines_and_errors():
    got = p.parse_sysctl(SYSCTL, "node/sysctl.txt")
    assert got["net.ipv4.ip_forward"] == p.Value("1", "node/sysctl.txt", 1, "net.ipv4.ip_forward = 1")
    assert got["net.bridge.bridge-nf-call-iptables"].line == 5
    assert got["kernel.core_pattern"].value == "|/usr/lib/systemd/systemd-coredump %P %u"  # '=' only splits once
    assert "fs.protected_regular" not in got  # sysctl's own complaints are not values
    assert p.parse_sysctl("vm.swappiness: 60\n")["vm.swappiness"].value == "60"  # busybox form
    with pytest.raises(InputError) as err:
        p.parse_sysctl("net.ipv4.ip_forward = 1\nthis is not a sysctl line\n", "node/sysctl.txt")
    assert err.value.line == 2 and "node/sysctl.txt" in str(err.value)


def test_modules():
    text = (
        "br_netfilter 32768 0 - Live 0x0000000000000000\n"
        "bridge 311296 1 br_netfilter, Live 0x0000000000000000\n"
        "ip_vs 200704 6 ip_vs_rr,ip_vs_wrr,[permanent], Loading 0x0\n"
    )
    mods = p.parse_modules(text)
    assert mods["bridge"] == p.Module("bridge", 311296, 1, ("br_netfilter",), "Live", 2)
    assert mods["br_netfilter"].used_by == () and mods["ip_vs"].state == "Loading"
    assert mods["ip_vs"].used_by == ("ip_vs_rr", "ip_vs_wrr", "[permanent]")
    with pytest.raises(InputError) as err:
        p.parse_modules("bridge 311296 1 - Live 0x0\nbroken\n")
    assert err.value.line == 2


def test_kernel_version():
    assert p.parse_kernel_version("6.1.0-27-cloud-amd64\n") == (6, 1, 0)
    assert p.parse_kernel_version("5.15.153.1-microsoft-standard-WSL2") == (5, 15, 153)
    assert p.parse_kernel_version("6.8") == (6, 8, 0)
    with pytest.raises(InputError):
        p.parse_kernel_version("Linux")


METRICS = """# HELP kubeproxy_sync_proxy_rules_last_timestamp_seconds The last time proxy rules were successfully synced
# TYPE kubeproxy_sync_proxy_rules_last_timestamp_seconds gauge
kubeproxy_sync_proxy_rules_last_timestamp_seconds 1.733184e+09
kubeproxy_sync_proxy_rules_iptables_total{table="nat"} 23409
kubeproxy_sync_proxy_rules_iptables_total{table="filter"} 12
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="0.5"} 3
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="1"} 9
kubeproxy_sync_proxy_rules_duration_seconds_bucket{le="+Inf"} 10
kubeproxy_sync_proxy_rules_duration_seconds_sum 6.5
kubeproxy_sync_proxy_rules_duration_seconds_count 10
rest_client_requests_total{code="200",host="10.0.0.1:6443",method="GET"} 7 1733184000000
"""


def test_metrics_samples_labels_histograms():
    m = p.parse_metrics(METRICS, "node/kube-proxy/metrics.txt")
    assert m.get("kubeproxy_sync_proxy_rules_iptables_total", table="nat") == 23409
    assert m.get("kubeproxy_sync_proxy_rules_iptables_total", table="filter") == 12
    assert m.get("kubeproxy_sync_proxy_rules_iptables_total", table="raw") is None
    assert m.line_of("kubeproxy_sync_proxy_rules_last_timestamp_seconds") == 3
    assert m.histogram_mean("kubeproxy_sync_proxy_rules_duration_seconds") == pytest.approx(0.65)
    assert m.histogram_quantile("kubeproxy_sync_proxy_rules_duration_seconds", 0.5) == 1.0  # 5 of 10 fall by le=1
    assert m.histogram_quantile("kubeproxy_sync_proxy_rules_duration_seconds", 0.95) == float("inf")
    assert m.get("rest_client_requests_total", code="200") == 7  # a sample with a timestamp
    with pytest.raises(InputError) as err:
        p.parse_metrics('up 1\nup{job="x"} not-a-number\n', "m.txt")
    assert err.value.line == 2


CONFIG = """apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clusterCIDR: 10.244.0.0/16
iptables:
  masqueradeAll: false
  syncPeriod: 30s
ipvs:
  strictARP: true
  syncPeriod: 10s   # ipvs's own
  excludeCIDRs:
  - 10.0.0.0/8
mode: "ipvs"
"""


def test_kube_proxy_config_values_and_the_line_of_a_nested_key():
    c = p.parse_kube_proxy_config(CONFIG, "node/kube-proxy/config.yaml")
    assert c.mode == "ipvs" and c.mode_explicit and c.get("ipvs.strictARP") is True
    # evidence points at the key's own line, not at the first line with the same last part
    assert (c.line_of("iptables.syncPeriod"), c.line_of("ipvs.syncPeriod"), c.line_of("mode")) == (6, 9, 12)
    assert c.line_of("nftables.syncPeriod") is None and c.line_of("ipvs.excludeCIDRs") == 10
    j = p.parse_kube_proxy_config(
        '{\n  "kind": "KubeProxyConfiguration",\n  "iptables": {\n    "syncPeriod": "30s"\n  },\n'
        '  "ipvs": {\n    "syncPeriod": "10s"\n  },\n  "mode": "ipvs"\n}\n'
    )
    assert (j.line_of("iptables.syncPeriod"), j.line_of("ipvs.syncPeriod"), j.line_of("mode")) == (4, 7, 9)
    one = p.parse_kube_proxy_config('{"kind": "KubeProxyConfiguration", "mode": "nftables"}')
    assert one.mode == "nftables" and one.line_of("mode") == 1
    empty = p.parse_kube_proxy_config("kind: KubeProxyConfiguration\n")
    assert empty.mode == "iptables" and not empty.mode_explicit  # kube-proxy's default on Linux


def test_kube_proxy_config_errors_name_the_file_and_line():
    with pytest.raises(InputError) as err:
        p.parse_kube_proxy_config("kind: KubeProxyConfiguration\nmode: [unclosed\n", "config.yaml")
    assert err.value.source == "config.yaml" and err.value.line is not None
    with pytest.raises(InputError, match="not KubeProxyConfiguration"):
        p.parse_kube_proxy_config("kind: KubeletConfiguration\n")
    with pytest.raises(InputError, match="mapping"):
        p.parse_kube_proxy_config("- a\n- b\n")


def test_conntrack_stats_summed_over_cpus():
    text = (
        "cpu=0   \tfound=1 invalid=3 insert=0 insert_failed=2 drop=1 early_drop=0 error=0 search_restart=5\n"
        "cpu=1   \tfound=0 invalid=4 insert=0 insert_failed=0 drop=0 early_drop=0 error=0 search_restart=1\n"
    )
    got = p.parse_conntrack_stats(text)
    assert got["invalid"] == 7 and got["insert_failed"] == 2 and got["search_restart"] == 6 and "cpu" not in got
    with pytest.raises(InputError) as err:
        p.parse_conntrack_stats(text + "garbage\n")
    assert err.value.line == 3


# `ip -j rule show` as iproute2 6.x prints it (from a lab namespace), tagged with the family as kpdiag collects it
IP_RULES = """[{"family":"inet","priority":0,"src":"all","table":"local"},
 {"family":"inet","priority":9,"src":"all","fwmark":"0x200","fwmask":"0xf00","table":"2004"},
 {"family":"inet","priority":100,"src":"10.1.0.0","srclen":16,"table":"100"},
 {"family":"inet","priority":200,"src":"all","dst":"10.2.0.0","dstlen":16,"iif":"eth0","iif_detached":null,"table":"200"},
 {"family":"inet","priority":300,"not":null,"src":"10.3.0.0","srclen":24,"action":"unreachable"},
 {"family":"inet","priority":400,"src":"all","ipproto":"udp","dport":5353,"action":"prohibit"},
 {"family":"inet","priority":700,"src":"all","uid_start":1000,"uid_end":2000,"table":"100"},
 {"family":"inet","priority":800,"src":"all","sport_start":1000,"sport_end":2000,"table":"100"},
 {"family":"inet","priority":32766,"src":"all","table":"main","suppress_prefixlen":0},
 {"family":"inet6","priority":50,"src":"fd00::","srclen":8,"table":"300"},
 {"family":"inet","priority":32767,"src":"all","table":"default"}]"""


def test_ip_rules_read_as_ip_rule_prints_them():
    rules = p.parse_ip_rules(IP_RULES, "node/ip-rule.json")
    v4 = [r.text() for r in rules if r.family == 4]
    assert v4 == [
        "0: from all lookup local",
        "9: from all fwmark 0x200/0xf00 lookup 2004",
        "100: from 10.1.0.0/16 lookup 100",
        "200: from all to 10.2.0.0/16 iif eth0 lookup 200",
        "300: not from 10.3.0.0/24 unreachable",
        "400: from all ipproto udp dport 5353 prohibit",
        "700: from all uidrange 1000-2000 lookup 100",
        "800: from all sport 1000-2000 lookup 100",
        "32766: from all lookup main suppress_prefixlength 0",
        "32767: from all lookup default",
    ]
    six = [r for r in rules if r.family == 6]
    assert [r.text() for r in six] == ["50: from fd00::/8 lookup 300"]
    by_prio = {r.priority: r for r in rules if r.family == 4}
    assert by_prio[0].default and by_prio[32767].default and not by_prio[32766].default  # suppress: not the plain rule
    assert by_prio[9].fwmark == 0x200 and by_prio[9].fwmask == 0xF00
    assert by_prio[300].invert and by_prio[300].action == "unreachable" and by_prio[300].table is None
    assert by_prio[400].dport == (5353, 5353) and by_prio[800].sport == (1000, 2000)
    assert by_prio[700].unknown == ("uidrange 1000-2000",)
    assert by_prio[100].line == 3  # the entry's position, for evidence
    # a redacted bundle's mapped address may carry host bits: the kernel keeps the network address
    (r,) = p.parse_ip_rules('[{"priority": 1, "src": "119.126.35.226", "srclen": 16, "table": "9"}]', "x")
    assert r.src == "119.126.0.0/16"


@pytest.mark.parametrize(
    "text, where",
    [
        ("not json", None),
        ('{"priority": 0}', None),
        ('[{"priority": 0, "table": "main"}, 5]', 2),
        ('[{"priority": "x", "table": "main"}]', 1),
        ('[{"priority": 5, "action": "teleport"}]', 1),
        ('[{"priority": 5, "family": "inet7", "table": "main"}]', 1),
    ],
)
def test_ip_rules_errors_name_the_file_and_entry(text, where):
    with pytest.raises(InputError) as err:
        p.parse_ip_rules(text, "node/ip-rule.json")
    assert "node/ip-rule.json" in str(err.value) and err.value.line == where


def test_processes_first_pid_of_each_name():
    text = "1 systemd\n812 kube-proxy\n915 kube-proxy\n77 cilium-agent\nnot a line\n 42 \n300 containerd shim\n"
    got = p.parse_processes(text, "node/processes.txt")
    assert got == {"systemd": "1", "kube-proxy": "812", "cilium-agent": "77", "containerd shim": "300"}
    assert p.parse_processes("", "node/processes.txt") == {}
