"""CEL selector evaluation over 10,000 devices: the cached path vs a naive per-device evaluation.

The fleet mimics a real one: 1,250 nodes x 8 GPUs of a few models that differ only by uuid and PCI address.
The baseline evaluates every device with the CEL library (activation already built: the best per-device
case); the measured path is ``CompiledSelector.matches`` of a selector built afresh for each run (its generated
fast path, else its closures, else the library behind its projection cache, which then starts cold). Both run
here, in this process, so the ratio holds on a noisy machine. A uuid-reading selector shows the worst case for
the cache (no sharing).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from bench import goals
from gpudra.allocator.cel.selectors import CelDevice, CompiledSelector, cel_device, compile_selector
from gpudra.api.dra import Device

MODELS = [
    ("NVIDIA H100 80GB HBM3", "Hopper", "9.0.0", "80Gi"),
    ("NVIDIA A100-SXM4-40GB", "Ampere", "8.0.0", "40Gi"),
    ("NVIDIA A100-SXM4-80GB", "Ampere", "8.0.0", "80Gi"),
    ("NVIDIA L4", "Ada Lovelace", "8.9.0", "23034Mi"),
]
SELECTORS = {
    "plain": 'device.driver == "gpu.nvidia.com" && '
    'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3" && '
    'device.attributes["gpu.nvidia.com"].type == "gpu"',
    "quantity": 'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu" && '
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0',
    "semver": 'device.driver == "gpu.nvidia.com" && '
    'device.attributes["gpu.nvidia.com"].cudaComputeCapability.isGreaterThan(semver("8.0.0"))',
    "uuid (no sharing)": 'device.attributes["gpu.nvidia.com"].uuid.endsWith("7")',
}


def build_fleet(count: int) -> list[CelDevice]:
    devices = []
    for i in range(count):
        node, index = divmod(i, 8)
        product, arch, cc, memory = MODELS[node % len(MODELS)]
        device = Device.model_validate(
            {
                "name": f"gpu-{index}",
                "attributes": {
                    "type": {"string": "gpu"},
                    "uuid": {"string": f"GPU-{i:08d}"},
                    "productName": {"string": product},
                    "architecture": {"string": arch},
                    "cudaComputeCapability": {"version": cc},
                    "driverVersion": {"version": "550.54.15"},
                    "resource.kubernetes.io/pciBusID": {"string": f"0000:{index:02x}:00.0"},
                },
                "capacity": {"memory": {"value": memory}},
            }
        )
        devices.append(cel_device("gpu.nvidia.com", device))
    return devices


def rate(run: Callable[[], object], evaluations: int, repeat: int) -> float:
    best = min(_timed(run) for _ in range(repeat))
    return evaluations / best


def _timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench.cel", description=__doc__)
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2,000 devices, best of 2 (CI)")
    args, _ = parser.parse_known_args(argv)
    if args.quick:
        args.devices, args.repeat = 2_000, 2
    fleet = build_fleet(args.devices)
    for device in fleet[:1]:
        compile_selector(SELECTORS["plain"]).evaluate_with_library(device)  # warm the environments
    print(f"{len(fleet)} devices; evaluations/s, best of {args.repeat}")
    print(f"{'selector':<20}{'compile ms':>12}{'reference':>14}{'cached (cold)':>16}{'ratio':>9}")
    for label, text in SELECTORS.items():
        compile_selector.cache_clear()
        start = time.perf_counter()
        selector = compile_selector(text)
        compile_ms = (time.perf_counter() - start) * 1000
        for device in fleet:
            selector.evaluate_with_library(device)  # builds every activation once, outside the timing

        def reference(selector: CompiledSelector = selector) -> None:
            for device in fleet:
                selector.evaluate_with_library(device)

        def cached(text: str = text) -> None:
            compiled = compile_selector(text)
            fresh = CompiledSelector(
                text, compiled._program, compiled.reads, compiled._closure, compiled.tree
            )
            for device in fleet:
                fresh.matches(device)

        ref = rate(reference, len(fleet), args.repeat)
        fast = rate(cached, len(fleet), args.repeat)
        verdict = goals.at_least(fast, 1_000_000, "evaluations/s")
        print(f"{label:<20}{compile_ms:>12.2f}{ref:>14,.0f}{fast:>16,.0f}{fast / ref:>8.1f}x  {verdict}")


if __name__ == "__main__":
    main()
