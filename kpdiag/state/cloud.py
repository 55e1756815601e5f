"""The cloud a node runs on, as the node and the API say it: its Node's ``spec.providerID`` (``aws:///ZONE/i-…``,
``azure:///subscriptions/…``, set by the cloud provider integration) or, where no cloud provider set one (a
self-managed cluster on cloud VMs), the maker its firmware reports (/sys/class/dmi/id/sys_vendor). Checks about a
cloud's own settings (KP640) ask this model; kpdiag never reads the cloud's API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# the firmware's maker → the cloud (Azure's VMs report Microsoft Corporation, as Hyper-V does anywhere)
VENDORS = {"amazon ec2": "AWS", "microsoft corporation": "Azure"}


@dataclass(frozen=True)
class CloudModel:
    """``cloud``: "AWS", "Azure", or None (another or none); how it was told (``source``, ``text``: the evidence);
    ``provider_id`` when the Node has one; ``unsure``: said by the firmware only, which Hyper-V shares with Azure."""

    cloud: str | None
    source: str
    text: str
    provider_id: str | None = None
    unsure: bool = False


def recognise(
    node: dict[str, Any] | None, node_name: str, vendor: str | None, nodes_src: str, dmi_src: str
) -> CloudModel | None:
    """The cloud of this node (its Node object ``node``, the firmware's ``vendor`` text); None when neither says."""
    spec = node.get("spec") if isinstance(node, dict) else None
    provider = spec.get("providerID") if isinstance(spec, dict) else None
    if isinstance(provider, str) and provider:
        scheme = provider.split(":", 1)[0].lower()
        cloud = {"aws": "AWS", "azure": "Azure"}.get(scheme)
        return CloudModel(cloud, nodes_src, f"node {node_name}: providerID {provider}", provider)
    maker = (vendor or "").strip()
    if maker:
        cloud = VENDORS.get(maker.lower())
        return CloudModel(cloud, dmi_src, f"sys_vendor: {maker}", None, unsure=cloud == "Azure")
    return None
