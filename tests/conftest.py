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


def _module_fixture(item) -> bool:
    """Does the test use a module- or session-scoped fixture its own module defines (an image built, a VM booted, a
    server started once for the module)?"""
    info, module = getattr(item, "_fixtureinfo", None), getattr(item, "module", None)
    if info is None or module is None:  # a document's example (sybil) has neither
        return False
    return any(
        d.scope in ("module", "session") and getattr(d.func, "__module__", "") == module.__name__
        for defs in info.name2fixturedefs.values()
        for d in defs
    )


def pytest_collection_modifyitems(config, items):
    """For a parallel run (pytest-xdist, ``--dist loadgroup``): the tests of a module that builds something once for
    the module run on one worker (else each worker would build it again), and the long ones (marked ``long``: a VM,
    an image, a Debian root) are handed out first, so they do not start last and hold the run up."""
    for item in items:
        if _module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable: the order is otherwise kept
