"""The bundle layer: the source catalogue (sources.py), reading and writing bundles with bounds (store.py),
reading what others wrote as root (safeio.py), secrets scrubbed from every bundle (scrub.py), redaction of names and
addresses (redact.py, with redact_names.py and redact_addr.py)."""
