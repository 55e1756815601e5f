"""The image, the krew template and the pod spec agree with each other and with the package."""

import os
import re

import yaml

from kpdiag import __version__
from kpdiag.fleet import pods
from tests.conftest import ROOT


def test_dockerfile_has_the_tools_and_runs_kpdiag():
    text = open(os.path.join(ROOT, "Dockerfile")).read()
    install = re.search(r"apt-get install[^\n]*", text).group(0).split()
    for tool in ("iptables", "nftables", "ipset", "ipvsadm", "conntrack", "iproute2"):
        assert tool in install, tool
    assert re.search(r"^FROM python:3\.\d+-slim", text, re.M)
    assert "useradd --uid 10001" in text  # the unprivileged user for analyze / svc --no-probe / trace
    assert 'ENTRYPOINT ["kpdiag"]' in text
    assert "pip install --no-cache-dir ." in text and "COPY checks ./checks" in text


def test_node_pod_uses_the_image_of_this_version_as_root():
    pod = pods.node_pod("node-a", "abcd1234")
    (c,) = pod["spec"]["containers"]
    assert pods.DEFAULT_IMAGE == f"ghcr.io/kpdiag/kpdiag:{__version__}" and c["image"] == pods.DEFAULT_IMAGE
    assert c["securityContext"]["runAsUser"] == 0  # the image's own user is not root
    assert c["command"][0] == "kpdiag"


def test_pod_names_are_valid_dns_labels():
    for node in ("node-a", "ip-10-0-1-2.eu-west-1.compute.internal", "N" * 200, "Weird_Name"):
        name = pods.pod_name("abcd1234", node)
        assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name), name
    assert pods.pod_name("r", "a" * 100) != pods.pod_name("r", "a" * 99 + "b")


def test_krew_template_names_the_kubectl_plugin_binary():
    doc = yaml.safe_load(open(os.path.join(ROOT, "deploy", "krew", "kpdiag.yaml")))
    assert doc["kind"] == "Plugin" and doc["metadata"]["name"] == "kpdiag"
    assert {p["bin"] for p in doc["spec"]["platforms"]} == {"kubectl-kpdiag"}
    assert 'kubectl-kpdiag = "kpdiag.cli:main"' in open(os.path.join(ROOT, "pyproject.toml")).read()
