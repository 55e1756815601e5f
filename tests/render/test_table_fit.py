"""fit_table lays its tables out with tabulate without touching tabulate's module state (its MIN_PADDING global, shared
with every other user of tabulate in the process), and the layout stays tabulate's "simple" one."""

from __future__ import annotations

import types

import tabulate

from kpdiag.render.report import fit_table


def _simple(rows, heads) -> str:
    """tabulate's "simple" table whose columns are as wide as their cells (no padding after a header)."""
    saved = tabulate.MIN_PADDING
    try:
        tabulate.MIN_PADDING = 0
        return tabulate.tabulate(rows, headers=heads, tablefmt="simple", disable_numparse=True) + "\n"
    finally:
        tabulate.MIN_PADDING = saved


def test_fit_table_writes_nothing_into_the_tabulate_module(monkeypatch):
    writes: list[str] = []

    class Watched(types.ModuleType):
        def __setattr__(self, name, value):
            writes.append(name)
            super().__setattr__(name, value)

    monkeypatch.setattr(tabulate, "__class__", Watched)  # the real module, its attribute writes recorded
    rows = [["node-a", "10.0.0.1", "ok"], ["node-b", "fd00::1", "1 error"]]
    text = fit_table(rows, ["node", "address", "status"], width=80)
    assert writes == [], writes
    monkeypatch.undo()
    assert text == _simple(rows, ["node", "address", "status"]), text


def test_fit_table_is_tabulates_simple_layout_with_no_header_padding():
    rows = [["a", "0.5", ""], ["1", "KP101", "node/ip-route.json"], ["→ 10.0.0.1", "", "…"]]
    heads = ["path", "probability", "verdict"]
    assert fit_table(rows, heads, width=120) == _simple(rows, heads)
    assert fit_table([], heads, width=120) == _simple([], heads)


def test_a_wrapped_table_keeps_words_whole_and_fits():
    rows = [["node-b-with-a-long-name", "fd00::1", "1 error: node/ip-route.json could not be read"]]
    text = fit_table(rows, ["node", "address", "status"], width=50)
    assert max(len(line) for line in text.splitlines()) <= 50, text
    assert "node-b-with-a-long-name" in text and "fd00::1" in text, text
