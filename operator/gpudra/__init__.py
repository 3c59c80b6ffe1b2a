"""gpudra: a Kubernetes DRA driver and operator for NVIDIA GPUs."""

__version__ = "0.1.0"
