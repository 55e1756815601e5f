"""``-o yaml``: the document ``-o json`` prints, as YAML (kubectl users ask for it).

Made from the JSON text itself, so the two cannot differ: ``yaml.safe_load(yaml) == json.loads(json)``. PyYAML comes
with the kubernetes client; it is imported here, when YAML is asked for, never by ``kpdiag --help``. Every string
that is not plain printable ASCII is written double-quoted with escapes (no raw control character, no right-to-left
override, no line break inside a value that would read as a new line of the document), as JSON's escapes do.
"""

from __future__ import annotations

import json


def _dumper():
    import yaml

    base = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # the C emitter when PyYAML has it: a big trace is fast

    class Dumper(base):  # type: ignore[misc, valid-type]
        pass

    def text(dumper, value: str):
        plain = all(" " <= ch <= "~" for ch in value)
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=None if plain else '"')

    Dumper.add_representer(str, text)
    return Dumper


def json_to_yaml(json_text: str) -> str:
    """The JSON document ``json_text`` (what a ``*_to_json`` renderer returned) as a YAML document."""
    import yaml

    doc = json.loads(json_text)
    return yaml.dump(doc, Dumper=_dumper(), sort_keys=False, allow_unicode=False, default_flow_style=False, width=120)
