"""Kernel settings, each case one given(): the healthy base with the setting it changes."""

from tests.given import given


def test_ip_forward_off_is_an_error_with_the_line_and_the_fix():
    (f,) = given(sysctl="net.ipv4.ip_forward = 0").fires("KP501")
    assert f.evidence[0].text == "net.ipv4.ip_forward = 0" and f.evidence[0].source == "node/sysctl.txt"
    assert f.data == {"sysctls": [{"key": "net.ipv4.ip_forward", "value": "0", "want": "1"}]}
    assert any("sysctl -w net.ipv4.ip_forward=1" in step for step in f.fix)


def test_ip_forward_on_is_silent_and_missing_is_a_skip():
    given(sysctl="net.ipv4.ip_forward = 1").silent("KP501")
    assert "not in the collected sysctls" in given(sysctl={"net.ipv4.ip_forward": None}).skips("KP501")
    assert "node/sysctl.txt" in given(files={"node/sysctl.txt": None}).skips("KP501")
