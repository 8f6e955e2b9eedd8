"""neuron-migrate: move PyTorch code from NVIDIA GPUs to AWS Trainium's native `neuron` device."""

__version__ = "0.1.0"
