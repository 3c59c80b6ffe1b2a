"""The simulated NVML under its short name: ``from gpudra.hardware.fake_nvml import FakeNvml``.

The implementation lives in :mod:`gpudra.hardware.simulated` (call surface, MIG rules, events, ctypes types).
"""

from __future__ import annotations

from gpudra.hardware.simulated import SimulatedNode, simulated_backend
from gpudra.hardware.simulated.fake_nvml import FakeNvml

__all__ = ["FakeNvml", "SimulatedNode", "simulated_backend"]
