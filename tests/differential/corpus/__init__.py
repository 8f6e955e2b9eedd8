"""Realistic CUDA-style training-script snippets for the differential tests (each file says what it exercises)."""
