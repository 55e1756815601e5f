"""The RBAC manifests kpdiag needs in a cluster, shipped inside the package (the wheel, the single file, the image):
``kpdiag rbac NAME | kubectl apply -f -`` prints them. deploy/rbac-*.yaml in the repository are links to these files.

Every message that tells the user to apply one names it through :func:`apply_command`, so the command it names is
one ``kpdiag rbac`` prints (tests/cli/test_rbac_command.py)."""

from __future__ import annotations

# name → (file in this package, what it is for)
MANIFESTS: dict[str, tuple[str, str]] = {
    "svc": ("rbac-svc.yaml", "read-only RBAC for kpdiag svc and kpdiag policy with the API (ServiceAccount kpdiag)"),
    "svc-whoami": (
        "rbac-svc-whoami.yaml",
        "opt-in, beside svc: list every pod, so kpdiag svc finds who is asking (read its cost first)",
    ),
    "svc-kube-system": (
        "rbac-svc-kube-system.yaml",
        "opt-in, beside svc: list kube-system's DaemonSets and pods, read its pods' logs (CNI by any name, CoreDNS)",
    ),
    "cluster": (
        "rbac-cluster.yaml",
        "kpdiag cluster: namespace kpdiag, its node pods' read-only ServiceAccount, the operator's grants",
    ),
}


def manifest_text(name: str) -> str:
    """The manifest ``name`` (a key of MANIFESTS) as shipped; KeyError for another name."""
    from importlib.resources import files

    filename, _ = MANIFESTS[name]
    return files(__name__).joinpath(filename).read_text(encoding="utf-8")


def apply_command(*names: str) -> str:
    """The command that applies these manifests, as messages name it."""
    for name in names:
        if name not in MANIFESTS:
            raise KeyError(name)
    return f"kpdiag rbac {' '.join(names)} | kubectl apply -f -"
