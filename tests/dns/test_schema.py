"""probes/dns.json (kpdiag.dns/v1) against kpdiag/schemas/dns.schema.json: every recorded fixture and fresh documents."""

import glob
import json
import os

import jsonschema
import pytest

from kpdiag.collect import dns
from tests.conftest import FIXTURES, ROOT


def _validator():
    with open(os.path.join(ROOT, "kpdiag", "schemas", "dns.schema.json")) as fh:
        return jsonschema.Draft202012Validator(json.load(fh))


NEW = [
    p for p in sorted(glob.glob(os.path.join(FIXTURES, "*", "probes", "dns.json"))) if "kpdiag.dns/v1" in open(p).read()
]


def test_there_are_recorded_documents():
    assert len(NEW) >= 13


@pytest.mark.parametrize("path", NEW, ids=[p.split(os.sep)[-3] for p in NEW])
def test_recorded_documents_validate(path):
    with open(path) as fh:
        _validator().validate(json.load(fh))


def test_not_probed_and_unreadable_resolv_conf_validate(tmp_path):
    _validator().validate(dns.dns_probe("shop", "web", resolv_conf=str(tmp_path), send=False))
    rc = tmp_path / "resolv.conf"
    rc.write_text("nameserver 127.0.0.70\nsearch a.svc.cluster.local svc.cluster.local\n")
    doc = dns.dns_probe("a", "b", resolv_conf=str(rc), send=False)
    _validator().validate(doc)
    bad = dict(doc, result="maybe")
    with pytest.raises(jsonschema.ValidationError):
        _validator().validate(bad)
