"""The cloud's own settings that decide whether pod traffic leaves the node, which kpdiag cannot see from the node:
EC2's source/destination check and Azure's NIC IP forwarding under unencapsulated pod routing, AWS VPC CNI's SNAT
of pod traffic to networks outside the VPC. kpdiag says what it cannot see, once, and the command that shows it."""

from __future__ import annotations

import re
from typing import Optional

from kpdiag.checkapi import Skip, check
from kpdiag.fixcmd import command, note
from kpdiag.model import Evidence
from kpdiag.parse.addr import hostport
from kpdiag.state.typed_api import Probes, Services
from kpdiag.state.typed_node import AwsNodeEnv, Cloud, Cni, Manifest


EXTERNAL_SNAT = "AWS_VPC_K8S_CNI_EXTERNALSNAT"
EXCLUDE_SNAT = "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS"


def _aws(provider: str) -> str | None:
    """The EC2 instance id of an ``aws:///ZONE/i-…`` providerID."""
    m = re.match(r"^aws://[^/]*/[^/]*/(i-[0-9a-f]+)$", provider)
    return m.group(1) if m else None


def _azure(provider: str) -> tuple[str, str, str | None] | None:
    """(resource group, VM or scale set name, scale set instance) of an ``azure:///subscriptions/…`` providerID."""
    m = re.match(
        r"^azure:///subscriptions/[^/]+/resourceGroups/([^/]+)/providers/Microsoft\.Compute/"
        r"(?:virtualMachines/([^/]+)|virtualMachineScaleSets/([^/]+)/virtualMachines/([^/]+))$",
        provider,
        re.I,
    )
    if not m:
        return None
    return (m.group(1), m.group(2), None) if m.group(2) else (m.group(1), m.group(3), m.group(4))


def _cross_node_timeouts(services: Services | None, probes: Probes | None, me: str) -> list[str]:
    """The endpoints on other nodes that kpdiag's direct probes got no answer from (timeout), when none on another
    node answered: the sign that pod traffic between nodes is lost."""
    if services is None or probes is None:
        return []
    results = {r.get("target"): r.get("result") for r in probes.probe_results() if isinstance(r, dict)}
    lost = []
    for svc in services.every:
        for e in svc.endpoints:
            if not e.node or e.node == me:
                continue
            for port in svc.ports:
                target = f"{hostport(e.ip, svc.target_of(e, port))}/{(port.get('protocol') or 'TCP').lower()}"
                if results.get(target) in ("connected", "syn-ack", "refused", "rst"):
                    return []  # a pod on another node answers: pod traffic between nodes does get through
                if results.get(target) == "timeout":
                    lost.append(f"{target} ({e.pod or 'pod'} on node {e.node}): timeout")
    return lost


@check(
    "KP640",
    "cloud-forwarding-unseen",
    "Unencapsulated pod routing on AWS or Azure: the cloud's source/destination check or NIC IP forwarding decides",
    "info",
    severities=("info", "warning"),
    explains=("KP112",),  # the endpoints on other nodes that do not answer (a warning only when probes saw that)
    symptom="Pods reach pods on their own node but not on other nodes (timeouts), while the nodes reach each other; "
    "the routes and rules on every node look right.",
    why="""
        With flannel host-gw, Calico BGP without IPIP/VXLAN or kube-router, a pod's packet to a pod on another node
        leaves this node as it is — with the pod's source and destination addresses, which are not the node's. EC2
        drops such packets unless the instance's source/destination check is off; Azure drops them unless the NIC
        has IP forwarding on (and a route table sends each node's pod range to it). Those are settings of the cloud,
        not of the node: kpdiag cannot read them from here, so it says once where to look. When kpdiag's probes show
        pods on other nodes not answering while the node's own state is fine, that setting is the likely cause.
    """,
    fix="Turn EC2's source/destination check off on every node (or use an encapsulating mode: Calico IPIP/VXLAN "
    "CrossSubnet, flannel vxlan); on Azure turn IP forwarding on for every node's NIC and route the pod ranges.",
    cni=("node-podcidr", "ipam-blocks"),
)
def cloud_forwarding_unseen(
    new,
    cni_model: Cni,
    cloud: Cloud,
    manifest: Optional[Manifest] = None,
    services: Optional[Services] = None,
    probes: Optional[Probes] = None,
):
    model, where = cni_model.model, cloud.model
    if model.shape is not None and model.shape.encap is not None:
        return  # encapsulated: the packets between nodes carry the nodes' own addresses
    if not model.unencapsulated():
        raise Skip(
            f"{model.label} is known from its DaemonSet or agent only: whether pods cross to other nodes "
            "unencapsulated is not seen on this node"
        )
    if where.cloud not in ("AWS", "Azure"):
        return  # not AWS or Azure: no such setting of the cloud between the nodes
    name = (manifest.node if manifest else "") or "this node"
    check_cmd, fix_cmd = _cloud_steps(where.cloud, where.provider_id or "")
    lost = _cross_node_timeouts(services, probes, name)
    ev = [Evidence(src, f"CNI: {model.label} ({text})") for src, text in model.signs[:1]]
    ev.append(Evidence(where.source, where.text))
    ev += [probes.evidence(t) for t in lost[:3]] if probes else []
    on = f"{where.cloud}{' (or Hyper-V: the firmware says only Microsoft Corporation)' if where.unsure else ''}"
    summary = f"pods are routed to other nodes unencapsulated ({model.label}) on {on}: " + (
        f"kpdiag's probes got no answer from {len(lost)} endpoint(s) on other nodes — the likely cause is "
        f"{what_off(where.cloud)}"
        if lost
        else f"that needs {what_off(where.cloud)} reversed on every node, a cloud setting kpdiag cannot see from here"
    )
    yield new(
        summary,
        severity="warning" if lost else "info",
        fix=(
            command(check_cmd),
            command(fix_cmd),
            note(
                "the same on every node (and in the launch template or scale set, for nodes to come); or switch the "
                "CNI to an encapsulating mode (Calico ipipMode/vxlanMode CrossSubnet, flannel Backend vxlan)"
            ),
        ),
        evidence=ev,
        subject=name,
        data={"node": name, "cloud": where.cloud, "cni": model.label, "provider_id": where.provider_id, "lost": lost},
    )


def what_off(cloud: str) -> str:
    return (
        "EC2's source/destination check (on by default)"
        if cloud == "AWS"
        else "the NIC's IP forwarding (off by default)"
    )


def _cloud_steps(cloud: str, provider: str) -> tuple[str, str]:
    """(the command that shows the setting, the one that changes it) on ``cloud``, for this node's providerID (its
    instance named when the providerID names it)."""
    if cloud == "AWS":
        iid = _aws(provider) or "<this node's instance id: ec2-metadata -i>"
        return (
            f"aws ec2 describe-instance-attribute --instance-id {iid} --attribute sourceDestCheck   # false is needed",
            f"aws ec2 modify-instance-attribute --instance-id {iid} --no-source-dest-check",
        )
    rg, vm, instance = _azure(provider) or ("<resource group>", "<vm>", None)
    if instance is not None:
        return (
            f"az vmss nic list -g {rg} --vmss-name {vm} --query "
            f"\"[?contains(virtualMachine.id, '/virtualMachines/{instance}')].enableIPForwarding\"   # true is needed",
            f"az vmss update -g {rg} -n {vm} --set "
            "virtualMachineProfile.networkProfile.networkInterfaceConfigurations[0].enableIPForwarding=true",
        )
    nic = f"$(az vm show -g {rg} -n {vm} --query 'networkProfile.networkInterfaces[0].id' -o tsv)"
    return (
        f"az network nic show --ids {nic} --query enableIPForwarding   # true is needed",
        f"az network nic update --ids {nic} --ip-forwarding true",
    )


@check(
    "KP641",
    "aws-vpc-cni-external-snat",
    "AWS VPC CNI translates pod traffic leaving the VPC: peered networks cannot reach pods on secondary ENIs",
    "info",
    symptom="Pods reach hosts in a peered VPC, over a Transit Gateway, VPN or Direct Connect, but those hosts cannot "
    "open connections to the pods (timeouts), or see the node's address instead of the pod's.",
    why=f"""
        AWS VPC CNI gives pods VPC addresses, but by default ({EXTERNAL_SNAT} unset or false) it source-NATs pod
        traffic to any address outside the VPC's CIDRs to the node's primary address (its AWS-SNAT-CHAIN rules), and
        marks connections so replies leave by the primary ENI. Hosts in networks joined to the VPC — peering, Transit
        Gateway, VPN, Direct Connect — then see the node's address, and connections they open to pods behind
        secondary ENIs go unanswered. AWS's guidance: {EXTERNAL_SNAT}=true when such networks must reach pods (a NAT
        gateway then does the SNAT to the internet), or {EXCLUDE_SNAT} listing those networks.
    """,
    fix=f"kubectl -n kube-system set env daemonset/aws-node {EXTERNAL_SNAT}=true (with a NAT gateway for internet "
    f"traffic), or {EXCLUDE_SNAT}=<the peered networks' CIDRs>.",
    cni=("aws-vpc-cni",),
)
def aws_external_snat(new, aws: AwsNodeEnv):
    settings = [(comp, k, v) for comp, k, v in aws.model.settings if k.startswith("AWS_VPC_K8S_CNI_")]
    if not settings:
        raise Skip(f"aws-node's {EXTERNAL_SNAT} and {EXCLUDE_SNAT} are not in the bundle (its DaemonSet's env)")
    values = {k: (comp, v) for comp, k, v in settings}
    if values.get(EXTERNAL_SNAT, ("", "false"))[1].strip().lower() == "true":
        return
    if values.get(EXCLUDE_SNAT, ("", ""))[1].strip():
        return  # the networks that must reach pods are excluded from the SNAT
    comp = settings[0][0]
    shown = values.get(EXTERNAL_SNAT)
    yield new(
        f"aws-node SNATs pod traffic leaving the VPC ({EXTERNAL_SNAT}="
        f"{shown[1] if shown else 'unset: false'}, no {EXCLUDE_SNAT}): hosts in peered networks, a Transit Gateway, "
        "VPN or Direct Connect cannot open connections to pods on secondary ENIs",
        fix=(
            command(f"kubectl -n kube-system set env daemonset/aws-node {EXTERNAL_SNAT}=true"),
            command(f"kubectl -n kube-system set env daemonset/aws-node {EXCLUDE_SNAT}=<peered CIDR>[,<CIDR>…]"),
            note(
                f"{EXTERNAL_SNAT}=true sends pods' internet traffic out without the node's SNAT: the subnet then "
                "needs a NAT gateway route; nothing to change if no network outside the VPC must reach the pods"
            ),
        ),
        evidence=[Evidence(aws.model.settings_source, f"{comp}: " + ", ".join(f"{k}={v}" for _, k, v in settings))],
        subject=comp,
        data={"settings": {k: v for _, k, v in settings}},
    )
