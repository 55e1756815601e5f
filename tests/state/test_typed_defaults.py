"""Typed inputs made without their optional readers (found by mypy: a field typed Callable defaulted to None and
was called): they answer None instead of raising TypeError."""

from kpdiag.parse.iptables import parse_iptables_save
from kpdiag.state.typed_api import ApiList
from kpdiag.state.typed_proxy import KubeProxyRules


def test_an_api_list_without_a_text_reader_has_no_text():
    problems: list[str] = []
    lst = ApiList("cluster/services.json", lambda: {"items": [{"kind": "Service"}]}, problems.append)
    assert lst.items() == [{"kind": "Service"}]
    assert lst.text() is None and problems == []


def test_kube_proxy_rules_without_other_dumps_has_no_other_programmed_table():
    rs = parse_iptables_save("*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n")
    rules = KubeProxyRules({}, rs, lambda which: None)
    assert rules.programmed_in("iptables-save") == {}
    assert rules.programmed_in("ip6tables-save") is None
