"""The real kpdiag image (deploy/build-image.sh), run with runc as the node pod runs it: in the network namespace of
a lab node (hostNetwork), in the host's PID namespace (hostPID), the host paths the pod mounts read-only under /host
(never the host's /), a read-only root filesystem with /tmp writable, uid 0 with exactly the capabilities the pod asks for
(kpdiag.fleet.pods.NODE_CAPABILITIES), not privileged, no privilege escalation. `kpdiag node -o json` inside must
find the node's kube-proxy rules and give the same programmed table as kpdiag run outside in the same namespace."""

import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from kpdiag import __version__
from kpdiag.fleet import pods
from tests.synth import Endpoint, Port, Service, iptables_ruleset
from tests.conftest import ROOT

from .netlab import KubeNodeLab

pytestmark = [pytest.mark.lab, pytest.mark.long]

TOOLS = ("debootstrap", "umoci", "skopeo", "runc")


@pytest.fixture(scope="module")
def image_layout(tmp_path_factory):
    """Build the image (reusing the digest-verified cache of deploy/build-image.sh) and return its OCI layout."""
    missing = [t for t in TOOLS if not shutil.which(t)]
    if missing or os.geteuid() != 0:
        why = (
            f"image build needs root and {', '.join(missing) or 'root'} (apt-get install debootstrap umoci skopeo runc)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    dist = str(tmp_path_factory.mktemp("dist"))  # its own output directory: other runs may build at the same time
    proc = subprocess.run(
        ["bash", os.path.join(ROOT, "deploy", "build-image.sh")],
        capture_output=True,
        text=True,
        timeout=1800,
        env=dict(os.environ, KPDIAG_IMAGE_DIST=dist),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sys.stderr.write(proc.stdout)
    layout = os.path.join(dist, "kpdiag-oci")
    digest = open(os.path.join(dist, "kpdiag-image.digest")).read().strip()
    assert digest.startswith("sha256:") and len(digest) == 71
    assert open(os.path.join(dist, "kpdiag-image.ref")).read().strip() == f"kpdiag:{__version__}@{digest}"
    return layout, digest, dist


def _recursive_ro() -> str:
    """runc's recursive read-only ("rro") needs mount_setattr (Linux 5.12); before that only the top mount is ro."""
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    return "rro" if (major, minor) >= (5, 12) else "ro"


def _bundle(layout: str, dest: str, netns: str, argv: list[str]) -> str:
    subprocess.run(
        ["umoci", "unpack", "--image", f"{layout}:{__version__}", dest], check=True, capture_output=True, timeout=300
    )
    path = os.path.join(dest, "config.json")
    with open(path) as fh:
        cfg = json.load(fh)
    caps = [f"CAP_{c}" for c in pods.NODE_CAPABILITIES]
    proc = cfg["process"]
    proc.update(terminal=False, args=argv, user={"uid": 0, "gid": 0}, noNewPrivileges=True)
    proc["env"] = [e for e in proc["env"] if not e.startswith("TERM=")] + ["NODE_NAME=lab-node"]
    proc["capabilities"] = {k: list(caps) for k in ("bounding", "effective", "permitted")}
    cfg["root"]["readonly"] = True  # readOnlyRootFilesystem
    ns = [n for n in cfg["linux"]["namespaces"] if n["type"] not in ("network", "pid")]  # hostPID: no pid namespace
    cfg["linux"]["namespaces"] = ns + [{"type": "network", "path": f"/var/run/netns/{netns}"}]  # hostNetwork
    # the host paths the node pod mounts (kpdiag.fleet.pods.host_mounts: from the collector's HOST_PATHS), each
    # read-only, as the pod mounts them — never the host's /
    mounts, volumes = pods.host_mounts()
    paths = {v["name"]: v["hostPath"]["path"] for v in volumes}
    cfg["mounts"] += [
        {
            "destination": m["mountPath"],
            "type": "bind",
            "source": paths[m["name"]],
            "options": ["rbind", _recursive_ro(), "rprivate"],
        }
        for m in mounts
        if os.path.isdir(paths[m["name"]])
    ] + [{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "size=256m"]}]
    cfg["hostname"] = "lab-node"
    with open(path, "w") as fh:
        json.dump(cfg, fh)
    return dest


def _runc(bundle: str) -> subprocess.CompletedProcess:
    name = "kpdiag-test-" + uuid.uuid4().hex[:8]
    try:
        return subprocess.run(
            ["runc", "run", "--bundle", bundle, name],
            capture_output=True,
            text=True,
            timeout=300,
            stdin=subprocess.DEVNULL,
        )
    finally:
        subprocess.run(["runc", "delete", "--force", name], capture_output=True, timeout=60)


def test_image_runs_kpdiag_node_like_the_node_pod(lab, image_layout, tmp_path):
    layout, digest, dist = image_layout
    k = KubeNodeLab.build(lab, pod_count=2)
    lab.route("node", "default", "via", k.client_ip)
    ips = list(k.pods.values())
    k.load_iptables(
        iptables_ruleset(
            [
                Service("shop", "web", "10.96.0.20", [Port("http", 80, 8080)], [Endpoint(ips[0]), Endpoint(ips[1])]),
                Service("shop", "db", "10.96.0.30", [Port("pg", 5432, 5432)], [Endpoint(ips[1])]),
            ]
        )
    )

    # exactly the command the node pod runs, in the container
    bundle = _bundle(layout, str(tmp_path / "bundle"), lab.ns("node"), pods.node_command())
    inside = _runc(bundle)
    assert inside.returncode == 0, inside.stderr[-3000:]
    report = json.loads(inside.stdout)
    assert report["schema"] == "kpdiag.report/v1"
    prog = report["extra"]["programmed"]
    keys = json.dumps(prog)
    assert prog["count"] == 2 and "10.96.0.20" in keys and "10.96.0.30" in keys, prog
    assert report["facts"]["iptables_rules"] > 10 and report["facts"]["proxy_mode"] == "iptables", report["facts"]
    # the image's own tools read the host's rules (no host root to chroot into): no 'could not read' for them
    assert not [p for p in report["problems"] if "iptables-save" in p["source"]], report["problems"]

    # the same command outside any container, in the same namespace, the host's root
    exe = shutil.which("kpdiag")
    argv = ([exe] if exe else [sys.executable, "-m", "kpdiag"]) + pods.node_command()[1:]
    argv[argv.index(pods.HOST_MOUNT)] = "/"
    outside = lab.sh("node", argv, check=False, timeout=300)
    assert outside.returncode == 0, outside.stderr
    expected = json.loads(outside.stdout)
    assert prog == expected["extra"]["programmed"]
    assert report["facts"]["iptables_rules"] == expected["facts"]["iptables_rules"]
    assert [f["id"] for f in report["findings"]] == [f["id"] for f in expected["findings"]]


def test_image_archives_are_loadable_and_carry_the_digest(image_layout):
    """dist/kpdiag-image.tar is a docker-archive (docker load / podman load / kind load image-archive) and
    dist/kpdiag-image.oci.tar an OCI archive whose manifest digest is the one recorded; the image fits 250 MB."""
    layout, digest, dist = image_layout
    raw = subprocess.run(
        ["skopeo", "inspect", "--raw", f"oci-archive:{dist}/kpdiag-image.oci.tar"],
        capture_output=True,
        timeout=300,
        check=True,
    ).stdout
    import hashlib

    assert "sha256:" + hashlib.sha256(raw).hexdigest() == digest
    info = json.loads(
        subprocess.run(
            ["skopeo", "inspect", f"docker-archive:{dist}/kpdiag-image.tar"],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        ).stdout
    )
    assert info["Labels"]["org.opencontainers.image.version"] == __version__ and info["Os"] == "linux"
    import tarfile

    with tarfile.open(os.path.join(dist, "kpdiag-image.tar")) as tf:
        manifest = json.load(tf.extractfile("manifest.json"))
    assert manifest[0]["RepoTags"] == [f"docker.io/library/kpdiag:{__version__}"] or manifest[0]["RepoTags"] == [
        f"kpdiag:{__version__}"
    ]
    config = json.loads(
        subprocess.run(
            ["skopeo", "inspect", "--config", f"oci:{layout}:{__version__}"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
    )
    assert config["config"]["Entrypoint"] == ["kpdiag"]
    unpacked = int(open(os.path.join(layout, "rootfs-bytes")).read())
    assert unpacked <= 250e6, f"image is {unpacked / 1e6:.1f} MB unpacked"


def test_containerd_imports_both_archives_and_runs_the_image(image_layout, tmp_path):
    """What `kind load image-archive` and `ctr -n k8s.io images import` do on a node, with a private containerd
    (its own root, state and socket): the OCI archive keeps the manifest digest the manifests pin; the
    docker-archive gets a manifest containerd writes itself, but the same image ID (config digest); the image runs."""
    if not (shutil.which("containerd") and shutil.which("ctr")):
        why = "containerd and ctr are needed (apt-get install containerd)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    layout, digest, dist = image_layout
    image_id = open(os.path.join(dist, "kpdiag-image.id")).read().strip()
    sock = str(tmp_path / "containerd.sock")
    log = open(tmp_path / "containerd.log", "w")
    daemon = subprocess.Popen(
        ["containerd", "--root", str(tmp_path / "root"), "--state", str(tmp_path / "state"), "--address", sock],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    ctr = ["ctr", "--address", sock, "-n", "k8s.io"]
    try:
        for _ in range(100):
            if subprocess.run(ctr + ["version"], capture_output=True, timeout=10).returncode == 0:
                break
            import time

            time.sleep(0.1)
        name = f"docker.io/library/kpdiag:{__version__}"
        imp = subprocess.run(
            ctr + ["images", "import", os.path.join(dist, "kpdiag-image.oci.tar")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert imp.returncode == 0, imp.stderr
        images = subprocess.run(ctr + ["images", "ls"], capture_output=True, text=True, timeout=60, check=True).stdout
        row = next(line for line in images.splitlines() if line.startswith(name + " "))
        assert digest in row, row  # the pinned manifest digest, kept
        run = subprocess.run(
            ctr + ["run", "--rm", name, "kpdiag-ctr-" + uuid.uuid4().hex[:6], "kpdiag", "--version"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0 and __version__ in run.stdout, run.stderr
        subprocess.run(ctr + ["images", "rm", name], capture_output=True, timeout=60)

        imp = subprocess.run(
            ctr + ["images", "import", os.path.join(dist, "kpdiag-image.tar")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert imp.returncode == 0, imp.stderr
        config = subprocess.run(ctr + ["images", "check", f"name=={name}"], capture_output=True, text=True, timeout=60)
        assert config.returncode == 0 and name in config.stdout, config.stdout + config.stderr
        ids = subprocess.run(ctr + ["content", "ls"], capture_output=True, text=True, timeout=60, check=True).stdout
        assert image_id in ids  # the config blob: the image ID docker/podman/crictl show
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()
        subprocess.run(["umount", "-R", str(tmp_path / "root")], capture_output=True)


def test_image_runs_offline_commands_as_its_unprivileged_user(image_layout, tmp_path):
    """analyze and trace as the image's user 10001 with no capability at all (what a locked-down pod gives):
    the same findings as the installed kpdiag on the same bundle, mounted read-only."""
    layout, digest, dist = image_layout
    fixture = "ipvs-fallback"
    argv = ["kpdiag", "analyze", f"/data/{fixture}", "-o", "json"]
    bundle = str(tmp_path / "bundle")
    subprocess.run(
        ["umoci", "unpack", "--image", f"{layout}:{__version__}", bundle], check=True, capture_output=True, timeout=300
    )
    path = os.path.join(bundle, "config.json")
    with open(path) as fh:
        cfg = json.load(fh)
    cfg["process"].update(
        terminal=False,
        args=argv,
        user={"uid": 10001, "gid": 10001},
        noNewPrivileges=True,
        capabilities={k: [] for k in ("bounding", "effective", "permitted", "inheritable", "ambient")},
    )
    cfg["root"]["readonly"] = True
    cfg["mounts"].append(
        {"destination": "/data", "type": "bind", "source": os.path.join(ROOT, "fixtures"), "options": ["rbind", "ro"]}
    )
    with open(path, "w") as fh:
        json.dump(cfg, fh)
    inside = _runc(bundle)
    want = subprocess.run(
        [sys.executable, "-m", "kpdiag", "analyze", os.path.join(ROOT, "fixtures", fixture), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert inside.returncode == want.returncode == 1, inside.stderr[-2000:]
    got, exp = json.loads(inside.stdout), json.loads(want.stdout)
    assert [(f["id"], f["summary"]) for f in got["findings"]] == [(f["id"], f["summary"]) for f in exp["findings"]]
    assert {"KP301", "KP701"} <= {f["id"] for f in got["findings"]}


def test_image_on_a_host_that_is_not_a_node(lab, image_layout, tmp_path):
    """Issue 25 item 3 under runc, as the node pod runs: a bare namespace (an uplink, a default route, forwarding off,
    nothing of Kubernetes) is said to be no node first, nothing is recommended for it, exit 3."""
    layout, _, _ = image_layout
    lab.add_ns("node")
    lab.add_ns("gw")
    lab.veth("node", "eth0", "gw", "eth0")
    lab.addr("node", "eth0", "192.168.77.2/24")
    lab.route("node", "default", "via", "192.168.77.1")
    inside = _runc(_bundle(layout, str(tmp_path / "bundle"), lab.ns("node"), pods.node_command()))
    assert inside.returncode == 3, inside.stderr[-3000:]
    report = json.loads(inside.stdout)
    assert [f["id"] for f in report["findings"]] == ["KP709"], report["findings"]
    assert "this does not look like a Kubernetes node" in report["extra"]["headline"]
    assert {r["status"] for r in report["checks"] if r["id"] != "KP709"} == {"skipped"}


def _readme_runc_recipe() -> str:
    import re

    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    m = re.search(r"<!-- run by: tests/lab/test_image.py[^\n]*-->\n```sh\n(.*?)```", text, re.S)
    assert m, "README.md: the runc recipe marked '<!-- run by: tests/lab/test_image.py' is gone"
    return m.group(1)


def test_readme_runc_recipe_runs_non_interactively(image_layout, tmp_path):
    """The README's `runc run` recipe, verbatim but for the paths: no terminal (stdin /dev/null, output captured,
    as from a script or CI), the arguments given in config.json; kpdiag's output and exit code come through."""
    layout, digest, dist = image_layout
    recipe = _readme_runc_recipe()
    assert f"dist/kpdiag-oci:{__version__} " in recipe, "the README names the layout's tag, the package version"
    name = "kpdiag-readme-" + uuid.uuid4().hex[:8]
    script = (
        recipe.replace("dist/kpdiag-oci:", f"{layout}:")
        .replace("/tmp/kpdiag-bundle", str(tmp_path / "bundle"))
        .replace("kpdiag-run", name)
    )
    try:
        proc = subprocess.run(
            ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "KP501" in proc.stdout and "ip_forward" in proc.stdout, proc.stdout[-2000:]
        # the same bundle with another command line: kpdiag's exit code is runc's (2: a usage error)
        again = script.split("\n", 1)[1].replace("kpdiag explain KP501", "kpdiag explain KP9999")
        proc = subprocess.run(
            ["bash", "-c", again], cwd=tmp_path, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL
        )
        assert proc.returncode == 2 and "no check 'KP9999'" in proc.stdout + proc.stderr, proc.stderr[-2000:]
    finally:
        subprocess.run(["runc", "delete", "--force", name], capture_output=True, timeout=60)
