import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# kube-proxy's own conformance cases travel with the tests (tests/upstream/README.md)
SHARED = os.environ.get("KPDIAG_SHARED") or os.path.join(ROOT, "tests", "upstream")
FIXTURES = os.path.join(ROOT, "fixtures")
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def lab_or_skip():
    """Skip a lab test with the reason — except under CI=true, where a skip is a failure."""
    from tests.lab.netlab import can_run_lab

    ok, why = can_run_lab()
    if not ok:
        if os.environ.get("CI") == "true":
            pytest.fail(f"lab test cannot run under CI: {why}")
        pytest.skip(why)


@pytest.fixture
def lab():
    lab_or_skip()
    from tests.lab.netlab import Lab

    with Lab() as lab:
        yield lab


@pytest.fixture
def shared_dir():
    if not os.path.isdir(os.path.join(SHARED, "conformance")):
        if os.environ.get("CI") == "true":
            pytest.fail(f"conformance cases not found at {SHARED}")
        pytest.skip(f"conformance cases not found at {SHARED}")
    return SHARED
