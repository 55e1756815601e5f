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
        if isinstance(s.collect, sources.Method):  # written by the collector methods that declare it (@writes)
            assert s.collect.steps and all(getattr(NodeCollector, step.__name__) is step for step in s.collect.steps), s
        assert s.collected_by, s
        assert s.redact.form in sources.REDACT_FORMS, s
    assert not [
        s
        for s in sources.CATALOGUE.values()
        if not s.path.startswith(sources.NODE) and isinstance(s.collect, sources.NODE_RECIPES)
    ], "only node sources have a node recipe"
    steps = [name for name, _ in NodeCollector(host_root="/", only=(sources.IPSET,)).steps()]
    assert steps == ["kernel", sources.MODULES_BUILTIN.path, sources.IPSET.path]  # which modules are in, then ipset
    steps = [name for name, _ in NodeCollector(host_root="/", only=(sources.ETHTOOL_OFFLOAD,)).steps()]
    assert steps == ["links", sources.ETHTOOL_OFFLOAD.path]  # the devices first
    steps = [name for name, _ in NodeCollector(host_root="/", only=(sources.KP_LOG,)).steps()]
    assert steps == ["kube_proxy_files", "kube_proxy_journal"]  # journald only when no log file was found
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


def _writer(name: str):
    """The function ``module:qualname`` a recipe names, and its module."""
    import importlib

    module, _, qualname = name.partition(":")
    mod = importlib.import_module(module)
    obj = mod
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return mod, obj


def _named_sources(mod, fnode) -> set:
    """The catalogue's sources a function's code names: ``sources.X``, or a module-level name bound to one."""
    out = set()
    for n in ast.walk(fnode):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "sources":
            value = getattr(sources, n.attr, None)
        elif isinstance(n, ast.Name):
            value = mod.__dict__.get(n.id)
        else:
            continue
        if isinstance(value, sources.Source) and sources.declared(value.path) is value:
            out.add(value.path)
    return out


def _functions(tree, prefix=""):
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, prefix + node.name + ".")


def test_every_api_and_probe_source_says_how_it_is_collected():
    """A cluster source declares the API requests that make it and the functions that write it; a probe source what
    kpdiag sends and who writes it; every writer named exists and its code names the source — and every function of
    the API and probe collectors that writes such a source is among its writers, so the catalogue cannot drift."""
    import inspect
    import textwrap

    declared = {}
    for s in sources.CATALOGUE.values():
        if s.path.startswith(sources.NODE):
            continue
        want = (sources.ApiRead, sources.ByHand) if s.path.startswith(sources.CLUSTER) else (sources.Probe,)
        assert isinstance(s.collect, want), s
        assert s.collect.describe(), s
        for name in getattr(s.collect, "writers", ()):
            mod, fn = _writer(name)
            assert callable(fn), (s, name)
            fnode = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
            assert s.path in _named_sources(mod, fnode), f"{name} does not name {s.path}"
            declared.setdefault(s.path, set()).add(name)
    assert {s.path for s in sources.CATALOGUE.values() if isinstance(s.collect, sources.ByHand)} == {
        sources.DAEMONSETS.path
    }
    # the other way: who writes files[<a cluster or probe source>] is declared as its writer
    written = {}
    for module in ("kpdiag.collect.cluster", "kpdiag.collect.cni", "kpdiag.commands.svc", "kpdiag.commands.policy"):
        import importlib

        mod = importlib.import_module(module)
        for qualname, fnode in _functions(ast.parse(inspect.getsource(mod))):
            for n in ast.walk(fnode):
                targets = n.targets if isinstance(n, ast.Assign) else []
                for t in targets:
                    if isinstance(t, ast.Subscript):
                        for path in _named_sources(mod, t.slice):
                            if not path.startswith(sources.NODE):
                                written.setdefault(path, set()).add(f"{module}:{qualname}")
    assert len(written) >= 15, written
    for path, names in written.items():
        assert names <= declared.get(path, set()), (path, names - declared.get(path, set()))


def _rbac_rules():
    import yaml

    rules = []
    for name in ("rbac-svc.yaml", "rbac-svc-whoami.yaml", "rbac-svc-kube-system.yaml"):
        with open(os.path.join(ROOT, "deploy", name), encoding="utf-8") as fh:
            for doc in yaml.safe_load_all(fh):
                if isinstance(doc, dict) and doc.get("kind") in ("ClusterRole", "Role"):
                    rules += doc.get("rules") or []
    return rules


def _granted(rules, verb: str, group, resource: str) -> bool:
    for r in rules:
        if verb not in r.get("verbs", ()):
            continue
        if group is None and resource in r.get("nonResourceURLs", ()):
            return True
        if group is not None and group in r.get("apiGroups", ()) and resource in r.get("resources", ()):
            return True
    return False


def test_every_api_request_of_the_catalogue_is_granted_by_the_rbac_manifests():
    """The requests the catalogue declares are the ones deploy/rbac-svc.yaml (and the opt-in whoami grant) allows:
    a source whose request no role grants would be collected nowhere kpdiag is deployed as documented."""
    rules = _rbac_rules()
    assert _granted(rules, "get", "", "pods/log") and not _granted(rules, "list", "", "secrets")
    calls = [
        (s, c) for s in sources.CATALOGUE.values() if isinstance(s.collect, sources.ApiRead) for c in s.collect.calls
    ]
    assert len(calls) >= 20
    missing = [
        f"{s.path}: {verb} {res} ({group!r})"
        for s, (verb, group, res) in calls
        if not _granted(rules, verb, group, res)
    ]
    assert not missing, "API requests no role in deploy/ grants:\n" + "\n".join(missing)


def test_api_calls_are_spelled_as_kubectl_auth_can_i_spells_them():
    r = sources.api("list endpointslices.discovery.k8s.io", "get pods/log", "get /version", writers=("m:f",))
    assert r.calls == (
        ("list", "discovery.k8s.io", "endpointslices"),
        ("get", "", "pods/log"),
        ("get", None, "/version"),
    )
    assert r.describe() == "list endpointslices.discovery.k8s.io, get pods/log, get /version"
