"""resolv.conf as glibc and musl read it, and the names they ask for a name (search path, ndots, trailing dot)."""

import os
import socket
import struct

import pytest

from kpdiag.collect import dns


def test_parse_a_kubelet_resolv_conf():
    rc = dns.parse_resolv_conf(
        "nameserver 10.96.0.10\nsearch shop.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"
    )
    assert rc["nameservers"] == ["10.96.0.10"]
    assert rc["search"] == ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local"]
    assert rc["ndots"] == 5 and rc["options"] == {"ndots": 5}
    assert rc["lines"] == {"nameserver": [1], "search": [2], "options": [3]}
    assert [e["line"] for e in rc["entries"]] == [1, 2, 3] and rc["problems"] == []
    assert dns.cluster_domain_of(rc["search"]) == ("cluster.local", "search")
    assert dns.client_namespace_of(rc["search"], "cluster.local") == "shop"


def test_parse_rules_last_search_or_domain_wins_comments_options():
    text = (
        "# generated\n; also a comment\nnameserver 10.0.0.1 # trailing\nnameserver fd00::10\nnameserver 10.0.0.3\nnameserver 10.0.0.4\n"
        "search a.example b.example\ndomain corp.example\noptions timeout:1 attempts:2 rotate ndots:20 edns0\n"
        "options ndots:x\nnameserver not-an-ip\nnameserver\nsortlist 10.0.0.0\n"
    )
    rc = dns.parse_resolv_conf(text)
    assert rc["nameservers"] == ["10.0.0.1", "fd00::10", "10.0.0.3", "10.0.0.4"]  # all recorded; the probe uses 3
    assert rc["search"] == ["corp.example"]  # "domain" after "search" replaces it
    assert rc["ndots"] == 15 and rc["options"]["ndots"] == 20  # capped as resolvers do; the written value kept
    assert (
        rc["options"]["timeout"] == 1
        and rc["options"]["attempts"] == 2
        and rc["options"]["rotate"] is True
        and rc["options"]["edns0"] is True
    )
    assert [(p["line"], p["why"].split(":")[0]) for p in rc["problems"]] == [
        (10, "options ndots"),
        (11, "'not-an-ip' is not an IP address (resolvers ignore the line)"),
        (12, "nameserver without an address"),
    ]
    assert dns.parse_resolv_conf("search a.example\nsearch b.example c.example\n")["search"] == [
        "b.example",
        "c.example",
    ]
    assert dns.parse_resolv_conf("")["ndots"] == 1  # the resolvers' default


def test_cluster_domain_and_namespace_from_a_custom_domain():
    search = ["team-a.svc.k8s.corp", "svc.k8s.corp", "k8s.corp", "corp"]
    assert dns.cluster_domain_of(search) == ("k8s.corp", "search")
    assert dns.client_namespace_of(search, "k8s.corp") == "team-a"
    assert dns.cluster_domain_of(["corp.example"]) == ("cluster.local", "default")
    assert dns.client_namespace_of(["corp.example"], "cluster.local") is None


SEARCH = ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local"]


@pytest.mark.parametrize("libc", ["glibc", "musl"])
def test_fewer_dots_than_ndots_search_first_then_as_is(libc):
    assert dns.search_candidates("web", SEARCH, 5, libc) == [
        "web.shop.svc.cluster.local",
        "web.svc.cluster.local",
        "web.cluster.local",
        "web",
    ]
    assert dns.search_candidates("web.shop", SEARCH, 5, libc)[1] == "web.shop.svc.cluster.local"
    # an external name with 2 dots still walks the whole search list first under ndots:5 (the famous extra queries)
    assert dns.search_candidates("api.example.com", SEARCH, 5, libc)[-1] == "api.example.com"
    assert len(dns.search_candidates("api.example.com", SEARCH, 5, libc)) == 4


def test_at_least_ndots_dots_as_is_first_glibc_then_search_musl_never():
    assert dns.search_candidates("web.shop", SEARCH, 1, "glibc") == [
        "web.shop",
        "web.shop.shop.svc.cluster.local",
        "web.shop.svc.cluster.local",
        "web.shop.cluster.local",
    ]
    assert dns.search_candidates("web.shop", SEARCH, 1, "musl") == ["web.shop"]
    assert dns.search_candidates("web", SEARCH, 0, "musl") == ["web"]  # ndots:0: every name is tried as it is
    assert (
        dns.search_candidates("a.b.c.d.e.f", SEARCH, 5, "glibc")[0] == "a.b.c.d.e.f"
    )  # exactly ndots dots: as it is first


@pytest.mark.parametrize("libc", ["glibc", "musl"])
def test_trailing_dot_is_absolute(libc):
    assert dns.search_candidates("web.shop.svc.cluster.local.", SEARCH, 5, libc) == ["web.shop.svc.cluster.local"]
    assert dns.search_candidates("web.", SEARCH, 5, libc) == ["web"]


def test_no_search_list():
    assert dns.search_candidates("web", [], 5, "glibc") == ["web"]


def test_outcome_walks_like_the_resolvers():
    results = {
        "a.x": {"result": "nxdomain"},
        "a.y": {"result": "servfail", "error": "SERVFAIL"},
        "a.z": {"result": "answer", "addresses": ["10.0.0.1"]},
        "b.x": {"result": "timeout", "error": "no answer within 2 s"},
        "b.y": {"result": "answer", "addresses": ["10.0.0.2"]},
    }
    get = results.get
    assert dns._outcome(["a.x", "a.y", "a.z"], get, "glibc") == {
        "result": "resolved",
        "qname": "a.z",
        "addresses": ["10.0.0.1"],
        "error": None,
    }
    assert dns._outcome(["a.x", "a.y", "a.z"], get, "musl")["result"] == "servfail"  # musl stops at a server failure
    assert dns._outcome(["b.x", "b.y"], get, "glibc")["result"] == "timeout"  # a timeout stops both
    assert dns._outcome(["a.x"], get, "musl") == {"result": "nxdomain", "qname": None, "addresses": [], "error": None}


def test_read_resolv_conf_bounded_and_regular_files_only(tmp_path):
    big = tmp_path / "resolv.conf"
    big.write_text("nameserver 10.96.0.10\n" + "# padding\n" * 10000)
    rc = dns.read_resolv_conf(str(big))
    assert rc["nameservers"] == ["10.96.0.10"] and "larger than 64 KiB" in rc["error"]
    assert dns.read_resolv_conf(str(tmp_path))["error"].endswith("not a regular file")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert dns.read_resolv_conf(str(fifo))["error"].endswith("not a regular file")  # and it does not block
    missing = dns.read_resolv_conf(str(tmp_path / "nope"))
    assert (
        missing["error"].startswith("could not read")
        and missing["nameservers"] == []
        and missing["path"].endswith("nope")
    )
    link = tmp_path / "link"
    link.symlink_to(big)  # /etc/resolv.conf is often a symlink (systemd-resolved): followed to a regular file
    assert dns.read_resolv_conf(str(link))["nameservers"] == ["10.96.0.10"]


def test_query_message_and_reply_parsing():
    q = dns.build_query("web.shop.svc.cluster.local", "A", 0x1234)
    assert (
        q[:2] == b"\x12\x34"
        and b"\x03web\x04shop\x03svc\x07cluster\x05local\x00" in q
        and q.endswith(b"\x00\x01\x00\x01")
    )
    # a reply: the question, a CNAME (compressed pointer to the question name) and an A record
    header = struct.pack("!HHHHHH", 0x1234, 0x8180, 1, 2, 0, 0)
    question = q[12:]
    cname = b"\xc0\x0c" + struct.pack("!HHIH", 5, 1, 30, 6) + b"\x03alt\xc0\x10"  # alt.shop.svc.cluster.local
    a = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 30, 4) + socket.inet_aton("10.96.0.20")
    reply = dns.parse_response(header + question + cname + a, 0x1234)
    assert reply["rcode_name"] == "NOERROR" and not reply["truncated"]
    assert reply["answers"] == [
        {"name": "web.shop.svc.cluster.local", "type": "CNAME", "ttl": 30, "data": "alt.shop.svc.cluster.local"},
        {"name": "web.shop.svc.cluster.local", "type": "A", "ttl": 30, "data": "10.96.0.20"},
    ]
    nx = dns.parse_response(struct.pack("!HHHHHH", 7, 0x8183, 1, 0, 0, 0) + question, 7)
    assert nx["rcode_name"] == "NXDOMAIN" and nx["truncated"] is False
    tc = dns.parse_response(struct.pack("!HHHHHH", 7, 0x8380 | 0x0200, 1, 0, 0, 0) + question, 7)
    assert tc["truncated"] is True
    with pytest.raises(ValueError):
        dns.parse_response(header + question, 0x9999)  # another query's reply
    with pytest.raises(ValueError):
        dns.parse_response(
            struct.pack("!HHHHHH", 7, 0x8180, 1, 1, 0, 0) + b"\xc0\x0c", 7
        )  # a pointer to itself: a loop
    with pytest.raises(ValueError):
        dns.parse_response(b"\x00\x07\x81", 7)
    with pytest.raises(ValueError):
        dns.encode_name("a" * 64 + ".example")
