"""``gpudra hardware record``: what NVML reports on this node (read-only), or what a simulated node of a profile
reports, as JSON with the devices gpudra would publish from it; to check gpudra against one's own GPUs."""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from importlib import metadata

from gpudra import __version__
from gpudra.errors import ConfigurationError


async def hardware_command(args: argparse.Namespace) -> int:
    # deferred: the NVML binding is loaded only here, and only when no simulated profile is asked for
    from gpudra.devices import build_devices
    from gpudra.hardware.gpus.inventory import NodeInventory
    from gpudra.hardware.nvml.backend import NvmlBackend, load_binding
    from gpudra.hardware.nvml.recording import ReadOnlyNvml, record
    from gpudra.hardware.simulated import FakeNvml

    if args.simulated_profile:
        nvml = FakeNvml.from_profile(args.simulated_profile, node_name=args.node_name)
        binding = f"simulated:{args.simulated_profile}"
    else:
        nvml = load_binding()
        binding = f"nvidia-ml-py {metadata.version('nvidia-ml-py')}"
    backend = NvmlBackend(args.node_name, ReadOnlyNvml(nvml))
    try:
        recording = record(backend)
    finally:
        backend.close()
    recording["recorded_with"] = {
        "gpudra": __version__,
        "binding": binding,
        "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    if "error" not in recording["inventory"]:
        inventory = NodeInventory.model_validate(recording["inventory"])
        # as the API spells them ({"int": 0}); recordings written before said {"int_": 0} and still read
        recording["devices"] = [d.to_wire() for d in build_devices(inventory)]
    text = json.dumps(recording, indent=2, sort_keys=True) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        try:
            args.output.write_text(text)
        except OSError as exc:
            raise ConfigurationError(f"cannot write {args.output}: {exc.strerror}") from exc
    return 0
