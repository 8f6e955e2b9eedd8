"""Rendering results: scan output formats, the effort report, SARIF."""
