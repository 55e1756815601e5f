"""The image recipe, the manifests, the krew template and the node pod agree with each other and with the package."""

import glob
import os
import re
import subprocess

import yaml

from kpdiag import __version__
from kpdiag.fleet import pods
from tests.conftest import ROOT


def _image_packages():
    with open(os.path.join(ROOT, "deploy", "image-packages.txt")) as fh:
        return [ln.strip() for ln in fh if ln.strip() and not ln.lstrip().startswith("#")]


def test_dockerfile_has_the_image_packages_and_runs_kpdiag():
    text = open(os.path.join(ROOT, "Dockerfile")).read()
    install = re.search(r"apt-get install[^\n]*", text).group(0).split()
    for tool in ("iptables", "nftables", "ipset", "ipvsadm", "conntrack", "iproute2"):
        assert tool in _image_packages(), tool
    # the python base image brings python3; every other package of the image is in the Dockerfile too
    assert {p for p in _image_packages() if p != "python3"} <= set(install)
    assert re.search(r"^FROM python:3\.\d+-slim", text, re.M)
    assert "useradd --uid 10001" in text  # the unprivileged user for analyze / svc --no-probe / trace
    assert 'ENTRYPOINT ["kpdiag"]' in text
    assert "-c deploy/constraints.txt ." in text and "COPY checks ./checks" in text
    script = open(os.path.join(ROOT, "deploy", "build-image.sh")).read()
    assert "deploy/image-packages.txt" in script and "-c deploy/constraints.txt" in script
    assert "useradd --uid 10001" in script


def test_node_pod_asks_for_the_documented_capabilities_only():
    pod = pods.node_pod("node-a", "abcd1234")
    (c,) = pod["spec"]["containers"]
    sc = c["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"], "add": list(pods.NODE_CAPABILITIES)}
    assert set(pods.NODE_CAPABILITIES) == {"NET_ADMIN", "NET_RAW", "SYS_CHROOT", "SYS_PTRACE"}
    assert sc["runAsUser"] == 0 and sc["readOnlyRootFilesystem"] is True  # capabilities are given to uid 0 only
    assert pod["spec"]["hostNetwork"] and pod["spec"]["hostPID"]
    # the token of kpdiag's read-only node service account, or none at all
    assert (
        pod["spec"]["serviceAccountName"] == pods.NODE_SERVICE_ACCOUNT
        and pod["spec"]["automountServiceAccountToken"] is True
    )
    bare = pods.node_pod("node-a", "abcd1234", service_account=None)
    assert "serviceAccountName" not in bare["spec"] and bare["spec"]["automountServiceAccountToken"] is False
    assert [v["name"] for v in c["volumeMounts"] if v.get("readOnly")] == ["host-root"]
    doc = open(os.path.join(ROOT, "deploy", "node-pod-privileges.md")).read()
    for word in [f"CAP_{cap}" for cap in pods.NODE_CAPABILITIES] + [
        "hostNetwork",
        "hostPID",
        "privileged: false",
        "runAsUser: 0",
        "allowPrivilegeEscalation",
        "readOnlyRootFilesystem",
    ]:
        assert word in doc, word


def test_default_image_is_never_pulled_a_digest_may_be():
    pod = pods.node_pod("node-a", "abcd1234")
    (c,) = pod["spec"]["containers"]
    assert pods.DEFAULT_IMAGE == f"kpdiag:{__version__}" and c["image"] == pods.DEFAULT_IMAGE
    assert c["imagePullPolicy"] == "Never"  # a tag is only used as loaded on the node
    assert pods.pull_policy("registry.example/kpdiag:latest") == "Never"
    pinned = f"registry.example/kpdiag:{__version__}@sha256:" + "ab" * 32
    (c,) = pods.node_pod("node-a", "abcd1234", image=pinned)["spec"]["containers"]
    assert c["image"] == pinned and c["imagePullPolicy"] == "IfNotPresent"
    assert c["command"][0] == "kpdiag"


def test_manifests_name_the_image_by_digest_placeholder_only(tmp_path):
    images = []
    for path in glob.glob(os.path.join(ROOT, "deploy", "*.yaml")):
        text = open(path).read()
        images += [(os.path.basename(path), m) for m in re.findall(r"^\s*image:\s*(\S+)", text, re.M)]
    assert images, "no manifest names the image"
    for name, image in images:
        assert image == f"kpdiag:{__version__}@sha256:IMAGE_DIGEST", (name, image)
    digest = "sha256:" + "0123456789abcdef" * 4
    env = dict(os.environ, KPDIAG_IMAGE_DIGEST=digest)
    out = subprocess.run(
        ["bash", os.path.join(ROOT, "deploy", "render.sh"), "deploy/svc-pod.yaml"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    (doc,) = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert doc["spec"]["containers"][0]["image"] == f"kpdiag:{__version__}@{digest}"
    assert doc["spec"]["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["NET_RAW"]}
    env["KPDIAG_IMAGE_DIGEST"] = "latest"
    bad = subprocess.run(
        ["bash", os.path.join(ROOT, "deploy", "render.sh")], capture_output=True, text=True, env=env, timeout=30
    )
    assert bad.returncode == 2 and "no image digest" in bad.stderr


def test_readme_recipes_use_the_image_by_digest():
    text = open(os.path.join(ROOT, "README.md")).read()
    assert "ghcr.io/kpdiag" not in text
    # every `kubectl debug … --image=X … -- kpdiag …` recipe: X is the digest reference build-image.sh wrote
    images = re.findall(r"kubectl debug [^\n`]*?--image=(\S+)[^\n`]*-- kpdiag ", text)
    assert len(images) >= 4, images
    assert set(images) <= {'"$(cat', '"$IMAGE"'}, images
    assert "IMAGE=$(cat dist/kpdiag-image.ref)" in text and '--image="$(cat dist/kpdiag-image.ref)"' in text


def test_pod_names_are_valid_dns_labels():
    for node in ("node-a", "ip-10-0-1-2.eu-west-1.compute.internal", "N" * 200, "Weird_Name"):
        name = pods.pod_name("abcd1234", node)
        assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name), name
    assert pods.pod_name("r", "a" * 100) != pods.pod_name("r", "a" * 99 + "b")


def test_krew_manifest_is_valid_and_its_files_exist():
    doc = yaml.safe_load(open(os.path.join(ROOT, "deploy", "krew", "kpdiag.yaml")))
    assert doc["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert doc["kind"] == "Plugin" and doc["metadata"]["name"] == "kpdiag"
    spec = doc["spec"]
    assert re.fullmatch(r"v(VERSION|\d+\.\d+\.\d+)", spec["version"]) and spec["shortDescription"] and spec["homepage"]
    assert {p["bin"] for p in spec["platforms"]} == {"kubectl-kpdiag"}
    for p in spec["platforms"]:
        assert p["selector"]["matchExpressions"] and p["uri"].endswith(".tar.gz") and "sha256" in p
        for f in p["files"]:
            if f["from"] != "kubectl-kpdiag":  # the archive's binary is built; every other file ships from the repo
                assert os.path.isfile(os.path.join(ROOT, f["from"])), f["from"]
    scripts = dict(
        re.findall(r'^(kpdiag|kubectl-kpdiag) = "([^"]+)"', open(os.path.join(ROOT, "pyproject.toml")).read(), re.M)
    )
    assert scripts.get("kubectl-kpdiag") and scripts["kubectl-kpdiag"] == scripts.get("kpdiag")
    lic = open(os.path.join(ROOT, "LICENSE")).read()
    assert "Apache License" in lic and "Version 2.0, January 2004" in lic and "END OF TERMS AND CONDITIONS" in lic
    assert 'license = "Apache-2.0"' in open(os.path.join(ROOT, "pyproject.toml")).read()
