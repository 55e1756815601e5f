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


# ------------------------------------------------------------------------------------------------ fix steps
# A finding's fix is a list of steps, each a command to paste or a note to read. A check says which with
# command()/note(); an unmarked step is a command when its first word is a program an operator runs (below) and
# it does not read as a sentence. The kind travels in the report (``fix_steps``), so renderers never guess.
COMMAND_WORDS = frozenset(
    """sysctl modprobe echo printf kubectl iptables ip6tables iptables-save ip6tables-save iptables-legacy-save
    iptables-nft-save ip grep conntrack watch curl apt-get dnf update-alternatives for while kpdiag nc find fuser nft
    ipvsadm ipset sudo systemctl journalctl ss crictl nsenter test if cat dig nslookup ls uname nstat ping tcpdump
    ethtool awk sed tee kubeadm helm""".split()
)


class FixStep(str):
    """A fix step whose kind ("command" or "note") the check decided."""

    kind: str

    def __new__(cls, text: str, kind: str):
        if kind not in ("command", "note"):
            raise ValueError(f"a fix step is a command or a note, not {kind!r}")
        self = super().__new__(cls, text)
        self.kind = kind
        return self

    def __reduce__(self):
        return (FixStep, (str(self), self.kind))


def command(text: str) -> FixStep:
    """A step to paste into a shell."""
    return FixStep(text, "command")


def note(text: str) -> FixStep:
    """A step to read (prose; it may quote a command inside it)."""
    return FixStep(text, "note")


def step_kind(step: str) -> str:
    """ "command" or "note" for one fix step: the check's own choice when it made one, else by its first word."""
    kind = getattr(step, "kind", None)
    if kind:
        return kind
    first, _, rest = step.strip().partition(" ")
    if first not in COMMAND_WORDS:
        return "note"
    # "find who set the policy: …", "test a Service with its port …": an English sentence that starts with a verb
    second = rest.split(" ", 1)[0]
    if second in ("who", "what", "which", "a", "an", "the", "your", "that", "why", "whether"):
        return "note"
    return "command"


THIS_NODE = "<this node>"
BUNDLE_OPTION = "--bundle <bundle>"


def fill_known(fix: tuple, node: str = "", bundle: str | None = None) -> tuple:
    """A finding's fix with the placeholders kpdiag knows filled in: ``<this node>`` by the node's name (from the
    manifest), ``--bundle <bundle>`` by the bundle's path — or, when the state was read live on the node (no bundle on
    disk), dropped: the command then traces this node live. Each value shell-quoted; a step keeps its kind."""
    import shlex

    out = []
    for step in fix:
        text = str(step)
        if node and THIS_NODE in text:
            text = text.replace(THIS_NODE, shlex.quote(node))
        if BUNDLE_OPTION in text:
            if bundle:
                text = text.replace(BUNDLE_OPTION, f"--bundle {shlex.quote(bundle)}")
            else:
                text = text.replace(BUNDLE_OPTION + " ", "").replace(BUNDLE_OPTION, "")
        if text == str(step):
            out.append(step)
        else:
            out.append(FixStep(text, step.kind) if isinstance(step, FixStep) else text)
    return tuple(out)
