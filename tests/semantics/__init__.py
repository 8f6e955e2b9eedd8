"""Proof that `neuron-migrate fix` keeps what a training script computes (CPU, and the stand-in `neuron`)."""
