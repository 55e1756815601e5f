"""The bundle layer: the source catalogue (sources.py), reading and writing bundles with bounds (store.py),
reading what others wrote as root (safeio.py), redaction (redact.py)."""
