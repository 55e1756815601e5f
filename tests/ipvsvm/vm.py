"""Debian's own kernel under QEMU's software emulation: the IPVS oracle.

This machine's kernel has no IP_VS and cannot load modules, so the IPVS mode is judged by a kernel that has it:
the distribution's kernel package (resolved through ``linux-image-amd64``, never a pinned version) is unpacked,
not installed; a minbase root made by debootstrap (python3, iproute2, iptables, nftables, ipvsadm, ipset,
conntrack, kmod) becomes an initramfs with our own ``/init``; a folder is shared over 9p for inputs and
results; the guest powers itself off at the end. Nothing is cached between CI machines: the image is built
in the test session (``KPDIAG_VM_CACHE=DIR`` keeps it between local runs, for development only).

Everything here runs on the host; ``inside.py`` runs in the guest.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass

RELEASE_DEFAULT = "bookworm"
PACKAGES = [
    "python3",
    "python3-click",
    "python3-tabulate",
    "python3-pyroute2",
    "iproute2",
    "iptables",
    "nftables",
    "ipvsadm",
    "ipset",
    "conntrack",
    "kmod",
    "procps",
]
# module folders of the kernel package the guest needs (netfilter, IPVS, ipset, 9p, virtio, veth, dummy, bridge)
MODULE_DIRS = ["net", "fs/9p", "fs/netfs", "fs/fscache", "lib", "crypto", "drivers/virtio", "arch"]
MODULE_FILES = ["drivers/net/veth.ko", "drivers/net/dummy.ko"]
TOOLS = ["qemu-system-x86_64", "debootstrap", "dpkg-deb", "apt-get", "apt-cache", "cpio", "zstd", "depmod"]

INIT = """#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /run /tmp /mnt; mount -t tmpfs run /run; mkdir -p /run/netns
modprobe virtio_pci; modprobe 9pnet_virtio; modprobe 9p
if mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share /mnt; then
  echo "kpdiag-vm: booted $(uname -r)" > /mnt/boot.txt
  if [ -x /mnt/run.sh ]; then /mnt/run.sh > /mnt/guest.log 2>&1; echo $? > /mnt/rc; fi
fi
sync
echo o > /proc/sysrq-trigger
sleep 10
"""


class VmUnavailable(Exception):
    """The VM cannot be built or booted here (the reason is the message)."""


@dataclass
class Image:
    kernel: str
    initrd: str
    version: str  # the kernel release, e.g. 6.1.0-57-amd64


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def _first(niceness: int = -10) -> None:
    """Run in the child before it starts: the VM (its image build, its boot) is the longest job of a test run and
    every other test file finishes well within it, so it gets the CPU first when the two cores are contended (a
    lower niceness; left as it is where that is not permitted)."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, niceness)
    except OSError:
        pass


def _run(argv: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, preexec_fn=_first, **kw)
    if proc.returncode != 0:
        raise VmUnavailable(f"{' '.join(argv[:3])} failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    return proc


def apt_mirror() -> tuple[str, str]:
    """The Debian mirror and release the host's apt uses (deb822 or one-line sources), not spelled here."""
    release = RELEASE_DEFAULT
    try:
        with open("/etc/os-release") as fh:
            m = re.search(r"^VERSION_CODENAME=(\S+)", fh.read(), re.M)
            if m:
                release = m.group(1).strip('"')
    except OSError:
        pass
    texts = []
    for path in ["/etc/apt/sources.list"] + sorted(
        os.path.join("/etc/apt/sources.list.d", f)
        for f in (os.listdir("/etc/apt/sources.list.d") if os.path.isdir("/etc/apt/sources.list.d") else [])
    ):
        try:
            with open(path) as fh:
                texts.append(fh.read())
        except OSError:
            continue
    for text in texts:
        for m in re.finditer(r"^URIs:\s*(\S+)", text, re.M):
            if "security" not in m.group(1):
                return m.group(1), release
        for m in re.finditer(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", text, re.M):
            if "security" not in m.group(1):
                return m.group(1), release
    raise VmUnavailable("no Debian mirror in /etc/apt/sources.list{,.d}")


def kernel_package() -> str:
    """The versioned kernel package linux-image-amd64 depends on today."""
    out = _run(["apt-cache", "depends", "linux-image-amd64"], 60).stdout
    m = re.search(r"Depends:\s*(linux-image-\S+)", out)
    if not m:
        raise VmUnavailable("apt-cache knows no linux-image-amd64 (run apt-get update)")
    return m.group(1)


def build_image(workdir: str, log=print) -> Image:
    """Kernel + initramfs in ``workdir`` (about 1–2 minutes from nothing)."""
    os.makedirs(workdir, exist_ok=True)
    done = os.path.join(workdir, "image.done")
    if os.path.exists(done):
        with open(done) as fh:
            version = fh.read().strip()
        return Image(os.path.join(workdir, "vmlinuz"), os.path.join(workdir, "initrd.zst"), version)
    if missing := missing_tools():
        raise VmUnavailable(f"needs {', '.join(missing)} (apt-get install qemu-system-x86 debootstrap cpio zstd kmod)")
    t0 = time.monotonic()
    pkg = kernel_package()
    debs = os.path.join(workdir, "debs")
    os.makedirs(debs, exist_ok=True)
    _run(["apt-get", "download", pkg], 600, cwd=debs)
    deb = next(os.path.join(debs, f) for f in os.listdir(debs) if f.endswith(".deb"))
    kern = os.path.join(workdir, "kernel")
    _run(["dpkg-deb", "-x", deb, kern], 300)
    version = os.listdir(os.path.join(kern, "lib", "modules"))[0]
    log(f"vm: kernel {pkg} ({version}) unpacked in {time.monotonic() - t0:.0f} s")
    root = os.path.join(workdir, "root")
    mirror, release = apt_mirror()
    _run(
        ["debootstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES), release, root, mirror],
        1500,
    )
    log(f"vm: debootstrap {release} minbase done at {time.monotonic() - t0:.0f} s")
    for junk in ("usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/info", "var/cache/apt"):
        shutil.rmtree(os.path.join(root, junk), ignore_errors=True)
    src_mod = os.path.join(kern, "lib", "modules", version)
    dst_mod = os.path.join(root, "lib", "modules", version)
    os.makedirs(dst_mod, exist_ok=True)
    for name in os.listdir(src_mod):
        if name.startswith("modules."):
            shutil.copy(os.path.join(src_mod, name), dst_mod)
    for d in MODULE_DIRS:
        src = os.path.join(src_mod, "kernel", d)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(dst_mod, "kernel", d), dirs_exist_ok=True)
    for f in MODULE_FILES:
        os.makedirs(os.path.dirname(os.path.join(dst_mod, "kernel", f)), exist_ok=True)
        shutil.copy(os.path.join(src_mod, "kernel", f), os.path.join(dst_mod, "kernel", f))
    _run(["depmod", "-b", root, version], 300)
    with open(os.path.join(root, "init"), "w") as fh:
        fh.write(INIT)
    os.chmod(os.path.join(root, "init"), 0o755)
    initrd = os.path.join(workdir, "initrd.zst")
    with open(initrd, "wb") as out:
        find = subprocess.Popen(["find", "."], cwd=root, stdout=subprocess.PIPE)
        cpio = subprocess.Popen(
            ["cpio", "-o", "-H", "newc", "--quiet"], cwd=root, stdin=find.stdout, stdout=subprocess.PIPE
        )
        zstd = subprocess.Popen(["zstd", "-q", "-1", "-T0"], stdin=cpio.stdout, stdout=out)
        find.stdout.close()
        cpio.stdout.close()
        if zstd.wait(600) != 0 or cpio.wait(60) != 0 or find.wait(60) != 0:
            raise VmUnavailable("packing the initramfs failed")
    shutil.copy(os.path.join(kern, "boot", f"vmlinuz-{version}"), os.path.join(workdir, "vmlinuz"))
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(kern, ignore_errors=True)
    shutil.rmtree(debs, ignore_errors=True)
    with open(done, "w") as fh:
        fh.write(version)
    log(f"vm: image built in {time.monotonic() - t0:.0f} s")
    return Image(os.path.join(workdir, "vmlinuz"), initrd, version)


def boot(image: Image, share: str, timeout: float = 2700, memory_mb: int = 2048) -> str:
    """Boot once with ``share`` as the guest's /mnt; the guest runs /mnt/run.sh and powers off. Returns the console."""
    argv = [
        "qemu-system-x86_64",
        "-accel",
        "tcg",
        "-cpu",
        "max",
        "-smp",
        "2",
        "-m",
        str(memory_mb),
        "-nographic",
        "-no-reboot",
        "-kernel",
        image.kernel,
        "-initrd",
        image.initrd,
        "-append",
        "console=ttyS0 quiet panic=-1 rdinit=/init",
        "-virtfs",
        f"local,path={share},mount_tag=share,security_model=none,id=share",
    ]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, preexec_fn=_first
        )
        console = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:  # the scenarios that finished are in the share; the rest fail by name
        console = f"(the VM did not power off within {timeout:.0f} s and was stopped)\n" + str(exc.stdout or "")
    if not os.path.exists(os.path.join(share, "boot.txt")):
        raise VmUnavailable(f"the VM never mounted its share; console tail: {console[-800:]}")
    return console
