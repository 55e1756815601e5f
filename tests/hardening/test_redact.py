"""collect --redact: no original name or non-cluster address survives anywhere, and analyze still works."""

import ipaddress
import json
import os
import re

import pytest

from kpdiag.bundle.store import Bundle
from kpdiag.commands.diagnose import analyze_state
from kpdiag.bundle.redact import redact_files
from kpdiag.state.node import NodeState
from tests.conftest import FIXTURES


def _files(name):
    root = os.path.join(FIXTURES, name)
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            if n == "scenario.json":
                continue
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, root)] = open(p, "rb").read()
    return out


@pytest.mark.parametrize("name", ["cluster-node-drift", "svc-selector-typo", "ipvs-drift", "healthy-nftables"])
def test_redacted_bundle_leaks_nothing_and_diagnoses_the_same(name):
    files = _files(name)
    red, r = redact_files(files, salt="test")
    blob = b"\n".join(red.values()).decode()
    label_keys = set(
        re.findall(r'"([A-Za-z0-9_.-]+)": "', b"\n".join(files.values()).decode())
    )  # kept: keys, not values
    secrets_ = [n for n in r.global_names if n not in label_keys]
    assert secrets_
    for original in secrets_:
        assert not re.search(rf"(?<!\w){re.escape(original)}(?![\w-])", blob), f"{original} survived"
    for ip in r.ips:
        assert not re.search(rf"(?<![\w.]){re.escape(ip)}(?![\w.])", blob), f"{ip} survived"
    assert (
        "192.168.50.1" in r.ips or name.startswith("svc") or name.startswith("ipvs")
    )  # the node's own address is hidden
    assert any(ip.startswith("10.") for ip in r.ips)  # cluster addresses too (mapped keeping their prefixes)
    before = analyze_state(NodeState(Bundle.from_files("a", files)))
    after = analyze_state(NodeState(Bundle.from_files("b", red)))
    assert sorted(f.id for f in before.findings) == sorted(f.id for f in after.findings)
    # the same salt gives the same mapping: bundles of several nodes stay comparable
    red2, _ = redact_files(files, salt="test")
    assert red2 == red


def test_ipv6_and_macs():
    files = {
        "node/ip-addr.json": b'[{"ifname": "eth0", "address": "0a:1b:72:6b:93:83", "broadcast": "ff:ff:ff:ff:ff:ff", "addr_info": [{"family": "inet6", "local": "2a01:4f8:c17:1::2", "prefixlen": 64}, {"family": "inet6", "local": "fe80::21b:72ff:fe6b:9383", "prefixlen": 64}, {"family": "inet6", "local": "::1", "prefixlen": 128}]}]',
        "node/ip-route.json": b'[{"dst": "2a01:4f8:c17:1::/64", "dev": "eth0"}]',
    }
    red, r = redact_files(files, salt="x")
    text = red["node/ip-addr.json"].decode()
    # MACs and EUI-64 link-local addresses carry the hardware address: both are replaced (ff:ff:ff:ff:ff:ff and ::1 say nothing)
    assert "2a01:4f8:c17:1::2" not in text and "0a:1b:72:6b:93:83" not in text and "fe6b:9383" not in text
    assert "ff:ff:ff:ff:ff:ff" in text and '"::1"' in text
    doc = json.loads(text)
    local = ipaddress.ip_address(doc[0]["addr_info"][0]["local"])
    ll = ipaddress.ip_address(doc[0]["addr_info"][1]["local"])
    assert local.version == 6 and ll in ipaddress.ip_network("fe80::/64")
    # the route still covers the address: prefixes are preserved, a network stays a network of the same length
    route = ipaddress.ip_network(json.loads(red["node/ip-route.json"])[0]["dst"])
    assert route.prefixlen == 64 and local in route and str(route) != "2a01:4f8:c17:1::/64"


def test_images_public_components_and_kpdiag_own_kept_others_replaced():
    from kpdiag.bundle.redact import Redactor

    r = Redactor(salt="x")
    assert r._image("registry.k8s.io/kube-proxy:v1.31.4") == "registry.k8s.io/kube-proxy:v1.31.4"
    assert r._image("kpdiag:0.1.0@sha256:" + "a" * 64) == "kpdiag:0.1.0@sha256:" + "a" * 64
    private = r._image("registry.acme.internal/payments/api:2.3")
    assert "acme" not in private and "payments" not in private
