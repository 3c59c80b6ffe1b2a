"""A read-only recording of what NVML reports about a node's GPUs (``gpudra hardware record``).

The recording is what tests/fixtures/nvml/ holds and what the GPU catalog is checked against: the raw answers
of NVML's query calls (device facts, every GPU-instance profile constant with its placements, the MIG and
compute instances that already exist) next to what gpudra's :class:`NvmlBackend` makes of them.

Safety: the recorder never changes a GPU. It talks to NVML only through :class:`ReadOnlyNvml`, which lets
through NVML's query calls (``nvml<Object>Get*`` / ``Is*``) plus init and shutdown, and refuses every other
call before it reaches the driver. Every reading that fails is recorded as the NVML error's name, so one
unsupported query never spoils the rest.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from typing import Any

from gpudra.errors import GpudraError, HardwareError
from gpudra.hardware.nvml.backend import NvmlBackend
from gpudra.hardware.nvml.gpu import ADDRESSING_MODES, ARCHITECTURE_NAMES, BRAND_NAMES

RECORDING_FORMAT = 1
MIB = 2**20

_QUERY = re.compile(r"^nvml(System|Device|GpuInstance|ComputeInstance)(Get|Is)[A-Z]\w*$")
_LIFECYCLE = frozenset({"nvmlInit", "nvmlInitWithFlags", "nvmlShutdown"})
_CI_NEEDS_GI = (
    "not readable: NVML reads compute-instance profiles from an existing GPU instance of this profile"
)


class ReadOnlyViolation(GpudraError):
    """The recorder (or code it runs) tried an NVML call that could change a GPU."""


class ReadOnlyNvml:
    """An NVML binding that answers only query calls; constants, types and error classes pass through."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml

    def __getattr__(self, name: str) -> Any:
        if name.startswith("nvml") and name not in _LIFECYCLE and not _QUERY.match(name):
            raise ReadOnlyViolation(f"{name} could change the GPU; the NVML recorder only reads")
        return getattr(self._nvml, name)

    def __dir__(self) -> list[str]:
        return [n for n in dir(self._nvml) if not n.startswith("nvml") or n in _LIFECYCLE or _QUERY.match(n)]


class _Recorder:
    def __init__(self, backend: NvmlBackend) -> None:
        self._backend = backend
        self._nvml = backend.nvml

    # -- one reading -----------------------------------------------------------------------------------------

    def read(self, function_name: str, *args: Any, convert: Callable[[Any], Any] = lambda v: v) -> Any:
        """``convert(nvml.<function_name>(*args))``, or ``{"error": <NVML error name>}``."""
        function = getattr(self._nvml, function_name, None)
        if function is None:
            return {"error": "FUNCTION_NOT_IN_BINDING"}
        try:
            return convert(function(*args))
        except self._nvml.NVMLError as exc:
            return {"error": self._backend.error_code(exc)}

    def _filled(self, function_name: str, struct_name: str, *args: Any) -> Any:
        """Call a function that fills a structure passed by reference; the structure, or the error."""
        struct = getattr(self._nvml, struct_name, None)
        if struct is None:
            return {"error": "FUNCTION_NOT_IN_BINDING"}
        value = struct()
        failed = self.read(function_name, *args, ctypes.byref(value))
        return failed if isinstance(failed, dict) else value

    def _array(self, function_name: str, item_struct: str, *args: Any, size: int) -> Any:
        """Call a function that fills an array and a count; the filled items, or the error."""
        count = ctypes.c_uint(max(size, 1))
        array = (getattr(self._nvml, item_struct) * count.value)()
        failed = self.read(function_name, *args, array, ctypes.byref(count))
        return failed if isinstance(failed, dict) else [array[i] for i in range(count.value)]

    # -- the whole node ----------------------------------------------------------------------------------------

    def system(self) -> dict[str, Any]:
        return {
            "driver_version": self.read("nvmlSystemGetDriverVersion", convert=_text),
            "nvml_version": self.read("nvmlSystemGetNVMLVersion", convert=_text),
            "cuda_driver_version": self.read("nvmlSystemGetCudaDriverVersion", convert=int),
            "gpu_count": self.read("nvmlDeviceGetCount", convert=int),
        }

    def gpu(self, index: int) -> dict[str, Any]:
        handle = self.read("nvmlDeviceGetHandleByIndex", index)
        if isinstance(handle, dict):
            return {"index": index, **handle}
        mig_mode = self.read("nvmlDeviceGetMigMode", handle, convert=lambda m: [int(m[0]), int(m[1])])
        mig_on = isinstance(mig_mode, list) and bool(mig_mode[0])
        profiles = [self._gi_profile(handle, name, constant) for name, constant in self._gi_constants()]
        instances = self._gpu_instances(handle, profiles) if mig_on else "not read: MIG mode is off"
        return {
            "index": index,
            "name": self.read("nvmlDeviceGetName", handle, convert=_text),
            "uuid": self.read("nvmlDeviceGetUUID", handle, convert=_text),
            "brand": self.read("nvmlDeviceGetBrand", handle, convert=_named(BRAND_NAMES)),
            "architecture": self.read(
                "nvmlDeviceGetArchitecture", handle, convert=_named(ARCHITECTURE_NAMES)
            ),
            "cuda_compute_capability": self.read(
                "nvmlDeviceGetCudaComputeCapability", handle, convert=lambda c: f"{c[0]}.{c[1]}"
            ),
            "memory_total_bytes": self.read(
                "nvmlDeviceGetMemoryInfo", handle, convert=lambda m: int(m.total)
            ),
            "pci": self.read("nvmlDeviceGetPciInfo", handle, convert=_pci),
            "minor_number": self.read("nvmlDeviceGetMinorNumber", handle, convert=int),
            "numa_node": self.read("nvmlDeviceGetNumaNodeId", handle, convert=int),
            "addressing_mode": self.read(
                "nvmlDeviceGetAddressingMode", handle, convert=_named(ADDRESSING_MODES)
            ),
            "virtualization_mode": self.read("nvmlDeviceGetVirtualizationMode", handle, convert=int),
            "compute_mode": self.read("nvmlDeviceGetComputeMode", handle, convert=int),
            "attributes": self.read("nvmlDeviceGetAttributes", handle, convert=_fields),
            "nvlink_link_count": self._nvlink_count(handle),
            "fabric": self._fabric(handle),
            "mig_mode": {"current": mig_mode[0], "pending": mig_mode[1]}
            if isinstance(mig_mode, list)
            else mig_mode,
            "max_mig_device_count": self.read("nvmlDeviceGetMaxMigDeviceCount", handle, convert=int),
            "gpu_instance_profiles": profiles,
            "gpu_instances": instances,
        }

    # -- device details ----------------------------------------------------------------------------------------

    def _nvlink_count(self, handle: Any) -> Any:
        field = getattr(self._nvml, "NVML_FI_DEV_NVLINK_LINK_COUNT", None)
        if field is None:
            return {"error": "FUNCTION_NOT_IN_BINDING"}
        values = self.read("nvmlDeviceGetFieldValues", handle, [field])
        if isinstance(values, dict):
            return values
        code = int(values[0].nvmlReturn)
        return {
            "return": self._backend.code_name(code),
            "value": int(values[0].value.uiVal) if code == 0 else None,
        }

    def _fabric(self, handle: Any) -> Any:
        info = self._filled("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t", handle)
        if isinstance(info, dict):
            return info
        cluster = bytes(info.clusterUuid)
        return {
            "state": int(info.state),
            "status": int(info.status),
            "clique_id": int(info.cliqueId),
            "cluster_uuid_is_zero": not any(cluster),
            "health_mask": int(getattr(info, "healthMask", 0)),
        }

    # -- MIG -------------------------------------------------------------------------------------------------

    def _gi_constants(self) -> list[tuple[str, int]]:
        return self._constants("GPU")

    def _gi_profile(self, handle: Any, constant_name: str, constant: int) -> dict[str, Any]:
        entry: dict[str, Any] = {"constant": constant, "constant_name": constant_name}
        info = self.read("nvmlDeviceGetGpuInstanceProfileInfo", handle, constant)
        if isinstance(info, dict):
            return {**entry, **info}
        entry["info"] = _fields(info)
        placements = self._array(
            "nvmlDeviceGetGpuInstancePossiblePlacements",
            "c_nvmlGpuInstancePlacement_t",
            handle,
            int(info.id),
            size=int(info.instanceCount) * 8,
        )
        entry["placements"] = (
            placements if isinstance(placements, dict) else [_placement(p) for p in placements]
        )
        entry["remaining_capacity"] = self.read(
            "nvmlDeviceGetGpuInstanceRemainingCapacity", handle, int(info.id), convert=int
        )
        return entry

    def _gpu_instances(self, handle: Any, profiles: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The GPU instances that exist, each with its compute-instance profiles and compute instances."""
        found = []
        for profile in profiles:
            if "info" not in profile:
                continue
            info = profile["info"]
            gis = self._array(
                "nvmlDeviceGetGpuInstances",
                "c_nvmlGpuInstance_t",
                handle,
                info["id"],
                size=info["instanceCount"],
            )
            if isinstance(gis, dict):
                found.append({"profile_id": info["id"], **gis})
                continue
            found.extend(self._gpu_instance(gi) for gi in gis)
        return found

    def _gpu_instance(self, gi: Any) -> dict[str, Any]:
        info = self._nvml.nvmlGpuInstanceGetInfo(gi)
        ci_profiles, instances = [], []
        engine = int(getattr(self._nvml, "NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED", 0))
        for name, constant in self._ci_constants():
            ci = self.read("nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, constant, engine)
            if isinstance(ci, dict):
                ci_profiles.append({"constant": constant, "constant_name": name, **ci})
                continue
            ci_profiles.append({"constant": constant, "constant_name": name, "info": _fields(ci)})
            cis = self._array(
                "nvmlGpuInstanceGetComputeInstances", "c_nvmlComputeInstance_t", gi, int(ci.id), size=8
            )
            for handle in cis if isinstance(cis, list) else []:
                ci_info = self._nvml.nvmlComputeInstanceGetInfo(handle)
                instances.append(
                    {
                        "id": int(ci_info.id),
                        "profile_id": int(ci_info.profileId),
                        **_placement(ci_info.placement),
                    }
                )
        return {
            "id": int(info.id),
            "profile_id": int(info.profileId),
            **_placement(info.placement),
            "compute_instance_profiles": ci_profiles,
            "compute_instances": instances,
        }

    def _ci_constants(self) -> list[tuple[str, int]]:
        return self._constants("COMPUTE")

    def _constants(self, kind: str) -> list[tuple[str, int]]:
        """The binding's NVML_<kind>_INSTANCE_PROFILE_<n>_SLICE* constants by value (the first name of each)."""
        pattern = re.compile(rf"^NVML_{kind}_INSTANCE_PROFILE_\d+_SLICE\w*$")
        by_value: dict[int, str] = {}
        for name in sorted(n for n in dir(self._nvml) if pattern.match(n)):
            by_value.setdefault(int(getattr(self._nvml, name)), name)
        return [(name, value) for value, name in sorted(by_value.items())]


def record(backend: NvmlBackend) -> dict[str, Any]:
    """Everything the recorder reads, as JSON-ready data. The backend should hold a :class:`ReadOnlyNvml`."""
    recorder = _Recorder(backend)
    system = recorder.system()
    count = system["gpu_count"] if isinstance(system["gpu_count"], int) else 0
    gpus = []
    for index in range(count):
        gpu = recorder.gpu(index)
        gpu["compute_instance_profiles"] = _ci_profiles_by_gi_profile(gpu)
        gpus.append(gpu)
    recording: dict[str, Any] = {"format": RECORDING_FORMAT, "system": system, "gpus": gpus}
    try:
        recording["inventory"] = backend.read_inventory().model_dump(mode="json")
    except HardwareError as exc:
        recording["inventory"] = {"error": str(exc)}
    recording["mig_profiles"] = {}
    for index in range(count):
        try:
            profiles = [p.model_dump(mode="json") for p in backend.mig_profiles(index)]
        except HardwareError as exc:
            recording["mig_profiles"][str(index)] = {"error": str(exc)}
        else:
            recording["mig_profiles"][str(index)] = profiles
    return recording


def _ci_profiles_by_gi_profile(gpu: dict[str, Any]) -> dict[str, Any]:
    """Compute-instance profiles per GPU-instance profile id, read from the first existing instance of each."""
    instances = gpu.get("gpu_instances")
    instances = instances if isinstance(instances, list) else []
    by_profile: dict[str, Any] = {}
    for profile in gpu.get("gpu_instance_profiles", []):
        if "info" not in profile:
            continue
        profile_id = profile["info"]["id"]
        gi = next((g for g in instances if g.get("profile_id") == profile_id and "id" in g), None)
        by_profile[str(profile_id)] = gi["compute_instance_profiles"] if gi else _CI_NEEDS_GI
    return by_profile


# -- conversions -------------------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _named(names: dict[int, str]) -> Callable[[Any], dict[str, Any]]:
    return lambda value: {"value": int(value), "name": names.get(int(value))}


def _fields(struct: Any) -> dict[str, Any]:
    """A ctypes structure's scalar fields (text decoded; handles, versions and nested structures left out)."""
    result: dict[str, Any] = {}
    for name, *_ in struct._fields_:
        value = getattr(struct, name)
        if name == "version" or isinstance(value, ctypes.Structure | ctypes.Array):
            continue
        result[name] = _text(value) if isinstance(value, bytes) else value
    return result


def _placement(placement: Any) -> dict[str, int]:
    return {"start": int(placement.start), "size": int(placement.size)}


def _pci(info: Any) -> dict[str, Any]:
    return {
        "bus_id": _text(info.busId),
        "device_id": int(info.pciDeviceId),
        "subsystem_id": int(info.pciSubSystemId),
    }
