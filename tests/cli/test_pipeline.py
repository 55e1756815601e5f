"""One pipeline: the run mode (the Service in focus, a preflight) is an input fixed when the state is made, not a
flag flipped on a shared object; `kpdiag node` rejects a bad --service/--trace before it collects anything."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from kpdiag.bundle.store import Bundle
from kpdiag.cli import cli
from kpdiag.commands.pipeline import analyze_bundle
from kpdiag.state.node import NodeState
from tests.conftest import FIXTURES


def test_run_mode_is_fixed_when_the_state_is_made():
    bundle = Bundle.open(os.path.join(FIXTURES, "healthy-iptables"))
    state = NodeState(bundle, focus=("shop", "web"), preflight="nftables")
    assert state.focus == ("shop", "web") and state.preflight == "nftables"
    with pytest.raises(AttributeError):
        state.focus = None
    with pytest.raises(AttributeError):
        state.preflight = "ipvs"
    assert NodeState(bundle).focus is None and NodeState(bundle).preflight is None


@pytest.mark.parametrize(
    "args, message",
    [
        (["--service", "web"], "--service wants NS/NAME, not 'web'"),
        (["--service", "shop/"], "--service wants NS/NAME"),
        (["--trace", "10.96.0.10"], "--trace wants DST:PORT"),
        (["--trace", "10.96.0.10:80/gre"], "protocol must be tcp, udp, sctp or icmp"),
        (["--trace", "web.shop:80"], "--trace web.shop:80: not an IPv4 address"),
    ],
)
def test_node_rejects_a_bad_focus_before_collecting(args, message):
    result = CliRunner().invoke(cli, ["node", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "collect" not in result.output.lower()  # no progress line: nothing was collected


def test_a_saved_service_bundle_is_that_service_again():
    saved = [n for n in os.listdir(FIXTURES) if n.startswith("svc-")]
    assert saved
    report = analyze_bundle(os.path.join(FIXTURES, saved[0]))
    assert report.subject.startswith("service ") and "verdict" in report.extra
