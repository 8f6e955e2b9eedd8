"""The CI gate: thresholds, allow-lists and a ratcheting baseline, reduced to one exit code."""
