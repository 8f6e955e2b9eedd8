"""Differential tests: a safe fix makes the same device calls on (emulated) CUDA as the original code."""
