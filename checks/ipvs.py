"""IPVS mode prerequisites."""

from __future__ import annotations

from kpdiag import evidence as ev
from kpdiag.checkapi import Skip, check
from kpdiag.model import Evidence


def ipvs_modules(kernel: tuple[int, int, int] | None, scheduler: str | None = None) -> list[str]:
    """The modules kube-proxy's IPVS mode needs on this kernel (nf_conntrack_ipv4 became nf_conntrack in 4.19)."""
    mods = ["ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh"]
    if scheduler and f"ip_vs_{scheduler}" not in mods:
        mods.append(f"ip_vs_{scheduler}")
    mods.append("nf_conntrack_ipv4" if kernel is not None and kernel < (4, 19, 0) else "nf_conntrack")
    return mods


def missing_ipvs_modules(ctx) -> tuple[list[str], list[str]]:
    cfg = ctx.kube_proxy_config
    scheduler = (cfg.get("ipvs.scheduler") or "").strip() if cfg is not None else ""
    wanted = ipvs_modules(ctx.kernel, scheduler or None)
    loaded = set(ctx.modules or {}) | ctx.modules_builtin
    return wanted, [m for m in wanted if m not in loaded]


@check(
    "KP301", "ipvs-unavailable", "IPVS mode wanted, kernel modules missing", "error",
    needs=("kernel",),
    symptom="kube-proxy is configured with mode: ipvs, yet Services behave as in iptables mode — or kube-proxy crash-loops.",
    why="""
        IPVS mode needs the ip_vs kernel module, its schedulers (ip_vs_rr, ip_vs_wrr, ip_vs_sh, and the one you
        configured) and connection tracking (nf_conntrack; called nf_conntrack_ipv4 before kernel 4.19). When they
        cannot be loaded, kube-proxy up to v1.25 logs "Can't use ipvs proxier, trying iptables proxier" and silently
        runs in iptables mode; from v1.26 it refuses to start.
    """,
    fix="Load the modules (modprobe …), persist them in /etc/modules-load.d/ipvs.conf, install ipset and ipvsadm, then restart kube-proxy.",
    references=("https://kubernetes.io/docs/reference/networking/virtual-ips/#proxy-mode-ipvs",),
)
def ipvs_unavailable(ctx, new):
    cfg = ctx.kube_proxy_config
    preflight = getattr(ctx, "preflight", None) == "ipvs"
    if not preflight:
        if cfg is None:
            raise Skip("needs the kube-proxy configuration (node/kube-proxy/config.yaml or its ConfigMap)")
        if cfg.mode != "ipvs":
            return
    if ctx.modules is None:
        # no /proc/modules (a kernel without loadable modules, or not collected): /proc/net/ip_vs is the sign of life
        gone = [p for p in ctx.problems if p.source.endswith("node/ipvsadm.txt") and "not loaded" in p.error]
        if not gone:
            raise Skip("needs node/modules.txt (/proc/modules) to tell which IPVS modules are loaded")
        wanted = ipvs_modules(ctx.kernel, None)
        yield new(
            f"IPVS is not available on this node (kernel {'.'.join(map(str, ctx.kernel))}): {gone[0].error}"
            + ("" if ctx.bundle.exists("node/modules.txt") else "; /proc/modules does not exist, so modules cannot be loaded here — ip_vs would have to be built in"),
            fix=(f"modprobe -a {' '.join(wanted)}   # on a kernel with loadable modules",
                 "or use mode: nftables (kernel ≥ 5.13) / iptables on this node"),
            evidence=[Evidence(gone[0].source, gone[0].error)],
            subject="node",
        )
        return
    wanted, missing = missing_ipvs_modules(ctx)
    if not missing:
        return
    version = ctx.kube_proxy_version
    k = ".".join(map(str, ctx.kernel))
    if version is None:
        consequence = "kube-proxy ≤ 1.25 then falls back to iptables mode; ≥ 1.26 exits with an error"
    elif version < (1, 26):
        consequence = f"kube-proxy {version[0]}.{version[1]} falls back to iptables mode (log: \"Can't use ipvs proxier, trying iptables proxier\")"
    else:
        consequence = f"kube-proxy {version[0]}.{version[1]} does not fall back: it exits and restarts until they are there"
    yield new(
        f"mode is ipvs but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not loaded on kernel {k}: {consequence}",
        fix=(
            f"modprobe -a {' '.join(wanted)}",
            f"printf '%s\\n' {' '.join(wanted)} > /etc/modules-load.d/ipvs.conf   # load them at every boot",
            "apt-get install -y ipset ipvsadm   # Debian/Ubuntu;  dnf install -y ipset ipvsadm   # RHEL/Fedora",
            "sysctl -w net.ipv4.vs.conntrack=1 && echo 'net.ipv4.vs.conntrack = 1' >> /etc/sysctl.d/99-kubernetes.conf",
            "kubectl -n kube-system rollout restart daemonset kube-proxy",
            "kubectl -n kube-system logs ds/kube-proxy | grep -i 'Using ipvs Proxier'   # the line to see afterwards",
        ),
        evidence=[e for e in (ev.config(ctx, "mode"),) if e] + [Evidence(ctx.bundle.display("node/modules.txt"), f"not listed: {', '.join(missing)}"),
                  Evidence(ctx.bundle.display("node/uname.txt"), k, 1)],
        subject="node",
    )
