"""80 columns: a COLUMNS=80 golden output of each report kind (node, service, cluster — text and table —, trace,
policy, the catalogue), compared whole, and no line of any of them wider than 80 unless the rule allows it (what
follows a line's indentation is one unbreakable token longer than the room: docblocks.too_wide). The goldens live in
tests/cli/golden/; `python docs/make_docs.py` rewrites them (with the README's and the tutorial's outputs)."""

import os

import pytest

from tests.packaging import docblocks


@pytest.mark.parametrize("name", sorted(docblocks.GOLDEN))
def test_golden_output_at_80_columns(name):
    command = docblocks.GOLDEN[name]
    path = os.path.join(docblocks.GOLDEN_DIR, name)
    assert os.path.exists(path), f"{path} missing: python docs/make_docs.py"
    want = open(path, encoding="utf-8").read()
    got = docblocks.golden_text(command)
    assert got == want, f"{name} differs from `{command}` at COLUMNS=80 (regenerate: python docs/make_docs.py)"
    lines = want.splitlines()[1:]
    assert docblocks.too_wide(lines) == []


def test_the_width_rule():
    wide = "x" * 90
    assert docblocks.too_wide(["short", "    " + wide, "    $ " + wide + " \\", "    - " + wide]) == []
    assert docblocks.too_wide(["    $ printf '" + "a b " * 25 + "'"]) == []  # one quoted string
    assert docblocks.too_wide(["  two words " + wide]) == []  # the long word would not fit alone either
    assert docblocks.too_wide(["a " * 50]) == ["a " * 50]
    assert docblocks.too_wide([wide + " " + wide]) == [wide + " " + wide]  # two such tokens: one line each


@pytest.mark.parametrize("extra", [[], ["-v"]])
def test_trace_and_reports_fit_80_columns_with_every_fixture_kind(extra):
    """Beyond the goldens: -v traces (every rule in full) and a report of every kind stay within the rule."""
    for command in (
        "kpdiag trace --bundle fixtures/healthy-iptables --from pod --src 10.244.1.10 --dst 10.96.0.20 --dport 80",
        "kpdiag trace --nft fixtures/healthy-nftables/node/nft-ruleset.json --src 192.168.50.2 --dst 10.96.0.20:80",
        "kpdiag analyze fixtures/svc-ping-ttl-exceeded",
        "kpdiag analyze fixtures/netpol-ingress-denied",
    ):
        code, got = docblocks.run_commands([command + " " + " ".join(extra)])
        assert code in (0, 1, 4, 5), (command, got[-5:])
        assert docblocks.too_wide(got) == [], command


def _max_width(stderr_columns: int | None) -> int:
    """`kpdiag analyze` with stdout into a pipe, stderr on a terminal of ``stderr_columns`` (None: no terminal at
    all), COLUMNS unset: the widest line printed."""
    import fcntl
    import pty
    import struct
    import subprocess
    import sys
    import termios

    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["NO_COLOR"] = "1"
    argv = [sys.executable, "-m", "kpdiag", "analyze", os.path.join(docblocks.ROOT, "fixtures", "ip-forward-off")]
    if stderr_columns is None:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=120)
        out = proc.stdout
    else:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, stderr_columns, 0, 0))
        try:
            proc = subprocess.run(
                argv, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, env=env, timeout=120, text=True
            )
        finally:
            os.close(slave)
            os.close(master)
        out = proc.stdout
    assert proc.returncode == 1, out[-500:]
    return max(len(line) for line in out.splitlines())


def test_piped_output_is_laid_out_at_the_terminal_width_or_80():
    assert 70 < _max_width(None) <= 80  # no terminal anywhere: 80, not 100
    assert 52 < _max_width(60) <= 60  # `kpdiag … | less` in a 60-column window: the window's width


def test_table_cells_never_split_a_number_or_break_a_name_at_its_hyphens():
    from kpdiag.render.report import fit_table

    rows = [
        ["node-g", "ok", "119340/131072", "service-partially-programmed", "ip-10-0-1-23.ec2.internal lags"],
        ["node-h", "failed: timed out after 600 s", "0/262144", "endpoints-disagree", "x"],
    ]
    text = fit_table(rows, ["node", "status", "conntrack", "check", "summary"], width=60)
    cells = text.split()
    for word in ("service-partially-programmed", "ip-10-0-1-23.ec2.internal", "endpoints-disagree", "262144"):
        assert word in cells or f"0/{word}" in cells, (word, text)
    assert "119340/" in cells and "131072" in cells  # broken after the "/", never inside a number
    body = [line for line in text.splitlines() if set(line) - {"-", " "}]  # not the header's rule
    assert not any(line.rstrip().endswith("-") for line in body), text


def _fixture_reports():
    from kpdiag.commands.pipeline import analyze_bundle
    from kpdiag.fleet.aggregate import aggregate_dir, looks_like_report_dir

    root = os.path.join(docblocks.ROOT, "fixtures")
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.isdir(path):
            yield name, aggregate_dir(path, (), ()) if looks_like_report_dir(path) else analyze_bundle(path)


def test_every_fixture_report_fits_80_columns_as_table_and_text():
    """Every fixture's report, -o table and text, with and without -v: no line wider than 80 unless the rule allows
    it (one word longer than a line). A table whose summaries' words do not fit beside the other columns puts each
    summary below its row."""
    from kpdiag.render.report import report_to_table, report_to_text

    wide, seen = [], 0
    for name, report in _fixture_reports():
        seen += 1
        for verbose in (False, True):
            for kind, text in (
                ("table", report_to_table(report, width=80, verbose=verbose)),
                ("text", report_to_text(report, width=80, verbose=verbose)),
            ):
                wide += [(name, kind, verbose, line) for line in docblocks.too_wide(text.splitlines())]
    assert seen > 100
    assert wide == [], wide[:5]


def test_a_table_too_wide_for_its_words_stacks_the_summaries():
    from kpdiag.render.report import report_to_table

    report = dict(_fixture_reports_named("bridge-nf-call-off"))["bridge-nf-call-off"]
    lines = report_to_table(report, width=80, verbose=True).splitlines()
    assert lines[0].split() == ["severity", "id", "check", "subject"]
    assert "    net.bridge.bridge-nf-call-iptables = 0: pod-to-pod traffic on bridge cni0" in lines
    assert max(len(line) for line in lines) <= 80


def _fixture_reports_named(*names):
    from kpdiag.commands.pipeline import analyze_bundle

    for name in names:
        yield name, analyze_bundle(os.path.join(docblocks.ROOT, "fixtures", name))


def test_a_command_broken_after_a_pipe_needs_no_backslash_and_is_still_shell():
    import subprocess

    from kpdiag.render.report import wrap_command

    text = (
        "printf 'net.ipv4.conf.all.rp_filter = 2\\nnet.ipv4.conf.ext1.rp_filter = 2\\n' | "
        "sudo tee /etc/sysctl.d/99-zz-kpdiag-rp-filter.conf >/dev/null && sudo sysctl --system >/dev/null"
    )
    lines = wrap_command(text, 80)
    assert docblocks.too_wide(lines) == [] and any(line.endswith("' |") for line in lines), lines
    script = "\n".join(line.removeprefix("    $ ") for line in lines)
    assert subprocess.run(["bash", "-n", "-c", script]).returncode == 0
    joined = " ".join(line.strip().removeprefix("$ ").removesuffix(" \\") for line in lines)
    assert joined.split() == text.split()
