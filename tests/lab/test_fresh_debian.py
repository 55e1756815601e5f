"""The README's two commands, verbatim, on a fresh minimal Debian: a debootstrap'd bookworm minbase with only what
the README says to install (git, python3-venv) — no iptables, nft or ip, no sudo, no compiler — entered with chroot
as root (the lab tests inside skip: their tools are missing, and CI is not set in there).

  1. the install + demo command: exit 1 (errors found), KP301 and KP701 in the report;
  2. the test command: passes, the lab tests skipped with their reason.

Nothing is cached between runs (a new debootstrap each time: ~2 minutes, plus the package installs). The inner test
run is the README's test command verbatim, narrowed with PYTEST_ADDOPTS to SUBSET (the whole suite in a chroot
takes longer than CI allows for one test): the documents as tests (which analyze the fixtures), the trace CLI whose
usage errors once needed iptables on the host, and lab tests that must skip with their reason. What the chroot reaches: the
Debian mirror (debootstrap) and the package index — through the host's pip settings that say how (PIP_* variables,
and the CA bundle PIP_CERT names, copied in) and its DNS (resolv.conf).

Needs root, debootstrap and the network: under CI=true it must run; elsewhere it skips with the reason (KPDIAG_SLOW=1
runs it outside CI too). KPDIAG_FRESH_DEBIAN_FULL=1 runs the whole suite in the chroot instead of SUBSET."""

import os
import re
import shutil
import subprocess

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.lab, pytest.mark.long]

MIRROR = os.environ.get("KPDIAG_DEBIAN_MIRROR", "http://deb.debian.org/debian")
SUITE = "bookworm"
SUBSET = " ".join(
    [
        "tests/packaging/test_docs.py",
        "tests/cli/test_trace_cli.py",
        "tests/cli/test_argument_errors.py",
        "tests/lab/test_read_only.py",
        "tests/lab/test_iptables_oracle.py",
    ]
)
PIP_ENV = ("PIP_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "HTTP_PROXY", "HTTPS_PROXY")


def _readme_commands() -> tuple[str, str]:
    from tests.packaging.docblocks import readme_commands

    return readme_commands()


def _needs():
    missing = [t for t in ("debootstrap", "chroot", "git", "mount") if not shutil.which(t)]
    why = None
    if os.geteuid() != 0:
        why = "needs root (debootstrap, chroot)"
    elif missing:
        why = f"needs {', '.join(missing)} (apt-get install debootstrap git)"
    elif not (os.environ.get("CI") == "true" or os.environ.get("KPDIAG_SLOW")):
        why = "builds a Debian root filesystem and installs from the package index (minutes): CI=true or KPDIAG_SLOW=1"
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture
def debian(tmp_path):
    _needs()
    root = tmp_path / "debian"
    proc = subprocess.run(
        ["debootstrap", "--variant=minbase", "--include=git,python3-venv", SUITE, str(root), MIRROR],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    mounted = []
    try:
        # /proc, and /dev with its submounts (/dev/pts: the tests that run kpdiag on a pseudo-terminal), kept from
        # propagating back to the host's /dev
        for args, where in ((["-t", "proc", "proc"], "proc"), (["--rbind", "/dev"], "dev")):
            subprocess.run(["mount", *args, str(root / where)], check=True, timeout=60)
            mounted.append(root / where)
        subprocess.run(["mount", "--make-rslave", str(root / "dev")], check=True, timeout=60)
        shutil.copy("/etc/resolv.conf", root / "etc" / "resolv.conf")
        cert = os.environ.get("PIP_CERT")
        if cert and os.path.isfile(cert):
            dest = root / cert.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(cert, dest)
        yield root
    finally:
        for where in reversed(mounted):
            subprocess.run(["umount", "-R", "-l", str(where)], capture_output=True, timeout=60)


def _in(root, command: str, **env) -> subprocess.CompletedProcess:
    base = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "NO_COLOR": "1",
    }
    base.update({k: os.environ[k] for k in PIP_ENV if k in os.environ})
    base.update(env)
    return subprocess.run(
        ["chroot", str(root), "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in base.items()), "/bin/bash", "-c", command],
        capture_output=True,
        text=True,
        timeout=1800,
        stdin=subprocess.DEVNULL,
    )


def test_readme_commands_on_a_fresh_minimal_debian(debian):
    root = debian
    for tool in ("iptables", "nft", "ip", "sudo", "gcc"):  # what the README does not ask for is not there
        assert not (root / "usr" / "sbin" / tool).exists() and not (root / "usr" / "bin" / tool).exists(), tool
    clone = root / "root" / "kpdiag"
    subprocess.run(["git", "clone", "-q", ROOT, str(clone)], check=True, timeout=300)  # HEAD: what is committed
    demo, test = _readme_commands()

    run = _in(root, f"cd /root/kpdiag && {demo}")
    print(f"demo: exit {run.returncode}")
    assert run.returncode == 1, (run.stdout[-2000:], run.stderr[-3000:])  # 1: errors found, as the README says
    assert "KP301" in run.stdout and "KP701" in run.stdout and "Traceback" not in run.stderr

    whole = os.environ.get("KPDIAG_FRESH_DEBIAN_FULL") == "1"  # the whole suite in there (15-20 minutes)
    extra = {} if whole else {"PYTEST_ADDOPTS": SUBSET}
    run = _in(root, f"cd /root/kpdiag && {test}", KPDIAG_README_INNER="1", **extra)
    tail = run.stdout[-4000:] + run.stderr[-2000:]
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    print(f"tests in the chroot: {summary}")
    assert run.returncode == 0, tail
    assert re.search(r"\d+ passed", summary) and "failed" not in summary and "error" not in summary, tail
    lab_skips = [line for line in run.stdout.splitlines() if line.startswith("SKIPPED") and "tests/lab/" in line]
    print("\n".join(lab_skips))
    assert lab_skips, tail  # the lab tests were there, and skipped …
    for line in lab_skips:  # … each with its reason: the missing tools
        assert re.search(r"iptables|nft|\bip\b|root|debootstrap|umoci|CI=true", line), line
