"""What the kernel gives IPVS mode: its modules (KP301, also asked by --preflight ipvs) and how long it keeps idle
connections (KP310). What kube-proxy programmed in IPVS mode is checks/ipvs_mode.py's."""

from __future__ import annotations

import re
from typing import Optional

from kpdiag import dataplane as dataplanes
from kpdiag.fixcmd import note, persist_modules, persist_sysctls, set_sysctls
from kpdiag.checkapi import Skip, check
from kpdiag.model import Evidence
from kpdiag.bundle import sources
from kpdiag.state.typed_node import Kernel, Modules, ModulesOnDisk, Preflight, Sysctls
from kpdiag.state.typed_proxy import IpvsProblems, IpvsTimeout, KubeProxyConfig, KubeProxyVersion, ProxyMode


def ipvs_modules(kernel: tuple[int, int, int] | None, scheduler: str | None = None) -> list[str]:
    """The modules kube-proxy's IPVS mode needs on this kernel (nf_conntrack_ipv4 became nf_conntrack in 4.19)."""
    mods = ["ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh"]
    if scheduler and f"ip_vs_{scheduler}" not in mods:
        mods.append(f"ip_vs_{scheduler}")
    mods.append("nf_conntrack_ipv4" if kernel is not None and kernel < (4, 19, 0) else "nf_conntrack")
    return mods


def missing_ipvs_modules(kernel, modules, cfg=None) -> tuple[list[str], list[str]]:
    """(the modules IPVS mode needs, those neither loaded nor built in) — typed Kernel, Modules, KubeProxyConfig."""
    scheduler = (cfg.get("ipvs.scheduler") or "").strip() if cfg is not None else ""
    wanted = ipvs_modules(kernel.version, scheduler or None)
    loaded = set(modules.loaded or {}) | modules.builtin
    return wanted, [m for m in wanted if m not in loaded]


def _no_proc_modules(new, uname: Kernel, ipvs, on_disk):
    """Without /proc/modules: IPVS is missing when /proc/net/ip_vs says so (Skip when it does not)."""
    gone = [p for p in ipvs.problems if "not loaded" in p.error]
    if not gone:
        raise Skip(f"needs {sources.MODULES} (/proc/modules) to tell which IPVS modules are loaded")
    wanted = ipvs_modules(uname.version, None)
    return new(
        f"IPVS is not available on this node (kernel {'.'.join(map(str, uname.version))}): {gone[0].error}"
        + (
            "; /proc/modules does not exist, so modules cannot be loaded here — ip_vs would have to be built in"
            if on_disk.no_loadable_modules
            else ""
        ),
        fix=(
            note("boot a kernel with IPVS built in (CONFIG_IP_VS=y and its schedulers): this one loads no modules")
            if on_disk.no_loadable_modules
            else f"modprobe -a {' '.join(wanted)}",
            "or use mode: nftables (kernel ≥ 5.13) / iptables on this node",
        ),
        evidence=[Evidence(gone[0].source, gone[0].error)],
        subject="node",
    )


def _not_in_kernel(new, uname: Kernel, cfg, modules, on_disk, missing: list[str], absent: list[str]):
    """The modules are not in this kernel's module list at all: modprobe cannot load them."""
    k = ".".join(map(str, uname.version))
    # the kernel's own module list says modprobe cannot find them: loading is not the fix
    return new(
        f"mode is ipvs but {', '.join(absent)} {'is' if len(absent) == 1 else 'are'} not in kernel {k}'s modules "
        "(neither loaded, built in, nor in its modules.dep): IPVS cannot work on this kernel",
        fix=(
            note(
                "install this kernel's extra modules (e.g. linux-modules-extra-$(uname -r) on Ubuntu, "
                "kernel-modules-extra on RHEL/Fedora) or boot a kernel that has IP_VS"
            ),
            note("or run kube-proxy in nftables mode (kernel ≥ 5.13) or iptables mode on this node"),
            f"modinfo {absent[0]}   # 'not found' confirms it",
        ),
        evidence=[e for e in (cfg.evidence("mode") if cfg is not None else None,) if e]
        + [
            Evidence(on_disk.source, f"not listed: {', '.join(absent)}"),
            Evidence(modules.source, f"not loaded: {', '.join(missing)}"),
            Evidence(uname.source, k, 1),
        ],
        subject="node",
    )


def _not_loaded(new, uname: Kernel, cfg, modules, kp_version, wanted: list[str], missing: list[str]):
    """The modules exist but are not loaded: what kube-proxy of this version does then, and how to load them."""
    version = kp_version.version if kp_version is not None else None
    k = ".".join(map(str, uname.version))
    if version is None:
        consequence = "kube-proxy ≤ 1.25 then falls back to iptables mode; ≥ 1.26 exits with an error"
    elif version < (1, 26):
        consequence = f'kube-proxy {version[0]}.{version[1]} falls back to iptables mode (log: "Can\'t use ipvs proxier, trying iptables proxier")'
    else:
        consequence = (
            f"kube-proxy {version[0]}.{version[1]} does not fall back: it exits and restarts until they are there"
        )
    return new(
        f"mode is ipvs but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not loaded on kernel {k}: {consequence}",
        fix=(
            persist_modules(wanted, "ipvs") + "   # now and at every boot",
            "sudo apt-get install -y ipset ipvsadm   # Debian/Ubuntu;  sudo dnf install -y ipset ipvsadm   # RHEL/Fedora",
            set_sysctls({"net.ipv4.vs.conntrack": 1})
            + " && "
            + persist_sysctls({"net.ipv4.vs.conntrack": 1}, "ipvs-conntrack"),
            "kubectl -n kube-system rollout restart daemonset kube-proxy",
            "kubectl -n kube-system logs ds/kube-proxy | grep -i 'Using ipvs Proxier'   # the line to see afterwards",
        ),
        evidence=[e for e in (cfg.evidence("mode") if cfg is not None else None,) if e]
        + [
            Evidence(modules.source, f"not listed: {', '.join(missing)}"),
            Evidence(uname.source, k, 1),
        ],
        subject="node",
    )


@check(
    "KP301",
    "ipvs-unavailable",
    "IPVS mode wanted, kernel modules missing",
    "error",
    explains=("KP701", "KP302", "KP303", "KP304", "KP308"),
    advice_for="kube-proxy",
    preflight=("ipvs",),
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
def ipvs_unavailable(
    new,
    uname: Kernel,
    ipvs: Optional[IpvsProblems] = None,
    cfg: Optional[KubeProxyConfig] = None,
    kp_version: Optional[KubeProxyVersion] = None,
    modules: Optional[Modules] = None,
    preflight: Optional[Preflight] = None,
    on_disk: Optional[ModulesOnDisk] = None,
):
    if not dataplanes.get(preflight.mode).services_in_ipvs:
        if cfg is None:
            raise Skip(f"needs the kube-proxy configuration ({sources.KP_CONFIG} or its ConfigMap)")
        if not dataplanes.get(cfg.mode).services_in_ipvs:
            return
    if modules is None:
        # no /proc/modules (a kernel without loadable modules, or not collected): /proc/net/ip_vs is the sign of life
        yield _no_proc_modules(new, uname, ipvs, on_disk)
        return
    wanted, missing = missing_ipvs_modules(uname, modules, cfg)
    if not missing:
        return
    available = modules.available
    absent = [m for m in missing if available is not None and m not in available]
    if absent:
        yield _not_in_kernel(new, uname, cfg, modules, on_disk, missing, absent)
        return
    yield _not_loaded(new, uname, cfg, modules, kp_version, wanted, missing)


_TIMEOUT_RE = re.compile(r"Timeout \(tcp tcpfin udp\):\s*(\d+)\s+(\d+)\s+(\d+)")


def ipvs_timeouts(timeout: IpvsTimeout | None) -> tuple[int, int, int, int] | None:
    """(tcp, tcpfin, udp, line) from ``ipvsadm -L --timeout`` (node/ipvs-timeout.txt), or None."""
    if timeout is None:
        return None
    for lineno, line in enumerate(timeout.text.splitlines(), 1):
        m = _TIMEOUT_RE.search(line)
        if m:
            return int(m.group(1)), int(m.group(2)), int(m.group(3)), lineno
    timeout.problem("no 'Timeout (tcp tcpfin udp): N N N' line (ipvsadm -L --timeout)")
    return None


@check(
    "KP310",
    "ipvs-idle-timeout",
    "IPVS forgets idle TCP connections before TCP keepalive probes them",
    "info",
    modes=("ipvs",),
    advice_for="kube-proxy",
    symptom="In IPVS mode, long-lived connections through a ClusterIP (database pools, gRPC streams, message brokers) die "
    "after some quiet minutes: the next request gets a reset or hangs, while short connections always work.",
    why="""
        IPVS keeps its own table of connections, separate from conntrack, and drops an established TCP entry after
        it has been idle for the IPVS tcp timeout (900 s unless set: ipvsadm -L --timeout, kube-proxy's
        ipvs.tcpTimeout). The next packet of that connection no longer matches and goes to whatever real server the
        scheduler picks — which answers with a reset. TCP keepalive only helps when it probes more often than that:
        the kernel's default net.ipv4.tcp_keepalive_time is 7200 s, far longer than IPVS waits.
    """,
    fix="Make clients send keepalives more often than the IPVS tcp timeout (net.ipv4.tcp_keepalive_time below it, or the "
    "application's own keepalive), or raise ipvs.tcpTimeout in the kube-proxy configuration.",
)
def ipvs_idle_timeout(
    new,
    sysctls: Sysctls,
    timeout: Optional[IpvsTimeout] = None,
    cfg: Optional[KubeProxyConfig] = None,
    proxy: Optional[ProxyMode] = None,
):
    if not proxy.dataplane.services_in_ipvs:
        return
    t = ipvs_timeouts(timeout)
    if t is None:
        raise Skip(f"needs {sources.IPVS_TIMEOUT} (ipvsadm -L --timeout)")
    tcp, _, _, line = t
    keep = sysctls.value("net.ipv4.tcp_keepalive_time")
    if keep is None:
        raise Skip("net.ipv4.tcp_keepalive_time is not in the collected sysctls")
    try:
        keepalive = int(keep.value.strip())
    except ValueError:
        raise Skip(f"net.ipv4.tcp_keepalive_time is not a number: {keep.value!r}") from None
    if tcp <= 0 or keepalive < tcp:
        return
    evidence = [
        Evidence(timeout.source, f"Timeout (tcp tcpfin udp): tcp {tcp} s", line),
        sysctls.evidence("net.ipv4.tcp_keepalive_time"),
    ]
    if cfg is not None and cfg.get("ipvs.tcpTimeout") is not None:
        evidence.append(cfg.evidence("ipvs.tcpTimeout"))
    yield new(
        f"IPVS drops a TCP connection after {tcp} s idle, and this node's TCP keepalive starts only after {keepalive} s: idle "
        "long-lived connections through ClusterIPs are forgotten and reset on their next packet",
        fix=(
            f"sysctl -w net.ipv4.tcp_keepalive_time={max(60, tcp - 300)}   # on the client side (a pod's own network namespace "
            "has its own value: set it in the pod's securityContext.sysctls)",
            "or the application's keepalive / ping interval below that (database pool keepalive, gRPC keepalive time)",
            "or kube-proxy's ipvs.tcpTimeout (e.g. 3600s) in its ConfigMap, then restart kube-proxy; check: ipvsadm -L --timeout",
        ),
        evidence=[e for e in evidence if e],
        subject="node",
    )
