"""``gpudra sim fault``: a GPU fault or hardware change sent to a simulated node of a running ``gpudra up``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from gpudra.errors import ConfigurationError

# the fault as the command line names it -> as the simulator's endpoint names it
SIM_FAULTS = {
    "xid": "Xid",
    "ecc": "Ecc",
    "gpu-lost": "GpuLost",
    "fabric-lost": "FabricLost",
    "recover": "Recover",
}


async def sim_command(args: argparse.Namespace) -> int:
    # deferred: the simulator's client is only this command's
    from gpudra.cluster.sim.remote import send_fault

    fault: dict[str, Any] = {"nodeName": args.node, "device": args.device, "fault": SIM_FAULTS[args.fault]}
    if args.fault == "xid":
        if args.value is None or not args.value.isdigit():
            raise ConfigurationError("sim fault: xid needs the XID code, e.g. `xid 79`")
        fault["xid"] = int(args.value)
    elif args.fault == "ecc":
        kinds = {None: "EccDoubleBit", "double-bit": "EccDoubleBit", "single-bit": "EccSingleBit"}
        if args.value not in kinds:
            raise ConfigurationError(f"sim fault: ecc takes double-bit or single-bit, not {args.value!r}")
        fault["fault"] = kinds[args.value]
    elif args.value is not None:
        raise ConfigurationError(f"sim fault: {args.fault} takes no value ({args.value!r} given)")
    kubeconfig = args.kubeconfig or Path(os.environ.get("KUBECONFIG") or "gpudra-demo/kubeconfig")
    phase, message = await send_fault(kubeconfig, fault)
    if (
        phase == "Injected" and args.fault == "recover"
    ):  # nothing was injected: what came back, or that nothing did
        print(message[:1].upper() + message[1:])
    else:
        print(f"{phase}: {message}", file=sys.stdout if phase == "Injected" else sys.stderr)
    return {"Injected": 0, "NotHeard": 1}.get(phase, 2)
