"""node/ethtool-offload.txt: ethtool -k blocks, and a clear error naming the line for anything else."""

import os

import pytest

from kpdiag.errors import InputError
from kpdiag.parse.ethtool import parse_ethtool_features
from tests.conftest import FIXTURES


def test_recorded_blocks_are_read_with_their_lines():
    path = os.path.join(FIXTURES, "vxlan-checksum-bug", "node", "ethtool-offload.txt")
    with open(path) as fh:
        off = parse_ethtool_features(fh.read(), "node/ethtool-offload.txt")
    f = off.feature("flannel.1", "tx-checksum-ip-generic")
    assert f is not None and f.on and not f.fixed and f.text == "tx-checksum-ip-generic: on"
    assert off.feature("flannel.1", "tx-checksum-ipv4").fixed  # "off [fixed]"
    assert off.feature("flannel.1", "nonexistent") is None and off.feature("eth9", "tx-checksum-ip-generic") is None


def test_two_devices_and_requested_states():
    text = (
        "Features for flannel.1:\ntx-checksumming: off\n\ttx-checksum-ip-generic: off [requested on]\n"
        "Features for vxlan.calico:\n\ttx-checksum-ip-generic: on\n\ttx-udp_tnl-segmentation: on\n"
    )
    off = parse_ethtool_features(text, "x")
    assert not off.feature("flannel.1", "tx-checksum-ip-generic").on
    assert off.feature("vxlan.calico", "tx-checksum-ip-generic").line == 5
    assert off.feature("vxlan.calico", "tx-udp_tnl-segmentation").on


@pytest.mark.parametrize(
    "text,line",
    [
        ("tx-checksumming: on\n", 1),  # a feature before any "Features for" header
        ("Features for flannel.1:\nCannot get device udp-fragmentation-offload settings: Operation not supported\n", 2),
        ("Features for flannel.1:\ntx-checksum-ip-generic: maybe\n", 2),
    ],
)
def test_anything_else_is_an_error_naming_its_line(text, line):
    with pytest.raises(InputError) as err:
        parse_ethtool_features(text, "node/ethtool-offload.txt")
    assert err.value.line == line and str(err.value).startswith(f"node/ethtool-offload.txt:{line}:")
