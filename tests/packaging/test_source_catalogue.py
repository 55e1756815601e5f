"""The source catalogue (kpdiag/bundle/sources.py) is the only place a bundle path is spelled.

Every string in the runtime code (kpdiag/ and checks/, docstrings and comments aside) that names a bundle file must
come from the catalogue, and every file in the fixtures' bundles must be a declared source — so a typo in a path, or
a file no code reads, is caught here rather than as a silently skipped check.
"""

from __future__ import annotations

import ast
import os
import re

from kpdiag.bundle import sources

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATH_RE = re.compile(r"\b(?:node|cluster|probes)/[A-Za-z0-9_.{}+-]+(?:/[A-Za-z0-9_.{}+-]+)*\.(?:txt|json|yaml)\b")


def _runtime_files():
    for base in ("kpdiag", "checks"):
        for dirpath, dirnames, names in os.walk(os.path.join(ROOT, base)):
            if os.path.islink(dirpath) or dirpath.endswith(os.path.join("kpdiag", "checks")):
                dirnames[:] = []
                continue
            for n in names:
                if n.endswith(".py") and not (n == "sources.py" and dirpath.endswith(os.path.join("kpdiag", "bundle"))):
                    yield os.path.join(dirpath, n)


def _docstrings(tree) -> set[int]:
    """ids of the string constants that are statements of their own (docstrings, and strings used as comments)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            out.add(id(node.value))
    return out


def _spelled_paths(path: str) -> list[str]:
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    skip = _docstrings(tree)
    hits = []
    inside_fstrings = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):  # f"node/{which}.txt": its text with each expression as {}
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip | inside_fstrings:
            text = node.value
        else:
            continue
        for m in PATH_RE.finditer(text):
            hits.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}: {m.group(0)}")
    return hits


def test_no_bundle_path_is_spelled_outside_the_catalogue():
    files = list(_runtime_files())
    assert len(files) > 40, files  # the walk found the code
    hits = [h for f in files for h in _spelled_paths(f)]
    assert not hits, "bundle paths spelled outside kpdiag/bundle/sources.py:\n" + "\n".join(hits)


def test_the_checker_would_see_a_spelled_path(tmp_path):
    p = tmp_path / "x.py"
    p.write_text(
        '"""node/iptables-save.txt in a docstring is prose"""\nA = "node/ipvsadm.txt"\nB = f"see {A} and cluster/pods.json"\nC = f"node/{B}.txt"\n'
    )
    assert [h.split(": ", 1)[1] for h in _spelled_paths(str(p))] == [
        "node/ipvsadm.txt",
        "cluster/pods.json",
        "node/{}.txt",
    ]


def test_every_fixture_file_is_a_declared_source():
    fixtures = os.path.join(ROOT, "fixtures")
    unknown = []
    bundles = 0
    for name in sorted(os.listdir(fixtures)):
        root = os.path.join(fixtures, name)
        if not os.path.isfile(os.path.join(root, "kpdiag.json")):
            continue
        bundles += 1
        for dirpath, _, names in os.walk(root):
            for n in names:
                rel = os.path.relpath(os.path.join(dirpath, n), root)
                if rel in ("kpdiag.json", "scenario.json") or not rel.startswith(("node/", "cluster/", "probes/")):
                    continue
                if sources.declared(rel) is None:
                    unknown.append(f"{name}/{rel}")
    assert bundles > 50
    assert not unknown, "files in fixtures that no source declares:\n" + "\n".join(unknown)


def test_declarations_are_complete_and_parsers_exist():
    assert len(sources.CATALOGUE) >= 45
    for s in sources.CATALOGUE.values():
        assert s.path.startswith((sources.NODE, sources.CLUSTER, sources.PROBES)), s
        assert s.collected_by and s.what, s
        assert s.kind == ("json" if s.path.endswith(".json") else "text")
        if s.parser:
            assert callable(s.parse_function()), s.parser
    # a Source is its path: usable as a plain string everywhere (dict keys, JSON, comparisons)
    import json

    assert sources.IPVSADM == "node/ipvsadm.txt" and {"node/ipvsadm.txt": 1}[sources.IPVSADM] == 1
    assert json.loads(json.dumps({sources.IPVSADM: sources.IPVSADM})) == {"node/ipvsadm.txt": "node/ipvsadm.txt"}
    assert sources.iptables_dump("ip6tables-save") is sources.IP6TABLES_SAVE


RAW_READS = {"read_text", "read_json", "read_bytes", "exists", "list", "manifest", "root"}


def test_checks_never_read_the_raw_bundle():
    """Checks get their inputs from the state (ctx.source(...), ctx.iptables(), ctx.cluster …), which reads and parses
    each source once per run; naming a file (ctx.bundle.display) and recording a problem are all they do with it."""
    hits = []
    checks_dir = os.path.join(ROOT, "checks")
    for name in sorted(os.listdir(checks_dir)):
        if not name.endswith(".py"):
            continue
        path = os.path.join(checks_dir, name)
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in RAW_READS
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "bundle"
            ):
                hits.append(f"checks/{name}:{node.lineno}: .bundle.{node.attr}")
    assert not hits, "checks reading the bundle directly:\n" + "\n".join(hits)


def test_every_node_source_says_how_it_is_collected():
    """A node source declares a recipe the node collector interprets, or the collector methods that write it; every
    method named exists, and a collection restricted to some sources (``only``) runs just their steps."""
    from kpdiag.collect.node import NodeCollector

    recipes = (sources.Command, sources.PerInterface, sources.HostFile, sources.Method)
    for s in sources.node_sources():
        assert isinstance(s.collect, recipes), s
        if isinstance(s.collect, sources.Method):
            assert all(callable(getattr(NodeCollector, name, None)) for name in s.collect.names), s.collect
        assert s.collected_by, s
        assert s.redact.form in sources.REDACT_FORMS, s
    assert not [s for s in sources.CATALOGUE.values() if not s.path.startswith(sources.NODE) and s.collect], (
        "only node sources have a node recipe"
    )
    steps = [name for name, _ in NodeCollector(host_root="/", only=(sources.IPSET,)).steps()]
    assert steps == ["kernel", sources.MODULES_BUILTIN.path, sources.IPSET.path]  # which modules are in, then ipset
    steps = [name for name, _ in NodeCollector(host_root="/", only=(sources.ETHTOOL_OFFLOAD,)).steps()]
    assert steps == ["links", sources.ETHTOOL_OFFLOAD.path]  # the devices first
    full = [name for name, _ in NodeCollector(host_root="/").steps()]
    assert len(full) == len(set(full)) and {"iptables", "nft", "ipvs", "kube_proxy_http"} <= set(full)


def test_a_module_built_in_counts_as_loaded(tmp_path):
    """A recipe's ``loaded=`` module may be built into the kernel (modules.builtin under the host root, read by its
    host_file recipe): the command is run then; a kernel that has it neither loaded nor built in is left alone."""
    from kpdiag.collect.node import NodeCollector

    release = os.uname().release
    (tmp_path / "host" / "lib" / "modules" / release).mkdir(parents=True)
    (tmp_path / "host" / "lib" / "modules" / release / "modules.builtin").write_text(
        "kernel/net/netfilter/ipset/ip_set.ko\n"
    )
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "modules").write_text("nf_conntrack 1 0 - Live 0x0\n")
    c = NodeCollector(host_root=str(tmp_path / "host"), proc=str(tmp_path / "proc"), only=(sources.IPSET,))
    for _name, step in c.steps()[:2]:  # the modules, loaded and built in
        step()
    assert c._loaded("ip_set") and c._loaded("nf_conntrack") and not c._loaded("ip_vs")
    (tmp_path / "host" / "lib" / "modules" / release / "modules.builtin").write_text("kernel/net/ipv4/tcp.ko\n")
    c = NodeCollector(host_root=str(tmp_path / "host"), proc=str(tmp_path / "proc"), only=(sources.IPSET,))
    out = c.collect()
    assert sources.IPSET not in out.files
    assert out.errors == [{"source": sources.IPSET, "error": sources.IPSET.collect.absent}]
