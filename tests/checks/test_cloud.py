"""KP640 (the cloud's forwarding settings under unencapsulated pod routing) and KP641 (AWS VPC CNI's external SNAT),
on the healthy zoo's nodes (fixtures/zoo-*, recorded on the real kernel) with the API's side each case changes."""

import json

from tests import k8sobjects as k8s
from tests.given import base_files, given

BGP, HOSTGW, VXLAN, AWS_CNI = "zoo-calico-bgp-nft", "zoo-flannel-hostgw-nft", "zoo-calico-vxlan", "zoo-aws-vpc-cni"
EC2 = "aws:///eu-west-1a/i-0abc123def4567890"
AZ = "azure:///subscriptions/1111/resourceGroups/rg-k8s/providers/Microsoft.Compute/virtualMachines/node-1"


def nodes_of(base: str, provider: str | None) -> list:
    """The base's own Nodes, this node's with ``provider`` as its providerID."""
    doc = json.loads(base_files(base)["cluster/nodes.json"])
    me = json.loads(base_files(base)["kpdiag.json"])["node"]
    for n in doc["items"]:
        if n["metadata"]["name"] == me and provider:
            n.setdefault("spec", {})["providerID"] = provider
    return doc["items"]


def test_calico_bgp_on_ec2_says_once_what_it_cannot_see():
    (f,) = given(base=BGP, nodes=nodes_of(BGP, EC2)).fires("KP640")
    assert f.severity.value == "info"
    assert "Calico (BGP, no encapsulation)" in f.summary and "on AWS" in f.summary and "cannot see" in f.summary
    assert f.fix[0].startswith(
        "aws ec2 describe-instance-attribute --instance-id i-0abc123def4567890 --attribute sourceDestCheck"
    )
    assert f.fix[1] == "aws ec2 modify-instance-attribute --instance-id i-0abc123def4567890 --no-source-dest-check"
    assert any(f"providerID {EC2}" in e.text for e in f.evidence)


def test_flannel_host_gw_on_azure():
    (f,) = given(base=HOSTGW, nodes=nodes_of(HOSTGW, AZ)).fires("KP640")
    assert "flannel (host-gw)" in f.summary and "on Azure" in f.summary
    assert "az vm show -g rg-k8s -n node-1" in f.fix[0] and "--query enableIPForwarding" in f.fix[0]
    assert "--ip-forwarding true" in f.fix[1]


def test_probes_that_lose_pods_on_other_nodes_make_it_the_likely_cause():
    svc = k8s.service("shop", "web", "10.96.0.20", [k8s.port(80, 8080, "http")], {"app": "web"})
    sl = k8s.endpointslice("shop", "web", [("10.244.2.11", True, "node-b", "web-1")], [("http", 8080, "TCP")])
    probes = {
        "schema": "kpdiag.probes/v1",
        "source": "10.244.1.10",
        "raw": True,
        "raw_skipped_reason": None,
        "packets_sent": 1,
        "results": [
            {"target": "10.244.2.11:8080/tcp", "kind": "tcp-connect", "result": "timeout", "from": None, "rtt_ms": None}
        ],
    }
    g = given(
        base=BGP, nodes=nodes_of(BGP, EC2), services=[svc], endpointslices=[sl], files={"probes/service.json": probes}
    )
    (f,) = g.fires("KP640")
    assert f.severity.value == "warning"
    assert (
        "no answer from 1 endpoint(s) on other nodes — the likely cause is EC2's source/destination check" in f.summary
    )
    assert any("10.244.2.11:8080/tcp (web-1 on node node-b): timeout" in e.text for e in f.evidence)
    # a pod on another node that answers: pod traffic between nodes gets through, back to the plain note
    probes["results"][0]["result"] = "connected"
    (f,) = given(
        base=BGP, nodes=nodes_of(BGP, EC2), services=[svc], endpointslices=[sl], files={"probes/service.json": probes}
    ).fires("KP640")
    assert f.severity.value == "info"


def test_encapsulated_or_off_cloud_is_silent():
    given(base=VXLAN, nodes=nodes_of(VXLAN, EC2)).silent("KP640")  # VXLAN: the nodes' own addresses on the wire
    given(base=BGP, nodes=nodes_of(BGP, "kind://docker/kind/kind-worker")).silent("KP640")


def test_aws_vpc_cni_is_not_about_it():
    # pods have VPC addresses on the ENIs: the source/destination check does not apply
    reason = given(base=AWS_CNI, nodes=nodes_of(AWS_CNI, EC2)).skips("KP640")
    assert "this node's CNI is AWS VPC CNI" in reason


def _aws_node(env: dict) -> dict:
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "aws-node", "namespace": "kube-system"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "aws-node",
                            "image": "602401143452.dkr.ecr.us-west-2.amazonaws.com/amazon-k8s-cni:v1.19.0",
                            "env": [{"name": k, "value": v} for k, v in env.items()]
                            + [{"name": "MY_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                        }
                    ]
                }
            }
        },
    }
    return {"apiVersion": "v1", "kind": "List", "items": [ds]}


def test_external_snat_off_is_said_at_info():
    g = given(
        base=AWS_CNI,
        files={
            "cluster/cni.json": None,
            "cluster/daemonsets.json": _aws_node({"AWS_VPC_K8S_CNI_EXTERNALSNAT": "false"}),
        },
    )
    (f,) = g.fires("KP641")
    assert f.severity.value == "info"
    assert "AWS_VPC_K8S_CNI_EXTERNALSNAT=false" in f.summary
    assert f.evidence[0].source == "cluster/daemonsets.json"
    assert "DaemonSet kube-system/aws-node: AWS_VPC_K8S_CNI_EXTERNALSNAT=false" in f.evidence[0].text
    assert "kubectl -n kube-system set env daemonset/aws-node AWS_VPC_K8S_CNI_EXTERNALSNAT=true" in f.fix


def test_external_snat_on_or_excluded_networks_are_silent():
    for env in ({"AWS_VPC_K8S_CNI_EXTERNALSNAT": "true"}, {"AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS": "10.20.0.0/16"}):
        given(base=AWS_CNI, files={"cluster/cni.json": None, "cluster/daemonsets.json": _aws_node(env)}).silent("KP641")


def test_without_aws_nodes_env_it_is_skipped():
    reason = given(base=AWS_CNI).skips("KP641")  # the zoo's cni.json keeps no env
    assert "AWS_VPC_K8S_CNI_EXTERNALSNAT" in reason


def test_aws_nodes_settings_are_collected_from_the_api_and_judged(tmp_path):
    """cluster/cni.json as `kpdiag svc`/`kpdiag policy` write it from a real API server (kmock, the real client):
    aws-node's AWS_VPC_K8S_CNI_* env kept (plain values only), then KP641 reads it on the zoo's AWS node."""
    from kpdiag.bundle import sources
    from kpdiag.collect.cluster import ClusterCollector
    from tests.apiserver import ApiServer

    ds = _aws_node({"AWS_VPC_K8S_CNI_EXTERNALSNAT": "false", "AWS_VPC_K8S_CNI_RANDOMIZESNAT": "prng"})["items"][0]
    ds["metadata"]["uid"] = "uid-aws-node"
    with ApiServer([ds, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}]) as api:
        cc = ClusterCollector(api.kubeconfig(tmp_path))
        cc.policy_objects(["shop"], dns=False)
    doc = json.loads(cc.out.files[sources.CNI])
    (aws_node,) = [c for c in doc["items"] if c["name"] == "aws-node"]
    assert aws_node["containers"][0]["env"] == {
        "AWS_VPC_K8S_CNI_EXTERNALSNAT": "false",
        "AWS_VPC_K8S_CNI_RANDOMIZESNAT": "prng",
    }  # MY_NODE_NAME (valueFrom, not an AWS_VPC_K8S_CNI_ setting) left out
    (f,) = given(base=AWS_CNI, files={"cluster/cni.json": doc}).fires("KP641")
    assert f.evidence[0].source == "cluster/cni.json"


def test_an_info_note_explains_nothing_a_warning_does():
    """KP640 explains KP112 (pods on other nodes not answering) only when its probes saw that loss (a warning): its
    info note, what kpdiag cannot see, is no fault, so a KP112 beside it stays a root of its own."""
    from dataclasses import replace

    from kpdiag.model import Finding, Severity
    from kpdiag.rootcause import link

    (note_) = given(base=BGP, nodes=nodes_of(BGP, EC2)).fires("KP640")[0]
    kp112 = Finding("KP112", "endpoint-drops", Severity.ERROR, "t", "s", "e", data={"service": "kube-system/kube-dns"})
    out, _ = link([kp112, note_], [])
    assert next(f for f in out if f.id == "KP112").caused_by is None
    out, _ = link([kp112, replace(note_, severity=Severity.WARNING)], [])
    assert [f.id for f in out] == ["KP640", "KP112"] and out[1].caused_by == {"id": "KP640", "subject": note_.subject}


def test_a_self_managed_cluster_on_ec2_is_told_by_the_firmware():
    # kubeadm on EC2 without the cloud provider: no providerID, but /sys/class/dmi/id/sys_vendor says Amazon EC2
    (f,) = given(base=BGP, files={"node/dmi-sys-vendor.txt": "Amazon EC2\n"}).fires("KP640")
    assert "on AWS:" in f.summary
    assert "--instance-id <this node's instance id: ec2-metadata -i>" in f.fix[0]
    assert any(e.source == "node/dmi-sys-vendor.txt" and e.text == "sys_vendor: Amazon EC2" for e in f.evidence)
    (f,) = given(base=HOSTGW, files={"node/dmi-sys-vendor.txt": "Microsoft Corporation\n"}).fires("KP640")
    assert "on Azure (or Hyper-V: the firmware says only Microsoft Corporation)" in f.summary
    given(base=BGP, files={"node/dmi-sys-vendor.txt": "QEMU\n"}).silent("KP640")  # not a cloud with such a setting


def test_without_providerid_or_firmware_maker_the_cloud_is_unknown():
    reason = given(base=BGP).skips("KP640")
    assert "needs the cloud this node runs on (its Node's providerID, else node/dmi-sys-vendor.txt)" in reason
