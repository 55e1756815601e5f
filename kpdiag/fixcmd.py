"""Fix commands that are safe to paste: idempotent, never truncating a file another tool owns, sudo where root is needed.

Settings are persisted in a drop-in file of kpdiag's own (one per setting group, named after it), rewritten whole each
time — running the fix twice leaves the same file, and no shared file (99-kubernetes.conf, k8s.conf) is touched. The
name sorts after the usual ones (99-zz-…) so that an older file setting the opposite value does not win at boot.
"""

from __future__ import annotations

import shlex

SYSCTL_DIR = "/etc/sysctl.d"
MODULES_DIR = "/etc/modules-load.d"


def sysctl_dropin(name: str) -> str:
    return f"{SYSCTL_DIR}/99-zz-kpdiag-{name}.conf"


def persist_sysctls(settings: dict[str, object], name: str) -> str:
    """One command: write ``settings`` to kpdiag's drop-in ``name`` and apply every sysctl file."""
    body = "".join(f"{k} = {v}\\n" for k, v in settings.items())
    return f"printf {shlex.quote(body)} | sudo tee {sysctl_dropin(name)} >/dev/null && sudo sysctl --system >/dev/null"


def set_sysctls(settings: dict[str, object]) -> str:
    """Apply now (not persisted)."""
    return "sudo sysctl -w " + " ".join(f"{k}={v}" for k, v in settings.items())


def persist_modules(modules: list[str], name: str) -> str:
    """Load ``modules`` now and at every boot (kpdiag's own modules-load.d file)."""
    body = "".join(f"{m}\\n" for m in modules)
    return f"sudo modprobe -a {' '.join(modules)} && printf {shlex.quote(body)} | sudo tee {MODULES_DIR}/kpdiag-{name}.conf >/dev/null"
