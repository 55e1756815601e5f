"""kube-proxy's effective configuration (kpdiag/state/kpsettings.py): file, flags and log as kube-proxy combines them."""

from __future__ import annotations

from kpdiag.bundle import sources
from kpdiag.parse.node import parse_cmdline
from kpdiag.state.kpsettings import parse_flags
from tests.given import given

CMD = sources.KP_CMDLINE


def _settings(**kw):
    return given(**kw).state().kube_proxy_settings


def test_the_file_alone_gives_each_field_with_its_line():
    eff = _settings()
    assert eff["mode"].value == "iptables" and eff["mode"].origin == "config"
    assert eff["clusterCIDR"].value == ("10.244.0.0/16",)
    ev = eff["clusterCIDR"].evidence()
    assert (ev.source, ev.line, ev.text) == (sources.KP_CONFIG, 6, "clusterCIDR: 10.244.0.0/16")
    # not set in the file: kube-proxy's default, said so
    assert eff["detectLocalMode"].value == "ClusterCIDR" and eff["detectLocalMode"].origin == "default"
    assert "not set" in eff["nodePortAddresses"].evidence().text and eff["nodePortAddresses"].value == ()


def test_with_config_flags_are_ignored_but_hostname_override_wins():
    """kube-proxy ignores the configuration flags when --config is given, except --hostname-override."""
    cmdline = (
        "/usr/local/bin/kube-proxy\n--config=/var/lib/kube-proxy/config.conf\n--hostname-override=Node-7\n"
        "--cluster-cidr=10.99.0.0/16\n--masquerade-all\n--nodeport-addresses\n192.168.9.0/24\n"
    )
    eff = _settings(files={CMD: cmdline})
    assert eff["hostnameOverride"].value == "node-7" and eff["hostnameOverride"].origin == "flag"
    assert eff["hostnameOverride"].evidence().line == 3
    assert eff["clusterCIDR"].value == ("10.244.0.0/16",) and eff["clusterCIDR"].origin == "config"
    assert eff["masqueradeAll"].value is False
    assert {s.name for s in eff.ignored} == {"clusterCIDR", "masqueradeAll", "nodePortAddresses"}
    npa = next(s for s in eff.ignored if s.name == "nodePortAddresses")
    assert npa.value == ("192.168.9.0/24",) and npa.text == "--nodeport-addresses 192.168.9.0/24" and npa.line == 6


def test_without_config_the_flags_are_the_configuration():
    cmdline = "kube-proxy\n--proxy-mode=nftables\n--cluster-cidr=10.42.0.0/16,fd00:42::/56\n--detect-local-mode=BridgeInterface\n--pod-bridge-interface=cni0\n"
    eff = _settings(files={CMD: cmdline})
    assert eff.from_flags_only
    assert eff["mode"].value == "nftables" and eff["mode"].origin == "flag"
    assert eff["clusterCIDR"].value == ("10.42.0.0/16", "fd00:42::/56")
    assert eff["detectLocal.bridgeInterface"].value == "cni0"
    # the file the bundle holds is not read by this kube-proxy: nothing of it is taken
    assert eff["metricsBindAddress"].origin == "default" and eff["metricsBindAddress"].value == "127.0.0.1:10249"
    assert any("no --config" in n for n in eff.notes)


def test_masquerade_all_is_read_from_the_section_of_the_mode():
    nft = "mode: nftables\nnftables:\n  masqueradeAll: true\niptables:\n  masqueradeAll: false\n"
    eff = _settings(files={sources.KP_CONFIG: "kind: KubeProxyConfiguration\n" + nft})
    assert eff["masqueradeAll"].value is True and eff["masqueradeAll"].evidence().line == 4


def test_log_facts_in_the_wordings_of_several_releases():
    log = "\n".join(
        [
            'I0719 14:55:07.033936       1 server.go:659] "kube-proxy running in dual-stack mode" primary ipFamily="IPv4"',
            'I0202 05:52:21.484287       1 server_others.go:183] "kube-proxy running in dual-stack mode" ipFamily=IPv4',
            "I0709 10:43:06.551606       1 server_others.go:206] kube-proxy running in dual-stack mode, IPv4-primary",
            'I0101 00:00:00.1 1 server_linux.go:1] "No iptables support for family" ipFamily="IPv6"',
            'I0101 00:00:00.1 1 server_linux.go:1] "No kernel support for family" ipFamily="IPv6"',
            'I0101 00:00:00.1 1 server.go:1] "kube-proxy running in single-stack mode" ipFamily="IPv4"',
            'I0101 00:00:00.1 1 server_others.go:1] "kube-proxy running in single-stack mode: secondary ipFamily is not supported" ipFamily=IPv6',
            'I0101 00:00:00.1 1 server.go:1] "Successfully retrieved NodeIPs" NodeIPs=["192.168.50.1","fd00:50::1"]',
            "I0101 00:00:00.1 1 server.go:1] \"Can't determine this node's IP, assuming loopback; if this is incorrect, please set the --bind-address flag\"",
            'I0409 03:23:53.096874       1 server_others.go:421] "Detect-local-mode set to ClusterCIDR, but no cluster CIDR for family" ipFamily="IPv6"',
            'I1203 00:02:11.101911       1 server_linux.go:66] "Using nftables proxy"',
        ]
    )
    eff = _settings(files={sources.KP_LOG: log})
    kinds = [(f.kind, f.values) for f in eff.log]
    assert kinds == [
        ("stack", ("dual", "IPv4")),
        ("stack", ("dual", "IPv4")),
        ("stack", ("dual", "IPv4")),
        ("family-unsupported", ("iptables", "IPv6")),
        ("family-unsupported", ("kernel", "IPv6")),
        ("stack", ("single", "IPv4")),
        ("family-unsupported", ("secondary", "IPv6")),
        ("node-ips", ('"192.168.50.1","fd00:50::1"',)),
        ("node-ip-loopback", ("Can't determine this node's IP",)),
        ("detect-local-unset", ("ClusterCIDR", "no cluster CIDR for family")),
        ("mode", ("nftables",)),
    ]
    assert eff.log_evidence(eff.last("mode")).line == 11


def test_only_a_log_is_enough_and_nothing_at_all_is_none():
    assert _settings(drop=(sources.KP_CONFIG,)) is not None
    assert _settings(drop=("node/kube-proxy/",)) is None


def test_flags_parse_as_pflag_does():
    cmd = parse_cmdline("kube-proxy\n-v=2\n--masquerade-all\n--bind-address\n10.0.0.5\n--masquerade-all=false\n")
    assert parse_flags(cmd.args) == {
        "v": ("2", 2, "-v=2"),
        "bind-address": ("10.0.0.5", 4, "--bind-address 10.0.0.5"),
        "masquerade-all": ("false", 6, "--masquerade-all=false"),
    }
    # a NUL-separated copy of /proc/PID/cmdline reads the same
    assert [a for _, a in parse_cmdline("kube-proxy\0--config=/x\0").args] == ["kube-proxy", "--config=/x"]
