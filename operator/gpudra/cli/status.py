"""``gpudra status``: the fleet's nodes, GPUs, MIG devices, allocated and unhealthy devices, as a table (``-o wide``
adds devices and slices) or as data (``-o json|yaml``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from gpudra.errors import ConfigurationError

if TYPE_CHECKING:
    from gpudra.kube.client import KubeClient


async def status_command(args: argparse.Namespace) -> int:
    # deferred: the client takes a second to import, and other commands do not need it
    import yaml
    from rich.console import Console

    from gpudra.kube.client import KubeClient
    from gpudra.reports import fleet_table, list_fleet, print_fitted

    client = await KubeClient.from_environment(args.kubeconfig, field_manager="gpudra-status")
    try:
        rows = await list_fleet(client, args.driver_name)
        if not any(row.devices for row in rows):
            await _check_driver(client, args.driver_name)
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


async def _check_driver(client: KubeClient, driver: str) -> None:
    """A driver name no slice carries while others publish is a typo: say which drivers there are."""
    from gpudra.kube.resources import RESOURCE_SLICES

    slices, _ = await client.list(RESOURCE_SLICES)
    drivers = sorted({s.spec.driver for s in slices} - {""})
    if drivers:
        raise ConfigurationError(
            f"no ResourceSlice is published by driver {driver!r}; these drivers publish: {', '.join(drivers)} "
            "(--driver-name picks one)"
        )
