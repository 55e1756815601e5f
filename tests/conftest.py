import os
import sys

import pytest

# The tests start kpdiag (and Python) in a subprocess thousands of times: each would compile kpdiag again where the
# environment says not to cache bytecode (PYTHONDONTWRITEBYTECODE), a third of a second a start. The test run lets
# Python cache it (__pycache__ is ignored by git and left out of the wheel, the zipapp and the image).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

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


def pytest_collection_modifyitems(config, items):
    """The long tests (marked ``long``: a VM, an image, a Debian root) are handed out first in a parallel run, so they
    do not start last and hold the run up."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable: the order is otherwise kept
