"""``gpudra status``: the fleet's nodes, GPUs, MIG devices, allocated and unhealthy devices, as a table (``-o wide``
adds devices and slices) or as data (``-o json|yaml``)."""

from __future__ import annotations

import argparse
import json
import sys


async def status_command(args: argparse.Namespace) -> int:
    # deferred: the client takes a second to import, and other commands do not need it
    import yaml
    from rich.console import Console

    from gpudra.kube.client import KubeClient
    from gpudra.reports import fleet_table, list_fleet, print_fitted

    client = await KubeClient.from_environment(args.kubeconfig, field_manager="gpudra-status")
    try:
        rows = await list_fleet(client, args.driver_name)
    finally:
        await client.close()
    data = {"nodes": [row.to_data() for row in rows]}
    if args.output == "json":
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    elif args.output == "yaml":
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))
    else:
        print_fitted(Console(), fleet_table(rows, wide=args.output == "wide"))
    return 0
