"""The EndpointSlice controller against the pods it should be listing: the API's Pods and EndpointSlices disagree
for longer than the controller's normal lag (kube-controller-manager stalled, not the Service's selector)."""

from __future__ import annotations

import datetime
from typing import Any, Optional

from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import command, note
from kpdiag.state.typed_api import EndpointSlices, Focus, Pods, Services
from kpdiag.state.typed_node import Manifest

from .service import in_focus

CONTROLLER = "endpointslice-controller.k8s.io"  # the managed-by label value of kube-controller-manager's slices
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
TRIGGER = "endpoints.kubernetes.io/last-change-trigger-time"  # the pod change a slice was last computed for
# how long a disagreement may last before it is a stall: the controller writes a pod's change within a second or
# two (its batch period, a few API round trips); a minute is far beyond that and beyond clock skew between the node
# that stamped the pod's condition (kubelet) and the machine kpdiag ran on
STALL_SECONDS = 60


def _time(text) -> float | None:
    """An API timestamp (RFC 3339, ``2026-12-03T00:09:00Z``) as epoch seconds; None when absent or not one."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _md(obj: dict[str, Any]) -> dict[str, Any]:
    return _dict(obj.get("metadata") if isinstance(obj, dict) else None)


def _ready_since(pod: dict) -> tuple[bool, float | None]:
    """(Ready, since when): the pod's Ready condition and its lastTransitionTime."""
    status = _dict(pod.get("status"))
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Ready":
            return c.get("status") == "True", _time(c.get("lastTransitionTime"))
    return False, None


def _pod_ips(pod: dict) -> set[str]:
    status = _dict(pod.get("status"))
    ips = {p.get("ip") for p in status.get("podIPs") or [] if isinstance(p, dict)}
    ips.add(status.get("podIP"))
    return {ip for ip in ips if isinstance(ip, str) and ip}


def _live(pod: dict) -> bool:
    """A pod the controller lists: it has an address, has not finished, is not being deleted."""
    status = _dict(pod.get("status"))
    return (
        bool(_pod_ips(pod))
        and status.get("phase") not in ("Succeeded", "Failed")
        and not _md(pod).get("deletionTimestamp")
    )


def _slices_of(svc, slices: EndpointSlices) -> tuple[list[dict], str | None]:
    """The Service's EndpointSlices, and the other manager that writes them (then kpdiag does not judge them)."""
    mine = []
    for sl in slices.items or ():
        md = _md(sl)
        labels = _dict(md.get("labels"))
        if labels.get("kubernetes.io/service-name") != svc.name or md.get("namespace", svc.namespace) != svc.namespace:
            continue
        manager = labels.get(MANAGED_BY)
        if manager not in (None, CONTROLLER):
            return [], manager
        mine.append(sl)
    return mine, None


def _listed(slices: list[dict]) -> list[tuple[dict, dict, str]]:
    """(slice, endpoint, address) of every address the slices list."""
    out = []
    for sl in slices:
        for ep in sl.get("endpoints") or []:
            if isinstance(ep, dict):
                out += [(sl, ep, a) for a in ep.get("addresses") or [] if isinstance(a, str)]
    return out


def _slice_written(sl: dict) -> str:
    """When a slice was last computed, as it says: its trigger-time annotation, else its newest managedFields time."""
    md = _md(sl)
    notes = _dict(md.get("annotations"))
    if isinstance(notes.get(TRIGGER), str):
        return f"{TRIGGER}={notes[TRIGGER]}"
    times: list[str] = [
        t
        for f in md.get("managedFields") or []
        if isinstance(f, dict) and _time(t := f.get("time")) and isinstance(t, str)
    ]
    return f"last written {max(times)}" if times else "no write time recorded"


def _disagreements(svc, pods: list[dict], slices: list[dict], now: float | None) -> tuple[list, list]:
    """(timed, untimed) disagreements, each a dict: kind ("missing", "replaced", "gone"), text, age (seconds since
    the change it dates, None: undated), ready (the listed endpoint is ready), addr, pod."""
    listed = _listed(slices)
    addrs = {a for _, _, a in listed}
    by_name = {_md(p).get("name"): p for p in pods}
    timed: list[dict[str, Any]] = []
    untimed: list[dict[str, Any]] = []

    def add(kind, text, since, ready, addr, pod):
        age = None if since is None or now is None else now - since
        d = {"kind": kind, "text": text, "age": age, "ready": ready, "addr": addr, "pod": pod}
        (timed if age is not None and age > STALL_SECONDS else untimed if age is None else []).append(d)

    for p in pods:
        ready, since = _ready_since(p)
        if ready and _live(p) and not (_pod_ips(p) & addrs):
            name = _md(p).get("name")
            ips = ", ".join(sorted(_pod_ips(p)))
            add("missing", f"pod {name} ({ips}) Ready since {_iso(since)}: in no slice", since, True, ips, name)
    for sl, ep, addr in listed:
        ref = _dict(ep.get("targetRef"))
        ready = (ep.get("conditions") or {}).get("ready") is not False
        name = ref.get("name")
        if not name or ref.get("kind", "Pod") != "Pod":
            continue
        pod = by_name.get(name)
        where = f"EndpointSlice {_md(sl).get('name')} lists {addr} for pod {name}"
        if pod is None:
            if ready:
                add("gone", f"{where} (ready): no such pod selected now", None, ready, addr, name)
            continue
        old_uid = ref.get("uid") and _md(pod).get("uid") and ref["uid"] != _md(pod)["uid"]
        if old_uid or addr not in _pod_ips(pod):
            since = _time(_md(pod).get("creationTimestamp"))
            what = f"uid {ref.get('uid')}, the pod now is uid {_md(pod).get('uid')}" if old_uid else ""
            what = what or f"the pod now has {', '.join(sorted(_pod_ips(pod))) or 'no address'}"
            add("replaced", f"{where} ({what}, created {_iso(since)})", since, ready, addr, name)
    return timed, untimed


def _iso(t: float | None) -> str:
    if t is None:
        return "(no time)"
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@check(
    "KP160",
    "endpointslices-stalled",
    "The Service's EndpointSlices disagree with its pods (the EndpointSlice controller is stalled)",
    "error",
    severities=("warning", "error"),
    explains=("KP101", "KP102", "KP111", "KP112"),
    symptom="A pod that has been Ready for minutes gets no traffic, or connections keep going to a pod that was "
    "deleted or replaced (timeouts, 'no route to host', a share of requests failing), although the selector and "
    "the pods look right.",
    why=f"""
        kube-proxy does not look at pods: it programs what the EndpointSlices list, and kube-controller-manager's
        EndpointSlice controller writes those from the pods the Service selects, normally within a second or two of
        a pod's change. When the controller is stalled — its kube-controller-manager lost or never won the leader
        election, is crash-looping, throttled by its API rate limits (--kube-api-qps) or stuck on a full work queue —
        the slices stop following the pods: new Ready pods are never added and deleted or replaced pods stay listed,
        on every node at once. This is not the Service's selector (KP103) nor the pods' readiness (KP102): the API's
        own Pods and EndpointSlices disagree. kpdiag calls it a stall when a pod has been Ready, or a replacement pod
        has existed, for more than {STALL_SECONDS} s (by the pods' timestamps against the time of the collection) and
        the slices still do not show it; a shorter disagreement is the controller's normal lag and is not reported.
    """,
    fix="Look at kube-controller-manager: who holds its leader lease and whether it renews it, its log (endpointslice, "
    "leader election, throttling), its --kube-api-qps/--kube-api-burst and --concurrent-service-endpoint-syncs; "
    "restart it when it is stuck (a managed control plane: the provider's support).",
)
def endpointslice_controller_stalled(
    new,
    services: Services,
    slices: EndpointSlices,
    pods: Pods,
    manifest: Optional[Manifest] = None,
    focus: Optional[Focus] = None,
):
    if slices.items is None:
        raise Skip(f"{slices.source} was not collected: the slices cannot be compared with the pods")
    now = manifest.created if manifest else None
    found, unsure = False, []
    for svc in in_focus(services, focus):
        if not svc.selector:
            continue  # no selector: nobody's controller writes its slices from pods
        sl, other = _slices_of(svc, slices)
        if other:
            continue
        selected = [p for p in pods.selected(svc) if isinstance(p, dict)]
        timed, untimed = _disagreements(svc, selected, sl, now)
        if timed:
            found = True
            yield _finding(new, svc, sl, selected, timed, untimed, slices, pods)
        elif untimed:
            unsure.append(f"{svc.key}: {untimed[0]['text']}")
    if not found and unsure:
        when = "the bundle has no collection time" if now is None else "the pods carry no timestamp to date it"
        raise Skip(
            f"the pods and EndpointSlices disagree ({unsure[0]}), but {when}: a stall cannot be told from the "
            "controller's normal lag"
        )


def _finding(new, svc, sl: list[dict], selected: list[dict], timed: list, untimed: list, slices, pods):
    missing = [d for d in timed if d["kind"] == "missing"]
    stale_ready = [d for d in timed + untimed if d["kind"] != "missing" and d["ready"]]
    listed_ready = {a for _, ep, a in _listed(sl) if (ep.get("conditions") or {}).get("ready") is not False}
    good = listed_ready - {d["addr"] for d in stale_ready}
    error = bool(stale_ready) or not good
    oldest = max(d["age"] for d in timed)
    what = []
    if missing:
        what.append(f"{len(missing)} Ready pod(s) missing from its slices")
    if any(d["kind"] == "replaced" for d in timed):
        what.append("slices still listing pods that were replaced")
    gone = [d for d in untimed if d["kind"] == "gone"]
    if gone:
        what.append(f"{len(gone)} listed pod(s) that no longer exist")
    sel = ",".join(f"{k}={v}" for k, v in sorted(svc.selector.items()))
    consequence = (
        "traffic still goes to addresses no pod of the Service has"
        if stale_ready
        else "it has no ready endpoint although its pods are Ready"
        if not good
        else "its Ready pods get no traffic"
    )
    evidence = [(slices if d["kind"] != "missing" else pods).evidence(d["text"]) for d in (timed + untimed)[:6]]
    evidence += [
        slices.evidence(
            f"EndpointSlice {_md(s).get('name')} ({_md(s).get('namespace', svc.namespace)}): {_slice_written(s)}"
        )
        for s in sl[:3]
    ] or [slices.evidence(f"no EndpointSlice for {svc.key}")]
    return new(
        f"{svc.key}: its EndpointSlices have not followed its pods for {int(oldest)} s ({'; '.join(what)}): "
        f"{consequence} — kube-controller-manager's EndpointSlice controller is not writing them",
        severity="error" if error else "warning",
        fix=(
            command(
                "kubectl -n kube-system get lease kube-controller-manager "
                "-o jsonpath='{.spec.holderIdentity} {.spec.renewTime}{\"\\n\"}'   # renewed within seconds?"
            ),
            command(
                "kubectl -n kube-system logs -l component=kube-controller-manager --tail=500 "
                "| grep -iE 'endpointslice|leaderelection|throttl'"
            ),
            command("kubectl -n kube-system get pods -l component=kube-controller-manager -o wide   # restarts?"),
            command(f"kubectl -n {svc.namespace} get endpointslices -l kubernetes.io/service-name={svc.name} -o yaml"),
            command(f"kubectl -n {svc.namespace} get pods -l {sel} -o wide"),
            note(
                "self-managed control plane: restart kube-controller-manager (kubeadm: move "
                "/etc/kubernetes/manifests/kube-controller-manager.yaml out of the directory and back), and raise "
                "--kube-api-qps/--kube-api-burst or --concurrent-service-endpoint-syncs if its log shows throttling; "
                "a managed control plane (EKS, GKE, AKS): open a case with the provider, with this evidence"
            ),
        ),
        evidence=evidence,
        subject=svc.key,
        data={
            "service": svc.key,
            "stalled_seconds": int(oldest),
            "threshold_seconds": STALL_SECONDS,
            "missing_ready_pods": [d["pod"] for d in missing],
            "stale": [
                {"pod": d["pod"], "address": d["addr"], "ready": d["ready"]}
                for d in timed + untimed
                if d["kind"] != "missing"
            ],
            "pods_selected": len(selected),
            "slices": [_md(s).get("name") for s in sl],
        },
    )
