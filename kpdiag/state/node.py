"""NodeState: a bundle's files parsed once, lazily, each parse error recorded (file and line).

A live run and an offline ``analyze`` both produce a :class:`~kpdiag.bundle.store.Bundle` and go
through this same code, so they see the same state.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast, overload

from kpdiag.bundle.store import Bundle
from kpdiag.errors import InputError
from kpdiag.bundle import sources

if TYPE_CHECKING:
    from kpdiag.bundle.store import Problem
    from kpdiag.dataplane.base import Dataplane
    from kpdiag.parse.iptables import Ruleset
    from kpdiag.parse.ipset import IpSet
    from kpdiag.parse.ipvs import VirtualService
    from kpdiag.parse.nft import NftRuleset
    from kpdiag.parse.node import Cmdline, IpRule, KubeProxyConfig, Metrics, Module, Value
    from kpdiag.parse.recent import RecentState
    from kpdiag.state.cluster import ClusterView, Svc
    from kpdiag.state.cloud import CloudModel
    from kpdiag.state.cni import CniModel
    from kpdiag.state.kpsettings import Effective
    from kpdiag.state.kube_rules import ProgrammedPort
    from kpdiag.state.service_proxy import Implementer
    from kpdiag.trace.netfilter import IptablesTracer
    from kpdiag.trace.routing import RoutingTable
    from kpdiag.trace.walker import PacketWalker

T = TypeVar("T")


def _problem(exc: InputError) -> Problem:
    from kpdiag.bundle.store import Problem

    where = exc.source if exc.line is None else f"{exc.source}:{exc.line}"
    return Problem(where, exc.message)


# ---------------------------------------------------------------------------------------
# the rest of the node: small files, parsed on first use


class _Lazy(Generic[T]):
    """A property: ``source`` parsed by the parser the catalogue declares for it, on first use (None when absent);
    ``T`` is what that parser returns."""

    def __init__(self, source: sources.Source) -> None:
        self.source = source

    @overload
    def __get__(self, obj: None, owner: type) -> _Lazy[T]: ...
    @overload
    def __get__(self, obj: _NodeFiles, owner: type) -> T | None: ...
    def __get__(self, obj: _NodeFiles | None, owner: type) -> T | None | _Lazy[T]:
        if obj is None:
            return self
        cache = obj.__dict__.setdefault("_lazy", {})
        if self.source not in cache:
            cache[self.source] = obj._parse(self.source)
        return cast("T | None", cache[self.source])


class _NodeFiles:
    bundle: Bundle
    sysctl: _Lazy[dict[str, Value]] = _Lazy(sources.SYSCTL)
    modules: _Lazy[dict[str, Module]] = _Lazy(sources.MODULES)
    kernel: _Lazy[tuple[int, int, int]] = _Lazy(sources.UNAME)
    metrics: _Lazy[Metrics] = _Lazy(sources.KP_METRICS)
    conntrack_stats: _Lazy[dict[str, int]] = _Lazy(sources.CONNTRACK_STATS)
    ip_rules: _Lazy[list[IpRule]] = _Lazy(sources.IP_RULE)

    @property
    def kube_proxy_config(self) -> KubeProxyConfig | None:
        """The KubeProxyConfiguration: node/kube-proxy/config.yaml, else the ConfigMap's config.conf."""
        cache = self.__dict__.setdefault("_lazy", {})
        if "kpconfig" not in cache:
            cfg: KubeProxyConfig | None = self._parse(sources.KP_CONFIG)
            if cfg is None:
                cm = self.bundle.read_json(sources.KP_CONFIGMAP)
                data = (cm or {}).get("data") if isinstance(cm, dict) else None
                if isinstance(data, dict):
                    text = data.get("config.conf") or next(
                        (v for k, v in data.items() if k.endswith((".conf", ".yaml"))), None
                    )
                    if isinstance(text, str):
                        cfg = self._parse_text(text, f"{sources.KP_CONFIGMAP}#config.conf", sources.KP_CONFIG)
            cache["kpconfig"] = cfg
        return cast("KubeProxyConfig | None", cache["kpconfig"])

    @property
    def kube_proxy_settings(self) -> Effective | None:
        """kube-proxy's effective configuration (state/kpsettings.py): its file or ConfigMap, its flags, its log;
        None when none of them was collected."""
        cache = self.__dict__.setdefault("_lazy", {})
        if "kpsettings" not in cache:
            config = self.kube_proxy_config
            cmdline: Cmdline | None = self._parse(sources.KP_CMDLINE)
            log = self.kube_proxy_log
            if config is None and cmdline is None and log is None:
                cache["kpsettings"] = None
            else:
                from kpdiag.state.kpsettings import effective

                display = self.bundle.display
                cache["kpsettings"] = effective(
                    config, cmdline, log, display(sources.KP_LOG), display(sources.KP_CONFIG)
                )
        return cast("Effective | None", cache["kpsettings"])

    @property
    def proxy_mode_running(self) -> str | None:
        """What kube-proxy answers on /proxyMode (iptables, ipvs, nftables, kernelspace…)."""
        text = self.bundle.read_text(sources.KP_PROXY_MODE)
        if text is None:
            return None
        mode = text.strip()
        if not mode or len(mode) > 40 or " " in mode:
            self.bundle.problem(sources.KP_PROXY_MODE, f"unexpected /proxyMode answer: {mode[:60]!r}")
            return None
        return mode

    @property
    def healthz(self) -> dict[str, Any] | None:
        data = self.bundle.read_json(sources.KP_HEALTHZ)
        if data is not None and not isinstance(data, dict):
            self.bundle.problem(sources.KP_HEALTHZ, "expected a JSON object")
            return None
        return cast("dict[str, Any] | None", data)

    @property
    def kube_proxy_log(self) -> list[str] | None:
        text = self.bundle.read_text(sources.KP_LOG)
        return None if text is None else text.splitlines()

    @property
    def nft_text(self) -> str | None:
        """node/nft-ruleset.json as text (read once; parsed only when something needs the rules)."""
        if "_nft_text" not in self.__dict__:
            self.__dict__["_nft_text"] = self.bundle.read_text(sources.NFT_RULESET)
        return cast("str | None", self.__dict__["_nft_text"])

    @property
    def nft_kube_proxy_table(self) -> str | None:
        """The family of kube-proxy's nftables table ("ip"/"ip6"), found without parsing the whole ruleset
        (on an iptables-nft node with 10,000 Services that JSON is hundreds of MB once decoded)."""
        import re

        text = self.nft_text
        m = re.search(r'\{"table":\s*\{"family":\s*"(ip6?)",\s*"name":\s*"kube-proxy"', text or "")
        return m.group(1) if m else None

    def sysctl_value(self, key: str) -> Value | None:
        s = self.sysctl
        return None if s is None else s.get(key)

    def _parse(self, source: sources.Source, *, record_missing: bool = False) -> Any:
        """``source`` read and parsed by its declared parser (kpdiag/bundle/sources.py); a parse error is a recorded problem."""
        data = self.bundle.read_text(source, record_missing)
        return None if data is None else self._parse_text(data, self.bundle.display(source), source)

    def _parse_text(self, text: str, display: str, source: sources.Source) -> Any:
        """``text`` parsed by ``source``'s declared parser (None, and a recorded problem, when it is not readable)."""
        parser = source.parse_function()
        assert parser is not None, f"{source} declares no parser"
        try:
            parsed = parser(text, display)
        except InputError as exc:
            self.bundle.problems.append(_problem(exc))
            return None
        for rejected in getattr(parsed, "rejected", None) or ():  # lines the parser left out (the rest is read)
            self.bundle.problems.append(_problem(rejected))
        return parsed


class NodeState(_NodeFiles):
    """Everything kpdiag knows of one node, parsed lazily from its bundle."""

    def __init__(self, bundle: Bundle, *, focus: tuple[str, str] | None = None, preflight: str | None = None) -> None:
        self.bundle = bundle
        self._focus = focus or self._partial_focus()
        self._preflight = preflight

    def _partial_focus(self) -> tuple[str, str] | None:
        """A partial bundle (``kpdiag node --service``: only the rules one Service can meet) is about that Service."""
        svc = (self.partial or {}).get("service")
        if isinstance(svc, str) and "/" in svc:
            ns, name = svc.split("/", 1)
            return ns, name
        return None

    @property
    def partial(self) -> dict[str, Any] | None:
        """The manifest's ``partial`` (kpdiag/collect/service_rules.py): the rules were read for one Service only —
        ``{"service": NS/NAME, "mode", "holds": {source: what it holds}, "chains"}`` — or None (the whole rules)."""
        doc = (self.bundle.manifest or {}).get("partial")
        return doc if isinstance(doc, dict) and doc else None

    # the run mode: an input of the run, fixed when the state is made (checks read it, nothing sets it later)
    @property
    def focus(self) -> tuple[str, str] | None:
        """(namespace, name) when diagnosing one Service."""
        return self._focus

    @property
    def preflight(self) -> str | None:
        """ "ipvs" / "nftables": judge the node for a mode it does not run yet."""
        return self._preflight

    @property
    def problems(self) -> list[Problem]:
        return self.bundle.problems

    # ------------------------------------------------------------ sources, for checks
    # Checks read the bundle only through these (tests/packaging/test_source_catalogue.py): each source is read and
    # parsed once per run, by its declared parser (kpdiag/bundle/sources.py), whatever check asks first.
    def source(self, source: sources.Source) -> Any:
        """``source`` parsed by its declared parser; a JSON source without one as JSON, a text source as text; None
        when absent or unreadable (the reason is a recorded problem)."""
        source = sources.CATALOGUE[source]
        cache = self.__dict__.setdefault("_sources", {})
        if source not in cache:
            if source.parser:
                cache[source] = self._parse(source)
            elif source.kind == "json":
                cache[source] = self.bundle.read_json(source)
            else:
                cache[source] = self.bundle.read_text(source)
        return cache[source]

    def source_text(self, source: "sources.Source") -> str | None:
        """``source`` as text (to find an object's line for evidence), or None."""
        return self.bundle.read_text(sources.CATALOGUE[source])

    def display(self, source: "sources.Source") -> str:
        """How evidence names ``source``: its path as the user sees the bundle."""
        return self.bundle.display(source)

    def problem(self, source: "sources.Source", message: str) -> None:
        """Record a problem with ``source`` (the report lists it; the diagnosis goes on)."""
        self.bundle.problem(source, message)

    def problems_with(self, source: sources.Source) -> list[Problem]:
        """The problems recorded with ``source`` (by its collector or its parser; a parser's carry the line)."""
        where = self.bundle.display(source)
        return [p for p in self.bundle.problems if p.source == where or p.source.startswith(where + ":")]

    def has(self, source: "sources.Source") -> bool:
        """Is ``source`` in the bundle (readable or not)?"""
        return self.bundle.exists(sources.CATALOGUE[source])

    @property
    def manifest(self) -> dict[str, Any]:
        """The bundle's manifest (kpdiag.json): node, created, client, service …"""
        return self.bundle.manifest or {}

    # ------------------------------------------------------------ iptables
    def iptables(self, which: str = "iptables-save") -> Ruleset | None:
        """The ruleset of ``node/<which>.txt`` (``iptables-save``, ``iptables-legacy-save`` …) or None."""
        cache = self.__dict__.setdefault("_iptables", {})
        if which not in cache:
            cache[which] = self._parse(sources.iptables_dump(which))
        return cast("Ruleset | None", cache[which])

    @cached_property
    def ipsets(self) -> dict[str, IpSet] | None:
        return cast("dict[str, IpSet] | None", self._parse(sources.IPSET))

    @cached_property
    def xt_recent(self) -> RecentState | None:
        """kube-proxy's session affinity state (kpdiag/parse/recent.py RecentState), or None when not recorded."""
        return cast("RecentState | None", self._parse(sources.XT_RECENT))

    @cached_property
    def ip_addr(self) -> list[dict[str, Any]] | None:
        return self._json_list(sources.IP_ADDR, "ip -j addr")

    def _json_list(self, rel: str, what: str) -> list[dict[str, Any]] | None:
        """A JSON list of objects; anything else is a recorded problem (the objects that are objects are kept)."""
        data = self.bundle.read_json(rel)
        if data is None:
            return None
        if not isinstance(data, list):
            self.bundle.problem(rel, f"expected a JSON list ({what})")
            return None
        good = [x for x in data if isinstance(x, dict)]
        if len(good) != len(data):
            self.bundle.problem(rel, f"{len(data) - len(good)} entries are not JSON objects ({what}); ignored")
        return good

    @cached_property
    def ip_route(self) -> list[dict[str, Any]] | None:
        return self._json_list(sources.IP_ROUTE, "ip -j route")

    @cached_property
    def routing(self) -> RoutingTable:
        from kpdiag.trace.routing import routing_from_ip_json

        return routing_from_ip_json(self.ip_addr, self.ip_route, self.sysctl, self.ip_rules)

    @property
    def bundle_name(self) -> str:
        """The bundle as the user named it (evidence about the node as a whole cites it)."""
        return self.bundle.name

    @property
    def node_name(self) -> str:
        return str(self.bundle.manifest.get("node") or "")

    # ------------------------------------------------------------ derived facts
    def inferred_modes(self) -> dict[str, str]:
        """Which proxy modes' artefacts are on the node: mode → evidence text (computed once: most checks ask)."""
        if "_modes" in self.__dict__:
            return dict(self.__dict__["_modes"])
        from kpdiag.dataplane import kube_proxy_modes

        found: dict[str, str] = {}
        for dp in kube_proxy_modes():  # each mode's class says what shows its rules (kpdiag/dataplane/)
            why = dp.signs(self)
            if why:
                found[dp.name] = why
        part = self.partial
        if part and isinstance(part.get("mode"), str) and part["mode"] not in found:
            found[part["mode"]] = f"the focused collection read {part['mode']} mode's rules (manifest: partial)"
        self.__dict__["_modes"] = found
        return dict(found)

    @property
    def proxy_mode(self) -> tuple[str | None, str]:
        """(mode, how it is known): /proxyMode, then the configuration, then the rules present."""
        running = self.proxy_mode_running
        if running:
            return running, "kube-proxy's /proxyMode"
        cfg = self.kube_proxy_config
        if cfg is not None and cfg.mode_explicit:
            return cfg.mode, f"mode in {cfg.source}"
        from kpdiag.dataplane import kube_proxy_modes

        modes = self.inferred_modes()
        for dp in sorted(kube_proxy_modes(), key=lambda d: -d.precedence):  # nftables, ipvs, iptables, userspace
            if dp.name in modes:
                return dp.name, modes[dp.name]
        if cfg is not None:
            return cfg.mode, f"{cfg.source} (no mode set: the default)"
        return None, "unknown"

    @property
    def created(self) -> float | None:
        """When the bundle was made (for ages of timestamps), as epoch seconds, or None."""
        import datetime

        text = self.bundle.manifest.get("created")
        if not text:
            return None
        try:
            return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None

    def programmed(self, which: str = "iptables-save") -> dict[str, ProgrammedPort] | None:
        """Service ports kube-proxy programmed in iptables (cached), or None without rules."""
        cache = self.__dict__.setdefault("_programmed", {})
        if which not in cache:
            rs = self.iptables(which)
            if rs is None:
                cache[which] = None
            else:
                from kpdiag.state.kube_rules import programmed_ports

                if self.partial and self.focus:  # the other Services' chains were not read: not judged
                    svc = "/".join(self.focus)
                    ports = programmed_ports(rs, only=svc)
                    ports = {k: p for k, p in ports.items() if k == svc or k.startswith(svc + ":")}
                else:
                    ports = programmed_ports(rs)
                cache[which] = ports
        return cast("dict[str, ProgrammedPort] | None", cache[which])

    @property
    def service_implementer(self) -> Implementer:
        """Who implements Services here (kube-proxy, embedded in k3s/k0s, or a replacement): kpdiag.state.service_proxy.detect."""
        if "_implementer" not in self.__dict__:
            from kpdiag.state.service_proxy import detect

            self.__dict__["_implementer"] = detect(self)
        return cast("Implementer", self.__dict__["_implementer"])

    @property
    def cni(self) -> CniModel:
        """The node's CNI and its routing model (kpdiag.state.cni.recognise), from the interfaces, routes, processes,
        pinned BPF objects and — when the bundle has them — the CNI's DaemonSets; computed once."""
        if "_cni" not in self.__dict__:
            from kpdiag.state.cni import recognise
            from kpdiag.state.service_proxy import processes

            b = self.bundle
            maps = [m.strip() for m in (b.read_text(sources.BPF_MAPS) or "").splitlines() if m.strip()]
            self.__dict__["_cni"] = recognise(
                self.ip_addr,
                self.ip_route,
                processes(b),
                maps,
                self._cni_components(),
                {
                    "addr": b.display(sources.IP_ADDR),
                    "route": b.display(sources.IP_ROUTE),
                    "processes": b.display(sources.PROCESSES),
                    "bpf": b.display(sources.BPF_MAPS),
                    "api": b.display(sources.CNI if b.exists(sources.CNI) else sources.DAEMONSETS),
                    "nodes": b.display(sources.NODES),
                },
                self._node_notes(),
            )
        return cast("CniModel", self.__dict__["_cni"])

    @property
    def cloud(self) -> CloudModel | None:
        """The cloud this node runs on (kpdiag.state.cloud.recognise): its Node's providerID, else the firmware's
        maker; None when neither was collected. Computed once."""
        if "_cloud" not in self.__dict__:
            from kpdiag.bundle.store import list_items
            from kpdiag.state.cloud import recognise

            b = self.bundle
            name = self.cluster.node_name() or ""
            items = list_items(b.read_json(sources.NODES)) if b.exists(sources.NODES) else None
            short = name.split(".", 1)[0].lower()
            me = next(
                (
                    n
                    for n in items or []
                    if isinstance(n, dict)
                    and str((n.get("metadata") or {}).get("name") or "").split(".", 1)[0].lower() == short
                ),
                None,
            )
            self.__dict__["_cloud"] = recognise(
                me, name, b.read_text(sources.DMI_VENDOR), b.display(sources.NODES), b.display(sources.DMI_VENDOR)
            )
        return cast("CloudModel | None", self.__dict__["_cloud"])

    def _node_notes(self) -> list[tuple[str, dict[str, Any]]]:
        """(name, annotations) of each Node in cluster/nodes.json (the CNI's record of the nodes), [] without it."""
        from kpdiag.bundle.store import list_items

        if not self.bundle.exists(sources.NODES):
            return []
        out = []
        for item in list_items(self.bundle.read_json(sources.NODES)) or []:
            meta = item["metadata"] if isinstance(item.get("metadata"), dict) else {}
            notes = meta.get("annotations")
            out.append((str(meta.get("name") or "?"), notes if isinstance(notes, dict) else {}))
        return out

    def _cni_components(self) -> list[dict[str, Any]] | None:
        """The CNI's DaemonSets/pods as cluster/cni.json lists them, else reduced from cluster/daemonsets.json."""
        from kpdiag.bundle.store import list_items
        from kpdiag.state.netpol import component

        b = self.bundle
        if b.exists(sources.CNI):
            return list_items(b.read_json(sources.CNI))
        if b.exists(sources.DAEMONSETS):
            items = list_items(b.read_json(sources.DAEMONSETS)) or []
            return [c for c in (component(dict(d, kind="DaemonSet")) for d in items) if c]
        return None

    @property
    def nft_version(self) -> tuple[int, int, int] | None:
        """From node/nft-version.txt ('nftables v1.0.6 (Lester Gooch #5)')."""
        import re

        text = self.bundle.read_text(sources.NFT_VERSION)
        m = re.search(r"v(\d+)\.(\d+)(?:\.(\d+))?", text or "")
        return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None

    @property
    def ipvs(self) -> dict[tuple[object, ...], VirtualService] | None:
        """IPVS virtual services: ipvsadm -Sn (node/ipvsadm.txt), with connection counts from -Ln when present."""
        if "_ipvs" not in self.__dict__:
            services = self._parse(sources.IPVSADM)
            listed = self._parse(sources.IPVSADM_LIST)
            if services is None:
                services = listed
            elif listed:
                for key, vs in services.items():
                    other = listed.get(key)
                    counts = {r.target: r for r in other.reals} if other else {}
                    for r in vs.reals:
                        if r.target in counts:
                            r.active, r.inactive = counts[r.target].active, counts[r.target].inactive
            self.__dict__["_ipvs"] = services
        return cast("dict[tuple[object, ...], VirtualService] | None", self.__dict__["_ipvs"])

    @property
    def ipvs_conn(self) -> dict[str, Any] | None:
        """node/ipvs-conn.json: IPVS connections counted by (proto, vaddr:vport, daddr:dport, state), or None."""
        if "_ipvs_conn" not in self.__dict__:
            doc = self.bundle.read_json(sources.IPVS_CONN)
            ok = isinstance(doc, dict) and isinstance(doc.get("entries"), list)
            if doc is not None and not ok:
                self.bundle.problem(sources.IPVS_CONN, "not a kpdiag.ipvs-conn/v1 document (no entries list)")
            self.__dict__["_ipvs_conn"] = doc if ok else None
        return cast("dict[str, Any] | None", self.__dict__["_ipvs_conn"])

    def nft(self) -> NftRuleset | None:
        """node/nft-ruleset.json parsed (cached), or None."""
        if "_nft" not in self.__dict__:
            data = self.nft_text
            rs = None
            if data is not None:
                rs = self._parse_text(data, self.bundle.display(sources.NFT_RULESET), sources.NFT_RULESET)
            self.__dict__["_nft"] = rs
        return cast("NftRuleset | None", self.__dict__["_nft"])

    def tracer(self) -> IptablesTracer | None:
        """One iptables tracer for this node (cached: chain indexes are shared between checks)."""
        if "_tracer" not in self.__dict__:
            from kpdiag.trace.netfilter import IptablesTracer

            rs = self.iptables()
            self.__dict__["_tracer"] = None if rs is None else IptablesTracer(rs, self.routing, self.ipsets)
        return cast("IptablesTracer | None", self.__dict__["_tracer"])

    def tracer_if_forwarding(self) -> IptablesTracer | None:
        """An iptables tracer for this node as if it forwarded packets (net.ipv4.ip_forward = 1): for the checks that
        ask what the FORWARD chain would do (KP207) on a node where forwarding is also off (KP501 says that)."""
        if "_fwd_tracer" not in self.__dict__:
            import dataclasses

            from kpdiag.trace.netfilter import IptablesTracer

            rs = self.iptables()
            routing = dataclasses.replace(self.routing, forwarding=None)
            self.__dict__["_fwd_tracer"] = None if rs is None else IptablesTracer(rs, routing, self.ipsets)
        return cast("IptablesTracer | None", self.__dict__["_fwd_tracer"])

    def mode_tracer(self, mode: str | None = None, family: int = 4) -> PacketWalker | None:
        """The tracer of dataplane ``mode`` (default: the one kube-proxy runs; a mode without a tracer of its own is
        traced through its iptables rules) and IP version ``family`` (iptables and IPVS mode: IPv6 packets meet
        ip6tables' rules), or None without those rules."""
        from kpdiag.dataplane import get

        return (get(mode) if mode else self.dataplane).tracer(self, family)

    @property
    def dataplane(self) -> Dataplane:
        """The dataplane class of the mode kube-proxy runs (kpdiag/dataplane/): what the rest of kpdiag asks instead
        of comparing mode names. ``dataplane.UNKNOWN`` when the mode is not known."""
        from kpdiag.dataplane import get

        return get(self.proxy_mode[0])

    @property
    def kube_proxy_version(self) -> tuple[int, int] | None:
        """kube-proxy's minor version from its metrics (kubernetes_build_info), else the API server's."""
        import re

        m = self.metrics
        texts: list[str] = []
        if m is not None:
            for labels, _, _ in m.samples.get("kubernetes_build_info", []):
                texts.append(labels.get("git_version", ""))
        data = self.bundle.read_json(sources.VERSION)
        if isinstance(data, dict):
            texts.append(str(data.get("gitVersion", "")))
        for text in texts:
            found = re.match(r"v?(\d+)\.(\d+)", text)
            if found:
                return int(found.group(1)), int(found.group(2))
        return None

    @property
    def modules_builtin(self) -> set[str]:
        """Modules built into the kernel (node/modules-builtin.txt: /lib/modules/$(uname -r)/modules.builtin)."""
        text = self.bundle.read_text(sources.MODULES_BUILTIN)
        if not text:
            return set()
        return {
            line.rsplit("/", 1)[-1].removesuffix(".ko").replace("-", "_") for line in text.splitlines() if line.strip()
        }

    @property
    def modules_available(self) -> set[str] | None:
        """The network modules this kernel can load (node/modules-available.txt, from modules.dep); None when the
        bundle does not say (not collected: nothing can be concluded about what modprobe would find)."""
        text = self.bundle.read_text(sources.MODULES_AVAILABLE)
        if text is None:
            return None
        out = set()
        for line in text.splitlines():
            name = line.strip().rsplit("/", 1)[-1]
            for ext in (".xz", ".zst", ".gz"):
                name = name.removesuffix(ext)
            if name:
                out.add(name.removesuffix(".ko").replace("-", "_"))
        return out

    # ------------------------------------------------------------ the API side and probes
    @property
    def cluster(self) -> ClusterView:
        if "_cluster" not in self.__dict__:
            from kpdiag.state.cluster import ClusterView

            self.__dict__["_cluster"] = ClusterView(self.bundle)
        return cast("ClusterView", self.__dict__["_cluster"])

    def services_in_focus(self) -> list[Svc] | None:
        """The Services to diagnose: the focused one, else every Service in cluster/services.json."""
        svcs = self.cluster.services()
        if svcs is None:
            return None
        if self.focus:
            ns, name = self.focus
            return [s for s in svcs if s.namespace == ns and s.name == name]
        return svcs

    @property
    def probes(self) -> dict[str, Any] | None:
        """probes/service.json, only if it conforms to probes.schema.json: the verdict and the checks read its
        results as kpdiag wrote them (a hand-made, old or hostile document is a named problem, not a crash)."""
        if "_probes" not in self.__dict__:
            from kpdiag import schemas

            doc = self.bundle.read_json(sources.PROBES_SERVICE)
            why = None if doc is None else schemas.violation(doc, "probes.schema.json")
            if why:
                self.bundle.problem(sources.PROBES_SERVICE, f"not a kpdiag.probes/v1 document ({why}): not read")
                doc = None
            self.__dict__["_probes"] = doc
        return cast("dict[str, Any] | None", self.__dict__["_probes"])

    @property
    def dns(self) -> dict[str, Any] | None:
        doc = self.bundle.read_json(sources.PROBES_DNS)
        return doc if isinstance(doc, dict) else None

    def probe_results(self, kind: str | None = None, target_prefix: str | None = None) -> list[dict[str, Any]]:
        doc = self.probes or {}
        return [
            r
            for r in doc.get("results", [])
            if isinstance(r, dict)
            and (kind is None or r.get("kind") == kind)
            and (target_prefix is None or str(r.get("target", "")).startswith(target_prefix))
        ]
