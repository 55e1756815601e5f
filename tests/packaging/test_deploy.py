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


def _shipped_pods() -> list[tuple[str, dict]]:
    """Every pod kpdiag ships: the node pod `kpdiag cluster` creates, and each Pod (or pod template) of deploy/*.yaml
    and of the packaged manifests."""
    from kpdiag.manifests import MANIFESTS, manifest_text

    out = [("kpdiag cluster's node pod", pods.node_pod("node-a", "abcd1234"))]
    texts = [(os.path.basename(p), open(p).read()) for p in sorted(glob.glob(os.path.join(ROOT, "deploy", "*.yaml")))]
    texts += [(f"kpdiag rbac {name}", manifest_text(name)) for name in MANIFESTS]
    for name, text in texts:
        for doc in yaml.safe_load_all(text):
            if isinstance(doc, dict) and doc.get("kind") == "Pod":
                out.append((name, doc))
            elif isinstance(doc, dict) and isinstance((doc.get("spec") or {}).get("template"), dict):
                out.append((name, doc["spec"]["template"]))
    return out


def test_every_shipped_pod_has_the_default_seccomp_profile_and_cpu_and_memory_limits():
    shipped = _shipped_pods()
    assert any(name == "svc-pod.yaml" for name, _ in shipped), [n for n, _ in shipped]
    for name, pod in shipped:
        spec = pod["spec"]
        for c in spec["containers"]:
            sc = c.get("securityContext") or {}
            profile = sc.get("seccompProfile") or (spec.get("securityContext") or {}).get("seccompProfile")
            assert profile == {"type": "RuntimeDefault"}, (name, c["name"], profile)
            limits = (c.get("resources") or {}).get("limits") or {}
            assert limits.get("cpu") and limits.get("memory"), (name, c["name"], limits)
            assert sc.get("allowPrivilegeEscalation") is False and sc.get("privileged") in (None, False), name


def test_dockerfile_names_every_base_image_by_digest():
    """A tag can be moved to other content; a digest names one image."""
    text = open(os.path.join(ROOT, "Dockerfile")).read()
    bases = re.findall(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)", text, re.M)
    assert bases
    for image in bases:
        assert re.fullmatch(r"[a-z0-9./-]+(:[\w.-]+)?@sha256:[0-9a-f]{64}", image), image


def test_node_pod_asks_for_the_documented_capabilities_only():
    pod = pods.node_pod("node-a", "abcd1234")
    (c,) = pod["spec"]["containers"]
    sc = c["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"], "add": list(pods.NODE_CAPABILITIES)}
    # no SYS_CHROOT: the host's root is not mounted, so there is nothing to chroot into
    assert set(pods.NODE_CAPABILITIES) == {"NET_ADMIN", "NET_RAW", "SYS_PTRACE"}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["resources"]["limits"] == {"cpu": pods.CPU_LIMIT, "memory": pods.MEMORY_LIMIT}
    assert sc["runAsUser"] == 0 and sc["readOnlyRootFilesystem"] is True  # capabilities are given to uid 0 only
    assert pod["spec"]["hostNetwork"] and pod["spec"]["hostPID"]
    # the token of kpdiag's read-only node service account, or none at all
    assert (
        pod["spec"]["serviceAccountName"] == pods.NODE_SERVICE_ACCOUNT
        and pod["spec"]["automountServiceAccountToken"] is True
    )
    bare = pods.node_pod("node-a", "abcd1234", service_account=None)
    assert "serviceAccountName" not in bare["spec"] and bare["spec"]["automountServiceAccountToken"] is False
    doc = open(os.path.join(ROOT, "docs", "privileges.md")).read()
    for word in [f"CAP_{cap}" for cap in pods.NODE_CAPABILITIES] + [
        "CAP_SYS_CHROOT",  # why it is not asked for
        "hostNetwork",
        "hostPID",
        "privileged: false",
        "runAsUser: 0",
        "allowPrivilegeEscalation",
        "readOnlyRootFilesystem",
        "seccompProfile: RuntimeDefault",
        "activeDeadlineSeconds",
        "ownerReferences",
        "limits.cpu",
    ]:
        assert word in doc, word


def test_node_pod_mounts_exactly_the_host_paths_the_collector_reads_read_only():
    """The mounts come from one list (kpdiag.collect.node.HOST_PATHS): each host path the node pod may read is a
    read-only hostPath of type Directory at /host/PATH; the host's / (with /etc/kubernetes/pki and the kubelet's
    credentials) and anything under /etc or /var/lib are never mounted; docs/privileges.md names each."""
    from kpdiag.collect.node import HOST_PATHS

    pod = pods.node_pod("node-a", "abcd1234")
    (c,) = pod["spec"]["containers"]
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    host = {m["mountPath"]: m for m in c["volumeMounts"] if "hostPath" in vols[m["name"]]}
    assert set(host) == {f"/host/{p.path}" for p in HOST_PATHS if p.pod}
    for path, m in host.items():
        hp = vols[m["name"]]["hostPath"]
        assert m["readOnly"] is True and hp == {"path": path[len("/host") :], "type": "Directory"}
        assert hp["path"] != "/" and not hp["path"].startswith(("/etc", "/var/lib", "/root", "/home"))
    assert [m for m in c["volumeMounts"] if not m.get("readOnly")] == [{"name": "tmp", "mountPath": "/tmp"}]
    doc = open(os.path.join(ROOT, "docs", "privileges.md")).read()
    for p in HOST_PATHS:
        assert f"/{p.path}" in doc, p.path


def test_every_host_path_the_node_collector_reads_is_declared():
    """Every literal path the node collector joins to its host root (kpdiag/collect/node*.py) is in HOST_PATHS —
    mounted into the node pod, or declared as not mounted with the reason: a new read cannot silently find nothing in
    the pod."""
    import ast

    from kpdiag.bundle import sources
    from kpdiag.collect import node, node_base, node_kube_proxy
    from kpdiag.collect.node import HOST_PATHS

    # the collector's class and the modules its steps and helpers live in, read as one
    tree = ast.Module(
        body=[stmt for m in (node, node_base, node_kube_proxy) for stmt in ast.parse(open(m.__file__).read()).body],
        type_ignores=[],
    )
    read: set[str] = set()
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "join"):
            continue
        args = call.args
        if not args or not (isinstance(args[0], ast.Attribute) and args[0].attr == "host_root"):
            continue
        if len(args) < 2:
            continue
        if isinstance(args[1], ast.Constant) and isinstance(args[1].value, str):
            read.add(args[1].value)
        elif isinstance(args[1], ast.Name):  # the tool directories of _binary: for d in (...)
            for loop in ast.walk(tree):
                if isinstance(loop, ast.For) and isinstance(loop.target, ast.Name) and loop.target.id == args[1].id:
                    read |= {e.value for e in getattr(loop.iter, "elts", []) if isinstance(e, ast.Constant)}
        elif "recipe.path" in ast.unparse(args[1]):  # a declared host_file() recipe: the catalogue says which
            read |= {
                s.collect.path.split("{", 1)[0].rstrip("/")
                for s in sources.CATALOGUE.values()
                if isinstance(s.collect, sources.HostFile)
            }
        else:
            raise AssertionError(f"line {call.lineno}: a host path kpdiag cannot check ({ast.unparse(args[1])})")
    declared = {p.path for p in HOST_PATHS}
    assert read, "the collector reads nothing under its host root?"
    # a path itself, under one, or the folder a declared file is opened beneath (var/log for var/log/kube-proxy.log)
    undeclared = {
        r for r in read if not any(r == d or r.startswith(d + "/") or d.startswith(r + "/") for d in declared)
    }
    assert not undeclared, f"read under the host root but not in HOST_PATHS: {sorted(undeclared)}"
    assert all(p.pod or p.not_mounted for p in HOST_PATHS)


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


def _admission_policy():
    from kpdiag.manifests import manifest_text

    docs = [d for d in yaml.safe_load_all(manifest_text("cluster")) if d]
    policy = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy")
    binding = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding")
    return policy, binding


def _admitted(policy, pod) -> list[str]:
    """The messages of the policy's validations that refuse ``pod`` (a CEL error refuses too: failurePolicy Fail)."""
    import celpy

    env = celpy.Environment()
    refused = []
    for v in policy["spec"]["validations"]:
        try:
            result = env.program(env.compile(v["expression"])).evaluate({"object": celpy.json_to_cel(pod)})
            ok = isinstance(result, celpy.celtypes.BoolType) and bool(result)
        except celpy.CELEvalError:
            ok = False
        if not ok:
            refused.append(v["message"])
    return refused


def _as_admitted(pod: dict) -> dict:
    """The pod as the API server's mutating admission leaves it before validation: the ServiceAccount plugin names
    the default account and mounts the token (a projected volume, read-only) where automounting is asked for."""
    import copy

    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    spec.setdefault("serviceAccountName", "default")
    if spec.get("automountServiceAccountToken"):
        spec["volumes"].append({"name": "kube-api-access-x", "projected": {"sources": [{"serviceAccountToken": {}}]}})
        for c in spec["containers"]:
            c["volumeMounts"].append(
                {
                    "name": "kube-api-access-x",
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                    "readOnly": True,
                }
            )
    return pod


def test_admission_policy_admits_the_node_pods_kpdiag_creates_and_binds_the_kpdiag_namespace():
    policy, binding = _admission_policy()
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] and binding["spec"]["validationActions"] == [
        "Deny"
    ]
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": pods.DEFAULT_NAMESPACE}
    }
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert {"CREATE", "UPDATE"} <= set(rule["operations"]) and "pods" in rule["resources"]
    pinned = f"registry.example/kpdiag:{__version__}@sha256:" + "ab" * 32
    for pod in (
        pods.node_pod("node-a", "abcd1234"),
        pods.node_pod("node-a", "abcd1234", service_account=None),
        pods.node_pod("node-a", "abcd1234", service="shop/web", image=pinned),
    ):
        assert _admitted(policy, _as_admitted(pod)) == []


def _changed(how):
    pod = _as_admitted(pods.node_pod("node-a", "abcd1234"))
    how(pod["spec"], pod["spec"]["containers"][0])
    return pod


def test_admission_policy_refuses_a_pod_of_another_shape_in_the_kpdiag_namespace():
    """The Role lets its holders create pods in the kpdiag namespace: the policy refuses each way a pod could be used
    for more than `kpdiag node`."""
    policy, _ = _admission_policy()
    changes = {
        "privileged": lambda s, c: c["securityContext"].update(privileged=True),
        "escalation": lambda s, c: c["securityContext"].update(allowPrivilegeEscalation=True),
        "SYS_ADMIN": lambda s, c: c["securityContext"]["capabilities"]["add"].append("SYS_ADMIN"),
        "no drop": lambda s, c: c["securityContext"]["capabilities"].update(drop=[]),
        "unconfined": lambda s, c: c["securityContext"].update(seccompProfile={"type": "Unconfined"}),
        "writable root": lambda s, c: c["securityContext"].update(readOnlyRootFilesystem=False),
        "no securityContext": lambda s, c: c.pop("securityContext"),
        "no cpu limit": lambda s, c: c["resources"]["limits"].pop("cpu"),
        "another image": lambda s, c: c.update(image="registry.example/shell:latest"),
        "a shell": lambda s, c: c.update(command=["sh", "-c", "cat /host/etc/shadow"]),
        "args": lambda s, c: c.update(args=["--evil"]),
        "extra flag": lambda s, c: c["command"].extend(["--kubeconfig", "/x"]),
        "host /": lambda s, c: s["volumes"].append({"name": "root", "hostPath": {"path": "/", "type": "Directory"}}),
        "host /etc as dir": lambda s, c: s["volumes"][0]["hostPath"].update(path="/etc"),
        "writable host path": lambda s, c: c["volumeMounts"][0].update(readOnly=False),
        "a second container": lambda s, c: s["containers"].append(dict(c, name="two")),
        "an init container": lambda s, c: s.update(initContainers=[dict(c, name="init")]),
        "host IPC": lambda s, c: s.update(hostIPC=True),
        "another account": lambda s, c: s.update(serviceAccountName="admin"),
        "a secret volume": lambda s, c: s["volumes"].append({"name": "s", "secret": {"secretName": "x"}}),
    }
    for what, how in changes.items():
        assert _admitted(policy, _changed(how)), f"admitted with {what}"
