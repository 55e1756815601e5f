"""Renderers: a report, a trace, a policy answer or the catalogue turned into a string; every value that came from a
bundle, the API or a node goes through safe.py's ``term``."""
