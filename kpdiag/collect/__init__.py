"""Collectors: what a live node, the API server and active probes show, written into a bundle exactly as the standard
commands print it, read-only."""
