"""Check inputs: what a check may read, declared by name, and the view that hands a check exactly those.

A check declares ``needs`` — the inputs it cannot decide without (when one is missing the runner reports the check
*skipped* with the reason, and does not call it) — and ``uses`` — the inputs it reads when they are there (kube-proxy's
REJECT rule cited when the rules were collected, the routes when they were). The state (:class:`kpdiag.state.node.NodeState`
for node checks, :class:`kpdiag.fleet.aggregate.FleetState` for cluster checks) is the broker: it builds every input
once per run, whatever check asks first. A check does not get the state: it gets typed values
(kpdiag/state/typed.py), each built from an :class:`Inputs` view of its one input (a check written the older way,
``f(ctx, new)``, as a plugin may be, gets a view of its declared inputs). A view opens the members its inputs grant and nothing else. Reading anything else is an
:class:`UndeclaredInput` — that check's result is an internal error naming the input (caught even if the check
swallowed the exception), so a check cannot come to depend on data it did not declare; the tests run every check on
every fixture bundle through these views.

The run mode is an input like the others: ``focus`` (the Service being diagnosed) and ``preflight`` (the mode asked
about) are read only by the checks that declare them. See docs/architecture.md ("Checks and their inputs").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kpdiag.bundle import sources
from kpdiag.bundle.store import MANIFEST, Problem


class UndeclaredInput(Exception):
    """A check read a member of the state that none of its declared inputs grants (a defect of the check)."""


@dataclass(frozen=True)
class Input:
    """One input a check can declare.

    ``grants``: the state's members it opens (``cluster.services`` is a method of the API view ``state.cluster``);
    ``sources``: the bundle sources it opens to ``source()``, ``has()``, ``source_text()``, ``display()``,
    ``problem()`` and ``problems_with()``; ``present``: how to tell it is there (``state -> value``; None means missing), or None for an input
    that is always there (the run mode, derived models that answer None themselves)."""

    name: str
    what: str
    grants: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    present: Callable[[Any], object] | None = None  # state → a value, None when missing
    absent: str = ""  # the skip reason when it is not there, when "needs WHAT, which is missing" would mislead
    # the bundle files any one of which shows it was collected ("FILE#TEXT": FILE holds TEXT); None: its first source;
    # (): no file shows it (a derived model, the run mode). The fixture tests read it (tests/checks/test_fixtures.py).
    files: tuple[str, ...] | None = None

    @property
    def evident_by(self) -> tuple[str, ...]:
        return self.sources[:1] if self.files is None else self.files


def _catalogue(*inputs: Input) -> dict[str, Input]:
    out: dict[str, Input] = {}
    for i in inputs:
        if i.name in out:
            raise ValueError(f"input {i.name} declared twice")
        out[i.name] = i
    return out


def _dns_lookups(s: Any) -> Any:
    doc = s.dns or {}
    return doc.get("queries") if doc.get("schema") == "kpdiag.dns/v1" else None


def _one_service(s: Any) -> bool:
    """Only one Service was read from the API: a focused `kpdiag node --service` (its partial "holds" name the
    Services) or a `kpdiag svc` bundle (its manifest names the Service it diagnoses)."""
    return _S.SERVICES in ((s.partial or {}).get("holds") or {}) or bool((s.bundle.manifest or {}).get("service"))


_S = sources
NODE_INPUTS: dict[str, Input] = _catalogue(
    # ---- the node's files
    Input("sysctl", f"{_S.SYSCTL} (sysctl -a)", ("sysctl",), (_S.SYSCTL,), lambda s: s.sysctl),
    Input(
        "modules",
        f"{_S.MODULES} (/proc/modules)",
        ("modules", "modules_builtin", "modules_available"),
        (_S.MODULES, _S.MODULES_BUILTIN, _S.MODULES_AVAILABLE),
        lambda s: s.modules,
    ),
    Input("kernel", f"{_S.UNAME} (uname -r)", ("kernel",), (_S.UNAME,), lambda s: s.kernel),
    Input("addresses", f"{_S.IP_ADDR} (ip -j addr)", ("ip_addr",), (_S.IP_ADDR,), lambda s: s.ip_addr),
    Input(
        "routes",
        f"{_S.IP_ROUTE} (ip -j route)",
        ("ip_route", "routing"),
        (_S.IP_ROUTE, _S.IP_RULE),
        lambda s: s.ip_route,
    ),
    Input(
        "iptables",
        _S.IPTABLES_SAVE,
        ("iptables", "programmed"),
        (_S.IPTABLES_SAVE, _S.IPTABLES_LEGACY_SAVE, _S.IPTABLES_NFT_SAVE, _S.IP6TABLES_SAVE),
        lambda s: s.iptables(),
    ),
    Input("ipsets", f"{_S.IPSET} (ipset save)", ("ipsets",), (_S.IPSET,), lambda s: s.ipsets),
    Input(
        "nft",
        f"{_S.NFT_RULESET} (nft -j list ruleset)",
        ("nft", "nft_text", "nft_kube_proxy_table"),
        (_S.NFT_RULESET,),
        lambda s: s.nft_text,
    ),
    Input(
        "nft-version", f"{_S.NFT_VERSION} (nft --version)", ("nft_version",), (_S.NFT_VERSION,), lambda s: s.nft_version
    ),
    Input(
        "ipvs",
        f"IPVS state ({_S.IPVSADM}: ipvsadm -Sn)",
        ("ipvs",),
        (_S.IPVSADM, _S.IPVSADM_LIST),
        lambda s: s.ipvs,
        files=(_S.IPVSADM, _S.IPVSADM_LIST),
    ),
    Input("ipvs-conn", f"IPVS connections ({_S.IPVS_CONN})", ("ipvs_conn",), (_S.IPVS_CONN,), lambda s: s.ipvs_conn),
    Input(
        "ipvs-timeout",
        f"IPVS timeouts ({_S.IPVS_TIMEOUT})",
        (),
        (_S.IPVS_TIMEOUT,),
        lambda s: s.source(_S.IPVS_TIMEOUT),
    ),
    Input(
        "conntrack",
        f"conntrack statistics ({_S.CONNTRACK_STATS} or nf_conntrack sysctls)",
        ("conntrack_stats", "sysctl_value"),
        (_S.CONNTRACK_STATS, _S.SYSCTL),
        lambda s: s.conntrack_stats or s.sysctl_value("net.netfilter.nf_conntrack_count"),
    ),
    Input(
        "conntrack-entries",
        f"conntrack entries ({_S.CONNTRACK})",
        (),
        (_S.CONNTRACK,),
        lambda s: s.source(_S.CONNTRACK),
    ),
    # ---- kube-proxy
    Input(
        "kube-proxy-config",
        f"the kube-proxy configuration ({_S.KP_CONFIG} or its ConfigMap)",
        ("kube_proxy_config",),
        (_S.KP_CONFIG, _S.KP_CONFIGMAP),
        lambda s: s.kube_proxy_config,
        files=(_S.KP_CONFIG, _S.KP_CONFIGMAP),
    ),
    Input(
        "kube-proxy-mode",
        f"kube-proxy's /proxyMode ({_S.KP_PROXY_MODE})",
        ("proxy_mode_running",),
        (_S.KP_PROXY_MODE,),
        lambda s: s.proxy_mode_running,
    ),
    Input(
        "kube-proxy-metrics",
        f"kube-proxy's /metrics ({_S.KP_METRICS})",
        ("metrics",),
        (_S.KP_METRICS,),
        lambda s: s.metrics,
    ),
    Input(
        "kube-proxy-healthz",
        f"kube-proxy's /healthz ({_S.KP_HEALTHZ})",
        ("healthz",),
        (_S.KP_HEALTHZ,),
        lambda s: s.healthz,
    ),
    Input(
        "kube-proxy-log",
        f"kube-proxy's log ({_S.KP_LOG})",
        ("kube_proxy_log", "manifest", "created"),
        (_S.KP_LOG,),
        lambda s: s.kube_proxy_log,
    ),
    Input(
        "kube-proxy-settings",
        f"kube-proxy's effective configuration ({_S.KP_CONFIG} or its ConfigMap, {_S.KP_CMDLINE}, {_S.KP_LOG})",
        ("kube_proxy_settings",),
        (_S.KP_CONFIG, _S.KP_CONFIGMAP, _S.KP_CMDLINE, _S.KP_LOG),
        lambda s: s.kube_proxy_settings,
        files=(_S.KP_CONFIG, _S.KP_CONFIGMAP, _S.KP_CMDLINE, _S.KP_LOG),
    ),
    Input(
        "kube-proxy-version",
        f"kube-proxy's version ({_S.KP_METRICS} kubernetes_build_info, else {_S.VERSION})",
        ("kube_proxy_version",),
        (_S.KP_METRICS, _S.VERSION),
        lambda s: s.kube_proxy_version,
    ),
    # ---- derived facts and models (always there: they answer None or "unknown" themselves)
    Input(
        "proxy-mode",
        "the proxy mode (/proxyMode, else the configuration, else the rules present)",
        ("proxy_mode", "inferred_modes", "dataplane"),
    ),
    Input(
        "implementer", "who implements Services on this node (kpdiag/state/service_proxy.py)", ("service_implementer",)
    ),
    Input(
        "cni",
        "the node's CNI and its routing model (kpdiag/state/cni.py)",
        ("cni",),
        present=lambda s: s.ip_addr,
        absent=f"the node's interfaces ({_S.IP_ADDR}) were not collected: its CNI cannot be recognised",
        files=(_S.IP_ADDR,),
    ),
    Input(
        "cloud",
        "the cloud this node runs on (its Node's providerID, else the firmware's maker: kpdiag/state/cloud.py)",
        ("cloud",),
        (_S.NODES, _S.DMI_VENDOR),
        lambda s: s.cloud,
        absent=f"needs the cloud this node runs on (its Node's providerID, else {_S.DMI_VENDOR}): neither was "
        "collected",
        files=(f"{_S.NODES}#providerID", _S.DMI_VENDOR),
    ),
    Input("tracer", "the packet tracer of the node's proxy mode", ("mode_tracer", "tracer", "tracer_if_forwarding")),
    Input(
        "manifest",
        f"the bundle's manifest ({MANIFEST})",
        ("manifest", "created", "node_name", "bundle_name"),
        (MANIFEST,),
    ),
    Input(
        "processes",
        f"the node's processes ({_S.PROCESSES})",
        (),
        (_S.PROCESSES,),
        lambda s: s.source(_S.PROCESSES),
    ),
    # ---- the API's side
    Input(
        "services",
        f"the Service from the API ({_S.SERVICES})",
        ("services_in_focus", "cluster.services"),
        (_S.SERVICES,),
        lambda s: s.services_in_focus(),
    ),
    Input(
        "endpointslices",
        f"its EndpointSlices ({_S.ENDPOINTSLICES})",
        ("cluster.endpointslices",),
        (_S.ENDPOINTSLICES,),
        lambda s: s.cluster.endpointslices(),
    ),
    Input(
        "pods",
        f"the pods behind it ({_S.PODS})",
        ("cluster.pods", "cluster.selected_pods"),
        (_S.PODS,),
        lambda s: s.cluster.pods(),
    ),
    Input(
        "node-object",
        f"this node's Node object ({_S.NODES}, else the manifest's node)",
        ("cluster.node_name", "cluster.node_zone"),
        (_S.NODES,),
    ),
    Input(
        "networkpolicies",
        f"the NetworkPolicies ({_S.NETWORKPOLICIES})",
        ("cluster.policy_data",),
        (_S.NETWORKPOLICIES, _S.NAMESPACES, _S.PODS, _S.CNI, _S.DAEMONSETS, _S.CLIENT_POD),
        lambda s: s.cluster.policy_data(),
    ),
    Input(
        "service-lookup",
        f"{_S.SERVICE_LOOKUP} (kpdiag svc writes it: did the API know the Service?)",
        (),
        (_S.SERVICE_LOOKUP,),
        lambda s: s.source(_S.SERVICE_LOOKUP),
    ),
    Input(
        "dns-service",
        f"the cluster DNS Service ({_S.DNS_SERVICE})",
        (),
        (_S.DNS_SERVICE, _S.DNS_ENDPOINTSLICES),
        lambda s: s.source(_S.DNS_SERVICE),
    ),
    Input("dns-pods", f"the CoreDNS pods ({_S.DNS_PODS})", (), (_S.DNS_PODS,), lambda s: s.source(_S.DNS_PODS)),
    Input("dns-logs", f"the CoreDNS logs ({_S.DNS_LOGS})", (), (_S.DNS_LOGS,), lambda s: s.source(_S.DNS_LOGS)),
    # ---- what kpdiag itself observed
    Input(
        "probes",
        f"active probe results ({_S.PROBES_SERVICE}; kpdiag svc without --no-probe)",
        ("probes", "probe_results"),
        (_S.PROBES_SERVICE,),
        lambda s: s.probes,
    ),
    Input("dns", f"a DNS lookup of the Service ({_S.PROBES_DNS})", ("dns",), (_S.PROBES_DNS,), lambda s: s.dns),
    Input(
        "dns-lookups",
        f"the DNS probe ({_S.PROBES_DNS} of kpdiag.dns/v1: resolv.conf and the queries)",
        ("dns",),
        (_S.PROBES_DNS,),
        _dns_lookups,
        files=(f"{_S.PROBES_DNS}#kpdiag.dns/v1",),
    ),
    # ---- the run mode
    Input("focus", "the Service being diagnosed (kpdiag svc, --service), if any", ("focus",)),
    Input("preflight", "the proxy mode asked about with --preflight, if any", ("preflight",)),
    Input(
        "whole-rules",
        "every rule of the node, not a partial bundle (kpdiag node --service reads only one Service's rules)",
        ("partial",),
        present=lambda s: None if s.partial else True,
        absent="a partial bundle: only one Service's rules were read (kpdiag node --service; manifest: partial), "
        "and this check judges all of them",
    ),
    Input(
        "whole-services",
        "every Service and EndpointSlice of the cluster, not one Service's (kpdiag node --service reads only that "
        "Service from the API)",
        ("partial",),
        present=lambda s: None if _one_service(s) else True,
        absent="a partial bundle: only one Service was read from the API (kpdiag node --service, kpdiag svc) and this "
        "check judges every Service",
    ),
)


def _source_input(source: _S.Source) -> Input:
    return Input(str(source), f"{source} ({source.collected_by})", (), (source,), lambda s: s.source(source))


# every declared bundle source is an input too, named by its path: a check can read a new source (declared in
# bundle/sources.py, collected, parsed) with needs=("node/x.txt",) and ctx.source(sources.X) — no other change
SOURCE_INPUTS: dict[str, Input] = {str(src): _source_input(src) for src in _S.CATALOGUE.values()}
NODE_INPUTS.update({k: v for k, v in SOURCE_INPUTS.items() if k not in NODE_INPUTS})

CLUSTER_INPUTS: dict[str, Input] = _catalogue(
    Input(
        "node-reports",
        "the node reports of a kpdiag cluster run",
        ("results", "ok", "fact", "api_version", "node_findings_by_check", "common_threshold"),
    ),
    Input(
        "programmed",
        "the nodes' programmed tables, grouped (and the internalTrafficPolicy: Local ports)",
        ("programmed_groups", "local_keys", "policy_known"),
    ),
)


def catalogue(scope: str) -> dict[str, Input]:
    return NODE_INPUTS if scope == "node" else CLUSTER_INPUTS


def validate(check_id: str, scope: str, needs: tuple[str, ...], uses: tuple[str, ...]) -> None:
    """A declaration error (unknown input, declared twice) is raised when the check is declared, not when it runs."""
    known = catalogue(scope)
    for name in (*needs, *uses):
        if name not in known:
            raise ValueError(
                f"check {check_id}: unknown input {name!r} (the {scope} inputs: {', '.join(sorted(known))})"
            )
    both = set(needs) & set(uses)
    if both:
        raise ValueError(f"check {check_id}: {', '.join(sorted(both))} both needed and used: say it once (needs)")


def missing(state: object, scope: str, name: str) -> str | None:
    """Why input ``name`` is not there (None when it is)."""
    inp = catalogue(scope).get(name)
    if inp is None:
        return f"unknown input {name}"
    if inp.present is None:
        return None
    if inp.present(state) is not None:
        return None
    return inp.absent or f"needs {inp.what}, which is missing or unreadable"


class _View:
    """Attribute access limited to ``grants``; anything else is recorded and raised as :class:`UndeclaredInput`."""

    __slots__ = ("_target", "_grants", "_owner", "_prefix")

    def __init__(self, target: Any, grants: frozenset[str], owner: Inputs, prefix: str = "") -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_grants", grants)
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_prefix", prefix)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in _View.__slots__ or name in Inputs.__slots__:
            raise AttributeError(name)  # Python's own lookups (copy, pickle …), or a slot of a half-made copy
        if name in self._grants:
            return getattr(self._target, name)
        raise self._owner._undeclared(f"{self._prefix}{name}")

    def __setattr__(self, name: str, value: object) -> None:
        raise self._owner._undeclared(f"{self._prefix}{name} (written)")

    def __reduce__(self) -> tuple[Any, ...]:
        raise TypeError("a check's inputs are a view of this run's state: not to be copied or pickled")


class Inputs(_View):
    """What one check receives: its declared inputs' members of the state, its declared inputs' sources, and
    nothing else (see the module docstring)."""

    __slots__ = ("check_id", "declared", "violations", "_sources", "_cluster")

    def __init__(self, state: Any, check_id: str, names: tuple[str, ...] | list[str], scope: str = "node") -> None:
        known = catalogue(scope)
        grants: set[str] = set()
        srcs: set[str] = set()
        for name in names:
            grants.update(known[name].grants)
            srcs.update(known[name].sources)
        top = frozenset(g for g in grants if "." not in g)
        cluster = frozenset(g.split(".", 1)[1] for g in grants if g.startswith("cluster."))
        super().__init__(state, top, self)
        object.__setattr__(self, "check_id", check_id)
        object.__setattr__(self, "declared", tuple(names))
        object.__setattr__(self, "violations", [])
        object.__setattr__(self, "_sources", frozenset(srcs))
        object.__setattr__(self, "_cluster", cluster)

    def _undeclared(self, what: str) -> UndeclaredInput:
        msg = (
            f"{self.check_id} read {what}, which none of its inputs "
            f"({', '.join(self.declared) or 'none declared'}) grants: declare the input that provides it"
        )
        self.violations.append(msg)
        return UndeclaredInput(msg)

    def _source(self, source: str) -> str:
        if source not in self._sources:
            raise self._undeclared(f"the source {source}")
        return source

    @property
    def cluster(self) -> Any:
        if not self._cluster:
            raise self._undeclared("cluster")
        return _View(self._target.cluster, self._cluster, self, "cluster.")

    # the sources of the declared inputs, as the state reads them
    def source(self, source: str) -> Any:
        return self._target.source(self._source(source))

    def source_text(self, source: str) -> str | None:
        text: str | None = self._target.source_text(self._source(source))
        return text

    def has(self, source: str) -> bool:
        return bool(self._target.has(self._source(source)))

    def display(self, source: str) -> str:
        """How evidence names ``source`` (its path in the bundle as the user sees it)."""
        return str(self._target.display(self._source(source)))

    def problem(self, source: str, message: str) -> None:
        """Record a problem with ``source`` (shown with the report's problems)."""
        self._target.problem(self._source(source), message)

    def problems_with(self, source: str) -> list[Problem]:
        """The problems recorded with ``source`` (what its collector or parser could not do)."""
        problems: list[Problem] = self._target.problems_with(self._source(source))
        return problems

    def file(self, source: str) -> "SourceFile":
        """``source`` bound to this view, for a typed input to keep and read later (every read stays policed)."""
        return SourceFile(self, self._source(source))


class SourceFile:
    """One declared source of a check's view: how evidence names it, whether it was collected, its text, it as read,
    and a problem to record with it — each through the view, so a read on first use is still policed as the check's."""

    __slots__ = ("rel", "_view")

    def __init__(self, view: Inputs, rel: str):
        object.__setattr__(self, "rel", rel)
        object.__setattr__(self, "_view", view)

    rel: str
    _view: Inputs

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{self.rel}: a source of a check's view is read-only")

    @property
    def display(self) -> str:
        return self._view.display(self.rel)

    def has(self) -> bool:
        return self._view.has(self.rel)

    def read(self) -> Any:
        return self._view.source(self.rel)

    def text(self) -> str | None:
        return self._view.source_text(self.rel)

    def problem(self, message: str) -> None:
        self._view.problem(self.rel, message)
