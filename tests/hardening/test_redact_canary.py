"""Redaction leaks nothing: a healthy nftables-mode bundle gets a canary in every field of every file type kpdiag
writes (names, labels, annotations, nodeName, host names/FQDNs, the API server's name, IPv4 before punctuation,
IPv6 compressed/expanded/with a zone/IPv4-mapped/in CIDRs, MACs, tokens, PEM, env values, log lines, nft chain and
set names, map elements, comments). `collect --redact`-style redaction and `kpdiag redact` must leave none of them
anywhere (every file, the manifest included), and the redacted bundle must analyze to the same finding ids."""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import tarfile

import pytest

from kpdiag.bundle.store import write_bundle
from kpdiag.cli import main
from kpdiag.commands.pipeline import analyze_bundle
from kpdiag.bundle.redact import redact_files
from kpdiag.bundle.scrub import scrub_secrets
from tests.conftest import FIXTURES

BASE = "cluster-nft-consistent"  # a healthy node (nftables mode) with its Services, EndpointSlices and Node
M = "q7x"  # every name canary carries this marker
NS, SVC, EXT, POD, NODE = f"canaryns-{M}", f"canarysvc-{M}", f"canaryext-{M}", f"canarypod-{M}-abc12", f"canarynode-{M}"
PORT = f"cnryport-{M}"  # a port name (15 characters at most)
LABEL, ANNOT, ZONE, CONTAINER = f"canarylabel-{M}", f"canaryannot-{M} owner", f"canaryzone-{M}", f"canaryctr-{M}"
HOST, API, DB, LB = (
    f"canaryhost-{M}.canarycorp-{M}.com",
    f"canaryapi-{M}.canarycorp-{M}.net",
    f"canarydb-{M}.canarycorp-{M}.com",
    f"canarylb-{M}.elb.canarycorp-{M}.com",
)
PEER, NODE_IP, EXT_IP, LB_IP, API_IP = "52.18.44.21", "192.168.77.21", "52.18.44.24", "52.18.44.23", "52.18.44.25"
POD_IP, CLUSTER_IP = "10.244.7.21", "10.96.0.77"
V6, V6_NET, V6_ULA = "2a05:d018:abcd::21", "2a05:d018:abcd::/64", "fd12:3456:789a::21"
V6_EXPANDED = "2a05:d018:abcd:0000:0000:0000:0000:0022"
V6_LL = "fe80::1c2:3ff:fe44:5566"  # EUI-64: carries the MAC
MAPPED = "::ffff:52.18.44.22"
MAC, MAC_UPPER = "0a:1b:72:6b:93:83", "0A:1B:72:6B:93:84"
JWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6ImNhbmFyeSJ9.eyJzdWIiOiJjYW5hcnktcTd4In0.c2lnbmF0dXJlLWNhbmFyeS1xN3g"
BEARER = f"canarybearer-{M}-0123456789"
KC_TOKEN, PASSWORD, ENV_VALUE = f"canarykctoken-{M}", f"canarypass-{M}", f"canaryenv-{M}-secret"
PEM_BODY = base64.b64encode(f"canary-{M}-private-key-material".encode()).decode()
PEM = f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----"
KEY_DATA = base64.b64encode(PEM.encode()).decode()

# what must not survive, in every spelling a tool could print
FORBIDDEN = [
    M,
    PEER,
    NODE_IP,
    EXT_IP,
    LB_IP,
    API_IP,
    POD_IP,
    "52.18.44.22",
    "2a05:d018:abcd",
    "2a05:d018:abcd:0:0:0:0:22",
    V6_EXPANDED,
    "fd12:3456:789a",
    "1c2:3ff:fe44:5566",
    "fe44:5566",
    MAC,
    MAC_UPPER,
    "0a:1b:72:6b:93:84",
    JWT.split(".")[0],
    JWT.split(".")[1],
    PEM_BODY,
    KEY_DATA[:40],
    "192.168.77.",
    "10.244.7.",
]
FORBIDDEN_RE = re.compile("|".join(re.escape(s) for s in FORBIDDEN), re.I)


def _read_fixture(name: str) -> dict[str, bytes]:
    root = os.path.join(FIXTURES, name)
    out = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            if n != "scenario.json":
                p = os.path.join(dirpath, n)
                out[os.path.relpath(p, root)] = open(p, "rb").read()
    return out


def _json_add(files, rel, items):
    doc = json.loads(files[rel])
    doc["items"].extend(items)
    files[rel] = json.dumps(doc, indent=1).encode()


def canary_bundle() -> dict[str, bytes]:
    files = _read_fixture(BASE)
    labels = {"app": SVC, "team": LABEL, "topology.kubernetes.io/zone": ZONE}
    annotations = {
        "example.com/owner": ANNOT,
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps({"env": ENV_VALUE}),
    }
    _json_add(
        files,
        "cluster/services.json",
        [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": SVC,
                    "namespace": NS,
                    "uid": "5b8c1f9e-2b1d-4c3e-9f7a-1a2b3c4d5e6f",
                    "labels": labels,
                    "annotations": annotations,
                },
                "spec": {
                    "type": "LoadBalancer",
                    "clusterIP": CLUSTER_IP,
                    "clusterIPs": [CLUSTER_IP],
                    "externalIPs": [EXT_IP],
                    "selector": {"app": SVC},
                    "ports": [{"name": PORT, "port": 80, "targetPort": PORT, "protocol": "TCP", "nodePort": 31777}],
                },
                "status": {"loadBalancer": {"ingress": [{"ip": LB_IP, "hostname": LB}]}},
            },
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": EXT, "namespace": NS, "labels": {"team": LABEL}},
                "spec": {"type": "ExternalName", "externalName": DB},
            },
        ],
    )
    _json_add(
        files,
        "cluster/endpointslices.json",
        [
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "addressType": "IPv4",
                "metadata": {
                    "name": f"{SVC}-x7k2p",
                    "namespace": NS,
                    "labels": {"kubernetes.io/service-name": SVC, "team": LABEL},
                },
                "endpoints": [
                    {
                        "addresses": [POD_IP],
                        "conditions": {"ready": True, "serving": True, "terminating": False},
                        "nodeName": NODE,
                        "hostname": POD,
                        "targetRef": {"kind": "Pod", "name": POD, "namespace": NS},
                    }
                ],
                "ports": [{"name": PORT, "port": 8080, "protocol": "TCP"}],
            },
        ],
    )
    files["cluster/pods.json"] = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "List",
            "metadata": {},
            "items": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": POD,
                        "namespace": NS,
                        "labels": labels,
                        "annotations": annotations,
                        "ownerReferences": [{"kind": "ReplicaSet", "name": f"{SVC}-7d9f8"}],
                    },
                    "spec": {
                        "nodeName": NODE,
                        "hostname": POD,
                        "serviceAccountName": f"canarysa-{M}",
                        "containers": [
                            {
                                "name": CONTAINER,
                                "image": f"canaryreg-{M}.canarycorp-{M}.com/team/app:1.2",
                                "env": [{"name": "DB_PASSWORD", "value": ENV_VALUE}, {"name": "DB_HOST", "value": DB}],
                                "args": [f"--peer={PEER}", f"--api=https://{API}:6443"],
                                "ports": [{"name": PORT, "containerPort": 8080, "protocol": "TCP"}],
                            }
                        ],
                    },
                    "status": {
                        "phase": "Running",
                        "hostIP": NODE_IP,
                        "podIP": POD_IP,
                        "podIPs": [{"ip": POD_IP}, {"ip": V6}],
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }
            ],
        },
        indent=1,
    ).encode()
    _json_add(
        files,
        "cluster/nodes.json",
        [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": NODE,
                    "labels": {"kubernetes.io/hostname": NODE, "topology.kubernetes.io/zone": ZONE, "team": LABEL},
                    "annotations": {"node.alpha.kubernetes.io/ttl": "0", "example.com/rack": ANNOT},
                },
                "spec": {
                    "podCIDR": "10.244.7.0/24",
                    "podCIDRs": ["10.244.7.0/24", V6_NET],
                    "providerID": f"aws:///eu-west-1a/i-0canary{M}",
                },
                "status": {
                    "addresses": [
                        {"type": "InternalIP", "address": NODE_IP},
                        {"type": "ExternalIP", "address": EXT_IP},
                        {"type": "Hostname", "address": HOST},
                        {"type": "InternalIP", "address": V6},
                    ],
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        ],
    )
    kubeconfig = (
        f"apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: {KEY_DATA}\n"
        f"    server: https://{API}:6443\n  name: default\nusers:\n- name: default\n  user:\n    token: {KC_TOKEN}\n"
        f"    client-key-data: {KEY_DATA}\n"
    )
    files["cluster/kube-proxy-configmap.json"] = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kube-proxy", "namespace": "kube-system", "labels": {"team": LABEL}},
            "data": {
                "config.conf": files["node/kube-proxy/config.yaml"].decode() + f"hostnameOverride: {NODE}\n",
                "kubeconfig.conf": kubeconfig,
                "ca.key": PEM,
            },
        },
        indent=1,
    ).encode()

    # kube-proxy's nftables: a chain per service port and endpoint, a map element, a set element, comments
    nft = json.loads(files["node/nft-ruleset.json"])
    svc_chain = f"service-CNRYAAAA-{NS}/{SVC}/tcp/{PORT}"
    ep_chain = f"endpoint-CNRYAAAB-{NS}/{SVC}/tcp/{PORT}__{POD_IP}/8080"
    ext_chain = f"external-CNRYAAAC-{NS}/{SVC}/tcp/{PORT}"
    for item in nft["nftables"]:
        body = item.get("map") or item.get("set") or {}
        if body.get("name") == "service-ips":
            body["elem"].append([{"concat": [CLUSTER_IP, "tcp", 80]}, {"goto": {"target": svc_chain}}])
            body["elem"].append([{"concat": [EXT_IP, "tcp", 80]}, {"goto": {"target": ext_chain}}])
        if body.get("name") == "cluster-ips":
            body["elem"].append(CLUSTER_IP)
    table = {"family": "ip", "table": "kube-proxy"}
    nft["nftables"] += [
        {"chain": {**table, "name": svc_chain, "handle": 901}},
        {"chain": {**table, "name": ext_chain, "handle": 902}},
        {"chain": {**table, "name": ep_chain, "handle": 903}},
        {
            "set": {
                **table,
                "name": f"affinity-CNRYAAAD-{NS}/{SVC}/tcp/{PORT}__{POD_IP}/8080",
                "type": "ipv4_addr",
                "handle": 904,
                "comment": f"{NS}/{SVC}:{PORT} affinity",
                "elem": [PEER],
            }
        },
        {
            "rule": {
                **table,
                "chain": svc_chain,
                "handle": 905,
                "comment": f"{NS}/{SVC}:{PORT} cluster IP",
                "expr": [
                    {
                        "match": {
                            "op": "==",
                            "left": {"payload": {"protocol": "ip", "field": "daddr"}},
                            "right": CLUSTER_IP,
                        }
                    },
                    {
                        "match": {
                            "op": "!=",
                            "left": {"payload": {"protocol": "ip", "field": "saddr"}},
                            "right": {"prefix": {"addr": "10.244.0.0", "len": 16}},
                        }
                    },
                    {"jump": {"target": "mark-for-masquerade"}},
                ],
            }
        },
        {
            "rule": {
                **table,
                "chain": svc_chain,
                "handle": 906,
                "expr": [
                    {
                        "vmap": {
                            "key": {"numgen": {"mode": "random", "mod": 1, "offset": 0}},
                            "data": {"set": [[0, {"goto": {"target": ep_chain}}]]},
                        }
                    }
                ],
            }
        },
        {"rule": {**table, "chain": ext_chain, "handle": 907, "expr": [{"goto": {"target": svc_chain}}]}},
        {
            "rule": {
                **table,
                "chain": ep_chain,
                "handle": 908,
                "expr": [
                    {"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, "right": "tcp"}},
                    {"dnat": {"addr": POD_IP, "port": 8080}},
                ],
            }
        },
    ]
    files["node/nft-ruleset.json"] = json.dumps(nft).encode()

    ipt_line = (
        f'-A INPUT -s {PEER}/32 -d {NODE_IP}/32 -p tcp -m comment --comment "{NS}/{SVC}:{PORT} peer={PEER}." '
        f"-m mac --mac-source {MAC_UPPER} -j ACCEPT\n"
    )
    for rel in ("node/iptables-save.txt", "node/iptables-nft-save.txt"):
        text = files[rel].decode()
        files[rel] = (
            text.replace("-A INPUT ", ipt_line + "-A INPUT ", 1).encode()
            if "-A INPUT " in text
            else (text + "*filter\n" + ipt_line + "COMMIT\n").encode()
        )
    files["node/ip6tables-save.txt"] = (
        f'*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -s {V6_NET} -d {V6}/128 -m comment --comment "{NS}/{SVC}:{PORT}" -j ACCEPT\n'
        f"-A INPUT -s {V6_EXPANDED}/128 -j ACCEPT\n-A INPUT -s {MAPPED}/128 -j ACCEPT\nCOMMIT\n"
    ).encode()

    addrs = json.loads(files["node/ip-addr.json"])
    addrs.append(
        {
            "ifindex": 77,
            "ifname": "eth7",
            "mtu": 1500,
            "operstate": "UP",
            "address": MAC,
            "broadcast": "ff:ff:ff:ff:ff:ff",
            "addr_info": [
                {"family": "inet", "local": NODE_IP, "prefixlen": 24, "broadcast": "192.168.77.255", "scope": "global"},
                {"family": "inet6", "local": V6, "prefixlen": 64, "scope": "global"},
                {"family": "inet6", "local": V6_ULA, "prefixlen": 48, "scope": "global"},
                {"family": "inet6", "local": V6_LL, "prefixlen": 64, "scope": "link"},
            ],
        }
    )
    files["node/ip-addr.json"] = json.dumps(addrs, indent=1).encode()
    routes = json.loads(files["node/ip-route.json"])
    routes += [
        {
            "dst": "192.168.77.0/24",
            "dev": "eth7",
            "scope": "link",
            "prefsrc": NODE_IP,
            "table": "main",
            "type": "unicast",
        },
        {"dst": V6_NET, "dev": "eth7", "table": "main", "type": "unicast", "scope": "global"},
        {
            "dst": "52.18.44.0/24",
            "gateway": "192.168.77.1",
            "dev": "eth7",
            "table": "main",
            "type": "unicast",
            "scope": "global",
        },
    ]
    files["node/ip-route.json"] = json.dumps(routes, indent=1).encode()

    files["node/sysctl.txt"] += f"net.ipv4.conf.eth7.peer_note = {PEER} {MAC}\n".encode()
    files["node/conntrack.txt"] = (
        f"tcp      6 431999 ESTABLISHED src={PEER} dst={CLUSTER_IP} sport=40000 dport=80 src={POD_IP} dst={PEER} "
        f"sport=8080 dport=40000 [ASSURED] mark=0 use=1\n"
        f"tcp      6 120 TIME_WAIT src={V6} dst=fd00::77 sport=40001 dport=80 src={V6_ULA} dst={V6} "
        f"sport=8080 dport=40001 [ASSURED] mark=0 use=1\n"
    ).encode()
    files["node/ipvsadm.txt"] = (
        f"-A -t {CLUSTER_IP}:80 -s rr\n-a -t {CLUSTER_IP}:80 -r {NODE_IP}:8080 -m -w 1\n-A -t [{V6}]:80 -s rr\n".encode()
    )
    files["node/ipset.txt"] = (
        files.get("node/ipset.txt", b"") + f"add KUBE-LOOP-BACK {POD_IP},tcp:8080,{POD_IP}\n".encode()
    )
    files["node/kube-proxy/log.txt"] += (
        "\n".join(
            [
                f'I1203 00:03:00.000001       1 service.go:1]  "Adding new service port" portName="{NS}/{SVC}:{PORT}" servicePort="{CLUSTER_IP}:80/TCP"',
                f'I1203 00:03:00.000002       1 endpoints.go:1] "Updated endpoints" pod="{NS}/{POD}" node="{NODE}" hostname="{HOST}" labels="team={LABEL}"',
                f'E1203 00:03:00.000003       1 reflector.go:1] "Failed to list" err="Get \\"https://{API}:6443/api/v1/nodes\\": dial tcp {API_IP}:6443: i/o timeout"',
                f"E1203 00:03:00.000004       1 proxier.go:1] request failed Authorization: Bearer {BEARER} token={JWT} peer={PEER}.",
                f'I1203 00:03:00.000005       1 node.go:1] "Node addresses" addresses=[{V6} {V6_EXPANDED} {V6_LL}%eth7 {MAPPED} [{V6_ULA}]:443] hwaddr={MAC}',
                f'I1203 00:03:00.000006       1 server.go:1] "Using node name" node="{NODE}" password={PASSWORD} db={DB}',
            ]
        ).encode()
        + b"\n"
    )
    files["node/kube-proxy/config.yaml"] += f"hostnameOverride: {NODE}\nbindAddress: {NODE_IP}\n".encode()
    files["node/kube-proxy/metrics.txt"] = (
        files.get("node/kube-proxy/metrics.txt", b"")
        + (
            f'kubeproxy_sync_proxy_rules_endpoint_changes_total{{service="{NS}/{SVC}"}} 3\n'
            f'rest_client_requests_total{{code="200",host="{API}:6443",method="GET"}} 5\n'
        ).encode()
    )
    files["node/kube-proxy/healthz.json"] = json.dumps(
        {
            "lastUpdated": "2026-12-03T00:10:00Z",
            "currentTime": "2026-12-03T00:10:01Z",
            "nodeHealthy": True,
            "hostname": HOST,
            "kpdiag_http_status": 200,
        }
    ).encode()
    files["probes/dns.json"] = json.dumps(
        {
            "name": f"{SVC}.{NS}.svc.cluster.local",
            "nameservers": ["10.96.0.10"],
            "addresses": [CLUSTER_IP],
            "result": "resolved",
            "error": None,
        },
        indent=1,
    ).encode()
    files["probes/service.json"] = json.dumps(
        {
            "schema": "kpdiag.probes/v1",
            "source": POD_IP,
            "raw": True,
            "raw_skipped_reason": None,
            "packets_sent": 1,
            "results": [
                {
                    "target": f"{CLUSTER_IP}:80/tcp",
                    "kind": "tcp-syn",
                    "result": "open",
                    "from": PEER,
                    "rtt_ms": 1.0,
                    "detail": {},
                }
            ],
        },
        indent=1,
    ).encode()
    manifest = json.loads(files["kpdiag.json"])
    manifest.update(
        {
            "node": NODE,
            "collected_by": f"kpdiag on {HOST}",
            "service": f"{NS}/{SVC}",
            "errors": [
                {
                    "source": "cluster/version.json",
                    "error": f"GET https://{API}:6443/version from {PEER}.: Authorization: Bearer {BEARER}",
                }
            ],
        }
    )
    files["kpdiag.json"] = json.dumps(manifest, indent=1).encode()
    return files


def _leaks(files: dict[str, bytes]) -> list[str]:
    out = []
    for rel, data in files.items():
        text = data.decode("utf-8", "replace")
        for m in FORBIDDEN_RE.finditer(text):
            out.append(f"{rel}: {text[max(0, m.start() - 60) : m.end() + 20]!r}")
        for secret in (KC_TOKEN, PASSWORD, ENV_VALUE, BEARER, "canary"):
            if secret.lower() in text.lower():
                out.append(f"{rel}: {secret}")
    return out


def _tree(path: str) -> dict[str, bytes]:
    if path.endswith(".tar.gz"):
        with tarfile.open(path) as tar:
            return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}
    out = {}
    for dirpath, _, names in os.walk(path):
        for n in names:
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, path)] = open(p, "rb").read()
    return out


def _finding_ids(path: str) -> list[str]:
    return sorted(f.id for f in analyze_bundle(path).findings)


def test_the_canaries_are_there_before():
    """The test's own premise: every canary is in the unredacted bundle, in every file it was put in."""
    files = canary_bundle()
    found = {rel for rel, data in files.items() if FORBIDDEN_RE.search(data.decode())}
    assert {
        "cluster/services.json",
        "cluster/endpointslices.json",
        "cluster/pods.json",
        "cluster/nodes.json",
        "cluster/kube-proxy-configmap.json",
        "node/nft-ruleset.json",
        "node/iptables-save.txt",
        "node/ip6tables-save.txt",
        "node/ip-addr.json",
        "node/ip-route.json",
        "node/sysctl.txt",
        "node/conntrack.txt",
        "node/ipvsadm.txt",
        "node/ipset.txt",
        "node/kube-proxy/log.txt",
        "node/kube-proxy/config.yaml",
        "node/kube-proxy/metrics.txt",
        "node/kube-proxy/healthz.json",
        "probes/dns.json",
        "probes/service.json",
        "kpdiag.json",
    } <= found


def test_collect_redact_leaves_no_canary_and_analyzes_the_same(tmp_path):
    files = canary_bundle()
    plain = str(tmp_path / "plain")
    manifest = json.loads(files.pop("kpdiag.json"))
    write_bundle(copy.deepcopy(files), plain, manifest)
    # what `kpdiag collect --redact` does with the collected files and manifest
    files["kpdiag.json"] = json.dumps(manifest).encode()
    red, redactor = redact_files(files, "canary-salt")
    red_manifest = json.loads(red.pop("kpdiag.json"))
    red_manifest["redacted"] = {"names": len(redactor.names), "addresses": len(redactor.ips)}
    out = str(tmp_path / "redacted")
    write_bundle(red, out, red_manifest)
    written = _tree(out)
    assert set(written) == set(_tree(plain))
    leaks = _leaks(written)
    assert not leaks, "\n".join(leaks[:30])
    for rel, data in written.items():  # still well-formed
        if rel.endswith(".json"):
            json.loads(data)
    before, after = _finding_ids(plain), _finding_ids(out)
    assert before == after and before, (before, after)
    # the canary Service is still one Service with one endpoint behind its ClusterIP, under its pseudonyms
    services = json.loads(written["cluster/services.json"])["items"]
    svc = next(s for s in services if s["metadata"]["name"] == redactor.names[SVC])
    assert (
        svc["metadata"]["namespace"] == redactor.names[NS] and svc["spec"]["ports"][0]["name"] == redactor.ports[PORT]
    )
    assert svc["spec"]["clusterIP"] == redactor.ips[CLUSTER_IP]
    nft = written["node/nft-ruleset.json"].decode()
    assert f"service-CNRYAAAA-{redactor.names[NS]}/{redactor.names[SVC]}/tcp/{redactor.ports[PORT]}" in nft
    assert f"__{redactor.ips[POD_IP]}/8080" in nft
    pods = json.loads(written["cluster/pods.json"])["items"]
    assert pods[0]["spec"]["nodeName"] == redactor.names[NODE] == json.loads(written["kpdiag.json"])["node"]


@pytest.mark.parametrize("archive", [False, True])
def test_kpdiag_redact_command(tmp_path, capsys, archive):
    files = canary_bundle()
    manifest = json.loads(files.pop("kpdiag.json"))
    src = str(tmp_path / ("plain.tar.gz" if archive else "plain"))
    write_bundle(files, src, manifest)
    out = str(tmp_path / ("red.tar.gz" if archive else "red"))
    assert main(["redact", src, "-o", out, "--salt", "s1"]) == 0
    written = _tree(out)
    leaks = _leaks(written)
    assert not leaks, "\n".join(leaks[:30])
    assert json.loads(written["kpdiag.json"])["redacted"]["names"] > 10
    assert _finding_ids(src) == _finding_ids(out)
    # never over an existing output
    capsys.readouterr()
    before = _tree(out)
    assert main(["redact", src, "-o", out]) == 2
    assert "exists" in capsys.readouterr().err and _tree(out) == before


def test_tokens_never_reach_a_bundle_without_redact(tmp_path):
    """Without --redact names stay (the user asked for a plain bundle), but tokens, keys, passwords and env values
    are gone from every bundle kpdiag writes."""
    files = canary_bundle()
    manifest = json.loads(files.pop("kpdiag.json"))
    out = str(tmp_path / "plain")
    write_bundle(files, out, manifest)
    blob = b"\n".join(_tree(out).values()).decode()
    for secret in (JWT, BEARER, KC_TOKEN, PASSWORD, ENV_VALUE, PEM_BODY, KEY_DATA[:40], "BEGIN PRIVATE KEY"):
        assert secret not in blob, secret
    assert NS in blob and SVC in blob  # names are redacted only when asked
    assert _finding_ids(out)


@pytest.mark.parametrize(
    "text,secret",
    [
        ("Authorization: Bearer abc.def-ghi_jkl", "abc.def-ghi_jkl"),
        ('{"authorization": "Basic dXNlcjpwYXNz"}', "dXNlcjpwYXNz"),
        ("token: s3cr3t-t0ken", "s3cr3t-t0ken"),
        ('"id-token": "s3cr3t"', "s3cr3t"),
        ("url=https://alice:hunter2@repo.example.com/x", "hunter2"),
        ("password=hunter2 next", "hunter2"),
    ],
)
def test_secret_forms(text, secret):
    (out,) = scrub_secrets({"node/kube-proxy/log.txt": text.encode()}).values()
    assert secret not in out.decode() and "REDACTED" in out.decode()


def test_scrubbing_keeps_json_valid_and_non_secrets():
    doc = {
        "spec": {
            "automountServiceAccountToken": False,
            "serviceAccountToken": {"path": "x"},
            "tokenFile": "/var/run/t",
        },
        "containers": [
            {"env": [{"name": "A", "value": "v"}, {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s"}}}]}
        ],
    }
    out = scrub_secrets({"cluster/pods.json": json.dumps(doc).encode()})["cluster/pods.json"]
    back = json.loads(out)
    assert back["spec"]["automountServiceAccountToken"] is False and back["spec"]["tokenFile"] == "/var/run/t"
    assert back["containers"][0]["env"][0]["value"] == "REDACTED"
