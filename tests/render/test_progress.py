"""The progress bar of long runs (kpdiag/render/progress.py): a line every 10 % in a log, one redrawn line on a
terminal that the last call leaves complete and close() ends."""

from __future__ import annotations

import io

from kpdiag.render.progress import ProgressBar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_a_line_each_tenth_and_no_repeats():
    out = io.StringIO()
    bar = ProgressBar(out)
    for done in range(0, 21):
        bar(done=done, total=20, failed=1 if done > 10 else 0, running=20 - done)
    lines = out.getvalue().splitlines()
    assert len(lines) == 11  # 0 %, 10 %, … 100 %
    assert lines[0] == "kpdiag: 0/20 nodes done, 0 failed, 20 pod(s) running"
    assert lines[-1] == "kpdiag: 20/20 nodes done, 1 failed, 0 pod(s) running"
    bar.close()
    assert out.getvalue().count("\n") == 11  # close adds nothing to a log


def test_a_terminal_gets_the_bar_redrawn_in_place_and_a_newline_at_the_end():
    out = Terminal()
    bar = ProgressBar(out, label="pods", width=10)
    bar(done=3, total=3)
    assert out.getvalue() == "\r[##########] 3/3 pods done, 0 failed, 0 pod(s) running\033[K"
    bar.close()
    bar.close()
    assert out.getvalue().endswith("\033[K\n")
    assert out.getvalue().count("\n") == 1


def test_a_total_of_zero_is_not_a_division_by_zero():
    out = io.StringIO()
    ProgressBar(out)(done=0, total=0)
    assert out.getvalue() == "kpdiag: 0/1 nodes done, 0 failed, 0 pod(s) running\n"
