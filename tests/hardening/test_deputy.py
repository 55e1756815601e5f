"""Issue 16 item 1: kpdiag (root) must not read, for someone else, what they could not read themselves.

Real processes on the real /proc: an unprivileged process that calls itself kube-proxy (prctl PR_SET_NAME),
a root process that calls itself kube-proxy but runs another executable, and a real kube-proxy-named
executable chrooted into a directory that plants symlinks, ``..`` escapes, a FIFO, a device and an
oversized file. The canary secret lives in the host's /etc; it must never reach the bundle.
"""

import os
import shutil
import stat
import subprocess
import sys
import threading
import uuid

import pytest

from kpdiag.bundle import safeio
from kpdiag.collect.kube_proxy import CONFIG_MAX_BYTES, find_kube_proxy
from kpdiag.collect.node import NodeCollector

CONFIG = "node/kube-proxy/config.yaml"
SLEEPER = r"""
import ctypes, os, sys, time
name = os.environ.get("KP_NAME")
if name:
    ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)  # PR_SET_NAME
uid = os.environ.get("KP_UID")
if uid:  # the process an unprivileged user would run (root's python is not readable by nobody here)
    os.setgroups([]); os.setgid(int(uid)); os.setuid(int(uid))
if os.environ.get("KP_NETNS"):  # a network namespace of its own (a pod without hostNetwork)
    assert ctypes.CDLL(None, use_errno=True).unshare(0x40000000) == 0  # CLONE_NEWNET
root = os.environ.get("KP_CHROOT")
if root:
    os.chroot(root)
    os.chdir("/")
sys.stdout.write("ready\n"); sys.stdout.flush()
time.sleep(120)
"""


def _root_or_skip():
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("needs root (starts processes as other users, chroots, mknod)")
        pytest.skip("needs root (starts processes as other users, chroots, mknod)")


@pytest.fixture
def canary():
    """A secret only root can read, in the host's /etc (where an escaping path would land)."""
    _root_or_skip()
    name = f"kpdiag-canary-{uuid.uuid4().hex[:8]}"
    secret = f"CANARY-{uuid.uuid4().hex}"
    path = os.path.join("/etc", name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, f"root:{secret}:19000:0:99999:7:::\n".encode())
    os.close(fd)
    yield name, secret
    os.unlink(path)


@pytest.fixture
def procs():
    started = []

    def start(argv, env=None, **kw):
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, env={**os.environ, **(env or {})}, **kw)
        started.append(p)
        assert p.stdout.readline() == b"ready\n"
        return p

    yield start
    for p in started:
        p.kill()
        p.wait()


def _collect_kube_proxy() -> tuple[dict, list[dict]]:
    c = NodeCollector(host_root="/")
    c.kube_proxy_files()
    return c.out.files, c.out.errors


def _no_secret(files: dict, secret: str):
    for rel, data in files.items():
        assert secret.encode() not in data, f"the canary reached {rel}"


def test_unprivileged_process_named_kube_proxy_is_not_trusted(canary, procs):
    """Before: comm == kube-proxy was enough, and /etc/shadow-like files were copied into the bundle."""
    name, secret = canary
    spoof = procs(
        [sys.executable, "-c", SLEEPER, f"--config=/etc/{name}"], env={"KP_NAME": "kube-proxy", "KP_UID": "65534"}
    )
    assert open(f"/proc/{spoof.pid}/comm").read().strip() == "kube-proxy"
    found = find_kube_proxy()
    assert found.pid != spoof.pid
    assert any(pid == spoof.pid and "uid 65534" in why for pid, why in found.refused), found.refused
    files, errors = _collect_kube_proxy()
    _no_secret(files, secret)
    if found.pid is None:  # no real kube-proxy on this machine: nothing read at all
        assert CONFIG not in files and "node/kube-proxy/cmdline.txt" not in files
    assert any(f"process {spoof.pid} is called kube-proxy but is not trusted" in e["error"] for e in errors), errors


def test_root_process_that_only_calls_itself_kube_proxy_is_not_trusted(canary, procs):
    name, secret = canary
    spoof = procs([sys.executable, "-c", SLEEPER, f"--config=/etc/{name}"], env={"KP_NAME": "kube-proxy"})
    found = find_kube_proxy()
    why = dict(found.refused).get(spoof.pid)
    assert why and "its executable is" in why and "not kube-proxy" in why
    files, _ = _collect_kube_proxy()
    _no_secret(files, secret)


@pytest.fixture
def jail(tmp_path, canary):
    """A chroot-like root whose etc/ plants escapes towards the host's canary, and a kube-proxy binary."""
    name, secret = canary
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "good.conf").write_text("kind: KubeProxyConfiguration\nmode: nftables\n")
    os.symlink(f"/etc/{name}", root / "etc" / "abs-link.conf")  # absolute: must stay inside the root
    os.symlink(f"../../../../../../../../etc/{name}", root / "etc" / "dotdot-link.conf")
    os.symlink("/etc/good.conf", root / "etc" / "kube-proxy.conf")  # a legitimate absolute link inside
    (root / "var").mkdir()
    os.symlink("/", root / "var" / "hostroot")  # a directory link to '/': the root's own '/'
    os.mkfifo(root / "etc" / "fifo.conf")
    os.mknod(root / "etc" / "zero.conf", stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero
    (root / "etc" / "big.conf").write_bytes(b"#" * (CONFIG_MAX_BYTES + 1))
    assert not (root / "etc" / name).exists()  # the canary's name exists on the host only: an escape would read it
    binary = tmp_path / "bin" / "kube-proxy"
    binary.parent.mkdir()
    shutil.copy2(os.path.realpath(sys.executable), binary)
    return root, binary, name, secret


@pytest.fixture(params=["openat2", "walk"])
def resolver(request, monkeypatch):
    if request.param == "openat2" and not safeio.openat2_available():
        pytest.skip("this kernel has no openat2")
    monkeypatch.setitem(safeio._openat2_state, "ok", request.param == "openat2")
    return request.param


@pytest.mark.parametrize(
    "config,expect",
    [
        ("/etc/abs-link.conf", "no such file"),
        ("/etc/dotdot-link.conf", "no such file"),
        ("/../../../../etc/{name}", "no such file"),
        ("/var/hostroot/etc/{name}", "no such file"),
        ("/etc/fifo.conf", "is a FIFO, not a regular file"),
        ("/etc/zero.conf", "is a character device, not a regular file"),
        ("/etc/big.conf", "larger than the 4 MiB limit"),
        ("/etc/kube-proxy.conf", None),  # a link inside the root: followed inside, read
    ],
)
def test_config_is_resolved_inside_kube_proxys_root(jail, procs, resolver, config, expect):
    """Before: /proc/PID/root/<config> — an absolute symlink in there is resolved from kpdiag's own root, so
    etc/kube-proxy.conf -> /etc/shadow read the host's shadow; a FIFO hung `kpdiag node`."""
    root, binary, name, secret = jail
    config = config.format(name=name)
    kp = procs([str(binary), "-c", SLEEPER, f"--config={config}"], env={"KP_CHROOT": str(root)})
    assert os.readlink(f"/proc/{kp.pid}/root") == str(root)
    found = find_kube_proxy()
    assert found.pid == kp.pid, (found, kp.pid)
    result = {}
    t = threading.Thread(target=lambda: result.update(zip(("files", "errors"), _collect_kube_proxy())), daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "reading kube-proxy's config hung"
    files, errors = result["files"], result["errors"]
    _no_secret(files, secret)
    if expect is None:
        assert files[CONFIG] == b"kind: KubeProxyConfiguration\nmode: nftables\n"
        # its flags are written too, one argument a line (the effective configuration reads them)
        assert files["node/kube-proxy/cmdline.txt"].decode().splitlines()[-1] == f"--config={config}"
    else:
        assert CONFIG not in files
        msg = [e["error"] for e in errors if e["source"] == CONFIG]
        assert msg and expect in msg[0] and f"pid {kp.pid}" in msg[0], msg


def test_root_kube_proxy_in_another_network_namespace_is_not_trusted(jail, procs):
    """A root container (no user namespace) that runs a binary named kube-proxy, without hostNetwork: its
    config would describe another namespace's rules (and is the container's to choose): not used."""
    root, binary, name, secret = jail
    kp = procs([str(binary), "-c", SLEEPER, "--config=/etc/good.conf"], env={"KP_CHROOT": str(root), "KP_NETNS": "1"})
    found = find_kube_proxy()
    assert found.pid != kp.pid
    assert "another network namespace" in dict(found.refused)[kp.pid]
    files, _ = _collect_kube_proxy()
    assert CONFIG not in files or found.pid is not None


def test_open_regular_never_leaves_the_root(jail, resolver):
    """The resolver itself, without a process: every escape lands inside the root or fails."""
    root, _, name, secret = jail
    for path in (
        f"/etc/{name}",
        f"../../etc/{name}",
        "etc/abs-link.conf",
        "etc/dotdot-link.conf",
        f"var/hostroot/etc/{name}",
    ):
        with pytest.raises(FileNotFoundError):
            safeio.read_file(str(root), path, 1 << 20, safeio.IN_ROOT)
    # beneath mode (bundles): no symlink at all, no way out
    for path in ("etc/kube-proxy.conf", "var/hostroot/etc/passwd", "../x"):
        with pytest.raises(OSError):
            safeio.read_file(str(root), path, 1 << 20, safeio.BENEATH)
    assert safeio.read_file(str(root), "etc/good.conf", 1 << 20, safeio.BENEATH).startswith(b"kind:")


def test_bundle_files_are_private(tmp_path):
    """Bundles hold node state (and before redaction, names and addresses): 0600 files, 0700 directories."""
    from kpdiag.bundle.store import write_bundle

    out = tmp_path / "b"
    old = os.umask(0o022)
    try:
        write_bundle(
            {"node/kube-proxy/config.yaml": b"mode: ipvs\n", "cluster/nodes.json": b"{}"}, str(out), {"node": "n"}
        )
        write_bundle({"node/x.txt": b"x"}, str(tmp_path / "b.tar.gz"), {"node": "n"})
    finally:
        os.umask(old)
    for top, _dirs, names in os.walk(out):
        assert stat.S_IMODE(os.stat(top).st_mode) == 0o700, top
        for n in names:
            assert stat.S_IMODE(os.stat(os.path.join(top, n)).st_mode) == 0o600, n
    assert stat.S_IMODE(os.stat(tmp_path / "b.tar.gz").st_mode) == 0o600
    import tarfile

    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        assert {m.mode for m in tar} == {0o600}


def _fake_proc(tmp_path, procs: dict):
    """A /proc-shaped tree: pid → (comm, uid, exe path, argv)."""
    proc = tmp_path / "proc"
    for pid, (comm, uid, exe, argv) in procs.items():
        d = proc / str(pid)
        d.mkdir(parents=True)
        (d / "comm").write_text(comm + "\n")
        (d / "status").write_text(f"Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        os.symlink(exe, d / "exe")
    return str(proc)


def test_trust_rules_on_a_constructed_proc(tmp_path):
    proc = _fake_proc(
        tmp_path,
        {
            10: (
                "kube-proxy",
                0,
                "/usr/local/bin/kube-proxy (deleted)",
                ["/usr/local/bin/kube-proxy", "--config=/c"],
            ),  # upgraded on disk
            11: ("kube-proxy", 0, "/usr/bin/python3", ["/usr/bin/python3", "--config=/etc/shadow"]),
            12: ("kube-proxy", 0, "/tmp/kube-proxy", ["/bin/sh", "--config=/etc/shadow"]),
            13: ("kube-proxy", 1000, "/home/u/kube-proxy", ["kube-proxy", "--config=/etc/shadow"]),
        },
    )
    found = find_kube_proxy(proc)
    refused = dict(found.refused)
    assert found.pid == 10 and found.cmdline[1] == "--config=/c"
    assert (
        "executable is 'python3'" in refused[11]
        and "started as '/bin/sh'" in refused[12]
        and "uid 1000/1000/1000/1000" in refused[13]
    )


def test_kube_proxy_inside_k3s_is_said(tmp_path):
    proc = _fake_proc(
        tmp_path,
        {
            7: ("k3s-server", 0, "/usr/local/bin/k3s", ["/usr/local/bin/k3s", "server"]),
            8: ("k3s-agent", 1000, "/tmp/k3s", ["k3s", "agent"]),
        },
    )
    c = NodeCollector(host_root=str(tmp_path), proc=proc)
    c.kube_proxy_files()
    assert find_kube_proxy(proc).embedded == "k3s-server (pid 7)"
    assert any("kube-proxy runs inside k3s-server (pid 7)" in e["error"] for e in c.out.errors), c.out.errors
