"""Parsers: pure, text in and typed objects out, errors naming the file and line."""
