"""Device metadata (KEP-5304) in the agent's prepare: the claim's metadata files and the CDI edits that mount them
(the documents come from gpudra.devices.metadata), behind ``GPUDRA_DEVICE_METADATA``.

Like the kubelet-plugin helper of k8s.io/dynamic-resource-allocation, one file per request under the plugin's data
directory, and one CDI device per request that bind-mounts it read-only where the containers look for it; its CDI id
is handed to the kubelet with the request's first device, so every container given that request gets the file.
Unlike the helper, that CDI device lives in the claim's own spec (kind ``k8s.gpu.nvidia.com/claim``, name
``<claimUID>-metadata-<request>``), so it is kept in the checkpoint and rewritten with the spec after a reboot.
Unprepare removes the claim's directory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpudra.agent.atomic_files import write_atomically
from gpudra.agent.cdi import (
    CLAIM_CLASS,
    NVIDIA_VENDOR,
    ContainerEdits,
    Mount,
    claim_device_name,
    qualified_name,
)
from gpudra.agent.prepareplan import ClaimPlan
from gpudra.api.dra import DeviceRequestAllocationResult, ResourceClaim
from gpudra.devices import (
    POD_CLAIM_NAME_ANNOTATION,
    ClaimIdentity,
    MetadataDevice,
    base_request,
    claim_dir,
    container_file,
    device_attributes,
    device_metadata,
    host_file,
)
from gpudra.hardware.gpus.inventory import NodeInventory, PciGpu


def claim_identity(claim: ResourceClaim) -> ClaimIdentity:
    meta = claim.metadata
    return ClaimIdentity(
        namespace=meta.namespace or "",
        name=meta.name or "",
        uid=meta.uid or "",
        pod_claim_name=(meta.annotations or {}).get(POD_CLAIM_NAME_ANNOTATION),
    )


def _metadata_device_name(request: str) -> str:
    return f"metadata-{request}"


def with_device_metadata(
    plan: ClaimPlan,
    claim: ResourceClaim,
    results: Sequence[DeviceRequestAllocationResult],
    inventory: NodeInventory,
    *,
    driver: str,
    data_dir: Path,
    pci_gpus: Sequence[PciGpu] = (),
) -> ClaimPlan:
    """``plan`` with the metadata files of its requests, the CDI devices that mount them, and each request's
    first device also naming that CDI device."""
    identity = claim_identity(claim)
    by_request: dict[str, list[DeviceRequestAllocationResult]] = {}
    for result in results:
        by_request.setdefault(base_request(result.request), []).append(result)
    files: dict[str, bytes] = {}
    cdi_devices: list[dict[str, Any]] = []
    extra_ids: dict[str, str] = {}  # device name of a request's first device -> its metadata CDI id
    for request, chosen in by_request.items():
        devices = [
            MetadataDevice(
                driver,
                r.pool,
                r.device,
                device_attributes(inventory, r.device, plan.configs.get(r.device), pci_gpus),
            )
            for r in chosen
        ]
        document = device_metadata(identity, chosen[0].request, devices)
        path = data_dir / host_file(identity, request)
        files[str(path)] = (json.dumps(document, indent=2) + "\n").encode()
        name = _metadata_device_name(request)
        mount = Mount(str(path), container_file(driver, identity, request), ("ro", "bind"))
        cdi_devices.append(
            {
                "name": claim_device_name(identity.uid, name),
                "containerEdits": ContainerEdits(mounts=[mount]).to_json(),
            }
        )
        extra_ids[chosen[0].device] = qualified_name(
            NVIDIA_VENDOR, CLAIM_CLASS, claim_device_name(identity.uid, name)
        )
    records = tuple(
        d.model_copy(update={"cdi_device_ids": [*d.cdi_device_ids, extra_ids[d.device_name]]})
        if d.device_name in extra_ids
        else d
        for d in plan.devices
    )
    document = {**plan.cdi_document, "devices": [*plan.cdi_document["devices"], *cdi_devices]}
    return replace(plan, devices=records, cdi_document=document, metadata_files=files)


def write_files(files: Mapping[str, bytes]) -> None:
    for path, content in files.items():
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(target, content)


def claim_files_dir(data_dir: Path, namespace: str, name: str) -> Path:
    """A claim's metadata directory (unprepare removes it)."""
    return data_dir / claim_dir(ClaimIdentity(namespace, name, ""))
