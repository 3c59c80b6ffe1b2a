"""FakeNvml: the pynvml call surface over simulated GPUs.

An instance stands in for the ``pynvml`` module: its methods have pynvml's names, arguments and return shapes
(ctypes structures, out-parameter arrays filled through ``byref`` counts), its attributes are pynvml's
constants, error classes and structure types. So :class:`gpudra.hardware.nvml.backend.NvmlBackend` runs the same code
on it as on a real GPU. The MIG rules live in :mod:`gpu_state`, event sets in :mod:`events`.

Test hooks (not NVML calls): :meth:`inject_xid`, :meth:`inject_ecc`, :meth:`lose_gpu` / :meth:`restore_gpu`,
:meth:`reset_gpu`,
:meth:`lose_fabric` / :meth:`restore_fabric` (a GB200 tray leaving its NVLink fabric),
:meth:`set_processes`, :meth:`require_reset_for_mig_change`,
:meth:`inject_call` / :meth:`clear_injections` (any NVML call raises an error or answers a value of the test's
choice, for one GPU or all), :meth:`gpu`, :meth:`gpu_count`, :meth:`fabric_state`,
:meth:`set_time_slice` (the
``nvidia-smi compute-policy`` stand-in); and :meth:`pcie_root_of`, the stand-in for the sysfs lookup the backend
does on a real machine.

All calls take one re-entrant lock, so an agent thread may read while a test mutates."""

from __future__ import annotations

import ctypes
import dataclasses
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from gpudra.hardware.gpus.catalog import Catalog, load_catalog
from gpudra.hardware.simulated import nvml_types as t
from gpudra.hardware.simulated.events import WHOLE_GPU, SimEvent
from gpudra.hardware.simulated.fake_nvml_base import deref, handle_contents, locked
from gpudra.hardware.simulated.fake_nvml_mig import MigCalls
from gpudra.hardware.simulated.gpu_state import SimulatedGpu
from gpudra.hardware.simulated.machine import MachineSpec, machine_of_profile
from gpudra.hardware.simulated.pcibus import SimulatedPciBus
from gpudra.hardware.simulated.profiles import NodeProfile, node_profile

_ADDRESSING_MODES = {
    "None": t.NVML_DEVICE_ADDRESSING_MODE_NONE,
    "HMM": t.NVML_DEVICE_ADDRESSING_MODE_HMM,
    "ATS": t.NVML_DEVICE_ADDRESSING_MODE_ATS,
}
_SUPPORTED_EVENTS = (
    t.nvmlEventTypeSingleBitEccError | t.nvmlEventTypeDoubleBitEccError | t.nvmlEventTypeXidCriticalError
)


class FakeNvml(MigCalls):
    """A simulated NVML library for one node."""

    @classmethod
    def from_profile(
        cls, profile: str | NodeProfile, node_name: str, fleet_index: int = 0, catalog: Catalog | None = None
    ) -> FakeNvml:
        """A node of the profile; UUIDs derive from ``node_name``, NVLink cliques from ``fleet_index``."""
        node = node_profile(profile) if isinstance(profile, str) else profile
        return cls.from_machine(machine_of_profile(node, node_name, fleet_index), catalog)

    @classmethod
    def from_machine(cls, machine: MachineSpec, catalog: Catalog | None = None) -> FakeNvml:
        """A node holding the machine's GPUs, with their MIG devices created."""
        models = catalog or load_catalog()
        brought = {m.model_id: m for m in machine.models}
        gpus = []
        island_of = {gpu: island for island, members in enumerate(machine.nvlink_islands) for gpu in members}
        for index, spec in enumerate(machine.gpus):
            model = brought.get(spec.model_id) or models.model(spec.model_id)
            if spec.nvlink_count is not None:
                model = model.model_copy(update={"nvlink_count": spec.nvlink_count})
            gpu = SimulatedGpu(
                index=index,
                model=model,
                minor=spec.minor,
                gpu_uuid=spec.uuid,
                slot=spec.slot,
                fabric=spec.fabric,
                addressing_mode=spec.addressing_mode,
            )
            gpu.nvlink_island = island_of.get(index)
            gpu.mig_current = spec.mig_enabled
            gpu.mig_pending = spec.mig_enabled if spec.mig_pending is None else spec.mig_pending
            for instance in spec.mig_devices:
                mig_profile = gpu.mig_spec().profile(instance.profile)
                gi = gpu.create_gpu_instance(
                    mig_profile.profile_id, (instance.start, mig_profile.placement_size)
                )
                ci = gpu.create_compute_instance(gi, mig_profile.full_compute_instance().constant)
                if instance.uuid is not None:
                    ci.uuid = instance.uuid
            gpus.append(gpu)
        return cls(
            gpus, driver_version=machine.driver_version, cuda_driver_version=machine.cuda_driver_version
        )

    def __getattr__(self, name: str) -> Any:
        """pynvml's constants, error classes and structure types (``nvml.NVML_ERROR_IN_USE``, ...)."""
        if name.startswith(("NVML", "nvml", "c_nvml", "struct_c_nvml")):
            try:
                return getattr(t, name)
            except AttributeError:
                pass
        raise AttributeError(f"FakeNvml has no attribute {name!r}")

    def __dir__(self) -> list[str]:
        """Like ``dir(pynvml)``: the methods plus the constants and types served by :meth:`__getattr__`."""
        served = (n for n in dir(t) if n.startswith(("NVML", "nvml", "c_nvml", "struct_c_nvml")))
        return sorted({*super().__dir__(), *served})

    # -- test hooks ------------------------------------------------------------------------------------------

    def gpu(self, index: int) -> SimulatedGpu:
        """The simulated GPU at position ``index`` on the PCI bus (for inspection; mutate it only through the
        hooks). Every hook names a GPU by this position, which is its NVML index while all the node's GPUs are
        on the nvidia driver and stays the GPU's own while another one is bound to vfio-pci."""
        return self._all[index]

    def gpu_count(self) -> int:
        """How many GPUs the node has, lost ones and those bound to vfio-pci included (no nvmlInit needed)."""
        return len(self._all)

    def fabric_state(self, gpu_index: int) -> int | None:
        """The GPU's NVLink fabric state (NVML_GPU_FABRIC_STATE_*), None without fabric information."""
        with self._lock:
            fabric = self._all[gpu_index].fabric
            return None if fabric is None else fabric.state

    def inject_xid(self, gpu_index: int, xid: int, gi_id: int = WHOLE_GPU, ci_id: int = WHOLE_GPU) -> int:
        """An XID error on the GPU (or one MIG device); returns how many event sets received it."""
        return self._events.publish(SimEvent(gpu_index, t.nvmlEventTypeXidCriticalError, xid, gi_id, ci_id))

    def inject_ecc(self, gpu_index: int, *, double_bit: bool = True) -> int:
        kind = t.nvmlEventTypeDoubleBitEccError if double_bit else t.nvmlEventTypeSingleBitEccError
        return self._events.publish(SimEvent(gpu_index, kind, 0))

    def set_event_listener(self, listener: Callable[[], None] | None) -> None:
        """Not NVML's: ``listener`` is called whenever an event or a lost GPU may be waiting on an event set (the
        simulated nodes' health watch then reads it without a thread blocked in nvmlEventSetWait)."""
        self._events.listener = listener

    def lose_gpu(self, gpu_index: int) -> None:
        """The GPU falls off the bus: every call on it fails GPU_IS_LOST, and so does the next event wait."""
        with self._lock:
            self._all[gpu_index].lost = True
            self._events.gpu_lost(gpu_index)
            self._persist()

    def restore_gpu(self, gpu_index: int) -> None:
        """A lost GPU answers again (a reset or a reboot put it back on the bus), in the state it was lost in."""
        with self._lock:
            self._all[gpu_index].lost = False
            self._persist()

    def lose_fabric(self, gpu_index: int | None = None) -> None:
        """The GPU (every GPU when None) drops out of its NVLink fabric: fabric info then reports state
        NOT_STARTED with a non-success status, as while the fabric manager re-registers the GPU. The cluster
        UUID and clique id are kept, so :meth:`restore_fabric` brings the same clique back."""
        with self._lock:
            for gpu in self._all if gpu_index is None else [self._all[gpu_index]]:
                if gpu.fabric is not None:
                    gpu.fabric = dataclasses.replace(
                        gpu.fabric, state=t.NVML_GPU_FABRIC_STATE_NOT_STARTED, status=t.NVML_ERROR_UNKNOWN
                    )
            self._persist()

    def restore_fabric(self, gpu_index: int | None = None) -> None:
        """Fabric registration completed again (state COMPLETED, status SUCCESS)."""
        with self._lock:
            for gpu in self._all if gpu_index is None else [self._all[gpu_index]]:
                if gpu.fabric is not None:
                    gpu.fabric = dataclasses.replace(
                        gpu.fabric, state=t.NVML_GPU_FABRIC_STATE_COMPLETED, status=t.NVML_SUCCESS
                    )
            self._persist()

    def reset_gpu(self, gpu_index: int) -> None:
        """nvidia-smi -r: the pending MIG mode takes effect (raises NVMLError_InUse while processes run)."""
        with self._lock:
            self._all[gpu_index].reset()
            self._persist()

    def set_processes(self, gpu_index: int, count: int) -> None:
        """Pretend ``count`` processes use the GPU (MIG mode changes then wait for a reset)."""
        with self._lock:
            self._all[gpu_index].processes = count
            self._persist()

    def require_reset_for_mig_change(self, gpu_index: int, required: bool = True) -> None:
        with self._lock:
            self._all[gpu_index].reset_required_for_mig_change = required
            self._persist()

    @locked
    def set_time_slice(self, gpu_uuid: str, interval: int) -> None:
        """Stand-in for ``nvidia-smi compute-policy -i <uuid> --set-timeslice=<interval>`` (no NVML call)."""
        gpu = self._full_gpu(self.nvmlDeviceGetHandleByUUID(gpu_uuid))
        gpu.check_alive()
        gpu.time_slice = interval

    def pcie_root_of(self, pci_bus_id: str) -> str | None:
        """Stand-in for resolving /sys/bus/pci/devices/<bus id> to its root complex ("pci0000:15")."""
        wanted = pci_bus_id.lower()[-12:]
        return next((g.slot.pcie_root for g in self._all if g.slot.pci_bus_id == wanted), None)

    @property
    def pci_bus(self) -> SimulatedPciBus:
        """Stand-in for sysfs' /sys/bus/pci: the drivers GPUs are bound to (passthrough)."""
        return SimulatedPciBus(self)

    # -- library and system ----------------------------------------------------------------------------------

    @locked
    def nvmlInit(self) -> None:
        self._init_count += 1

    @locked
    def nvmlShutdown(self) -> None:
        self._init_count -= 1

    @locked
    def nvmlSystemGetDriverVersion(self) -> str:
        return self._driver_version

    @locked
    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self._cuda_driver_version

    @locked
    def nvmlSystemGetNVMLVersion(self) -> str:
        """ "13.580.159.04": the CUDA major version, then the driver version."""
        return f"{self._cuda_driver_version // 1000}.{self._driver_version}"

    # -- devices ---------------------------------------------------------------------------------------------

    @locked
    def nvmlDeviceGetCount(self) -> int:
        return len(self._gpus)

    @locked
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not 0 <= index < len(self._gpus):
            raise t.NVMLError_InvalidArgument(f"GPU index {index} out of range (count {len(self._gpus)})")
        return self._device_handle(self._gpus[index].index)

    @locked
    def nvmlDeviceGetHandleByUUID(self, device_uuid: str | bytes) -> Any:
        wanted = device_uuid.decode() if isinstance(device_uuid, bytes) else device_uuid
        for gpu in self._gpus:
            if gpu.uuid == wanted:
                gpu.check_alive()
                return self._device_handle(gpu.index)
            for gi in gpu.gpu_instances.values():
                for ci in gi.cis.values():
                    if ci.uuid == wanted:
                        return self._device_handle(gpu.index, ci.serial)
        raise t.NVMLError_NotFound(f"no device with UUID {wanted}")

    @locked
    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        gpu, mig = self._resolve(handle)
        return gpu.uuid if mig is None else mig[1].uuid

    @locked
    def nvmlDeviceGetName(self, handle: Any) -> str:
        gpu, mig = self._resolve(handle)
        if mig is None:
            return gpu.model.product_name
        return f"{gpu.model.product_name} MIG {mig[0].profile.name}"

    @locked
    def nvmlDeviceGetBrand(self, handle: Any) -> int:
        return self._resolve(handle)[0].model.brand_constant

    @locked
    def nvmlDeviceGetArchitecture(self, handle: Any) -> int:
        return self._resolve(handle)[0].model.architecture_constant

    @locked
    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        major, minor = self._resolve(handle)[0].model.compute_capability.split(".")
        return int(major), int(minor)

    @locked
    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        gpu, mig = self._resolve(handle)
        total = gpu.model.memory_bytes if mig is None else mig[0].profile.memory_bytes
        return t.c_nvmlMemory_t(total, total, 0)

    @locked
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        gpu = self._resolve(handle)[0]
        domain, bus, rest = gpu.slot.pci_bus_id.split(":")
        device = int(rest.split(".")[0], 16)
        info = t.nvmlPciInfo_t()
        info.busIdLegacy = f"{int(domain, 16):04X}:{int(bus, 16):02X}:{device:02X}.0"
        info.busId = f"{int(domain, 16):08X}:{int(bus, 16):02X}:{device:02X}.0"
        info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), device
        info.pciDeviceId = gpu.model.pci_device_id
        info.pciSubSystemId = 0
        return info

    nvmlDeviceGetPciInfo_v3 = nvmlDeviceGetPciInfo

    @locked
    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        return self._full_gpu(handle).minor

    @locked
    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        numa_node = self._full_gpu(handle).slot.numa_node
        if numa_node is None:
            raise t.NVMLError_NotSupported("the NUMA node is not reported on this machine")
        return numa_node

    @locked
    def nvmlDeviceGetAddressingMode(self, handle: Any) -> int:
        gpu = self._full_gpu(handle)
        if gpu.addressing_mode is None:
            raise t.NVMLError_NotSupported("addressing mode is not reported on this platform")
        return _ADDRESSING_MODES[gpu.addressing_mode]

    @locked
    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: Sequence[int | tuple[int, int]]) -> Any:
        gpu = self._full_gpu(handle)
        values = (t.c_nvmlFieldValue_t * len(field_ids))()
        for i, field_id in enumerate(field_ids):
            fid, scope = field_id if isinstance(field_id, tuple) else (field_id, 0)
            values[i].fieldId, values[i].scopeId = fid, scope
            if fid == t.NVML_FI_DEV_NVLINK_LINK_COUNT and gpu.model.nvlink_count > 0:
                values[i].valueType = t.NVML_VALUE_TYPE_UNSIGNED_INT
                values[i].value.uiVal = gpu.model.nvlink_count
                values[i].nvmlReturn = t.NVML_SUCCESS
            else:
                values[i].nvmlReturn = t.NVML_ERROR_NOT_SUPPORTED
        return values

    @locked
    def nvmlDeviceGetP2PStatus(self, handle1: Any, handle2: Any, p2p_index: int) -> int:
        """NVLink (NVML_P2P_CAPS_INDEX_NVLINK) as the machine's NVLink islands say; the other capabilities
        (read, write, atomics, PCI) are not modelled and answer NVML_P2P_STATUS_NOT_SUPPORTED."""
        first, second = self._full_gpu(handle1), self._full_gpu(handle2)
        if p2p_index != t.NVML_P2P_CAPS_INDEX_NVLINK or first.nvlink_island is None:
            return t.NVML_P2P_STATUS_NOT_SUPPORTED
        return (
            t.NVML_P2P_STATUS_OK
            if first.nvlink_island == second.nvlink_island
            else t.NVML_P2P_STATUS_NOT_SUPPORTED
        )

    def _fill_fabric(self, handle: Any, info_ref: Any) -> None:
        gpu = self._full_gpu(handle)
        if gpu.fabric is None:
            raise t.NVMLError_NotSupported(f"{gpu.model.product_name} has no NVLink fabric information")
        info = deref(info_ref)
        for i, byte in enumerate(uuid.UUID(gpu.fabric.cluster_uuid).bytes):
            info.clusterUuid[i] = byte
        info.status, info.cliqueId, info.state = gpu.fabric.status, gpu.fabric.clique_id, gpu.fabric.state
        if hasattr(info, "healthMask"):
            info.healthMask = 0

    @locked
    def nvmlDeviceGetGpuFabricInfoV(self, handle: Any, info_ref: Any) -> int:
        self._fill_fabric(handle, info_ref)
        return t.NVML_SUCCESS

    @locked
    def nvmlDeviceGetGpuFabricInfo(self, handle: Any, info_ref: Any) -> int:
        self._fill_fabric(handle, info_ref)
        return t.NVML_SUCCESS

    @locked
    def nvmlDeviceGetAttributes(self, handle: Any) -> Any:
        """MIG device handles only, as NVML documents and a recorded H100 / H200 show (NOT_SUPPORTED on the GPU)."""
        _, mig = self._resolve(handle)
        if mig is None:
            raise t.NVMLError_NotSupported("nvmlDeviceGetAttributes supports MIG device handles only")
        attrs = t.c_nvmlDeviceAttributes()
        gi, ci = mig
        attrs.multiprocessorCount = ci.profile.multiprocessors
        attrs.sharedCopyEngineCount = gi.profile.copy_engines
        attrs.sharedDecoderCount = gi.profile.decoders
        attrs.sharedEncoderCount = gi.profile.encoders
        attrs.sharedJpegCount = gi.profile.jpeg_engines
        attrs.sharedOfaCount = gi.profile.ofa_engines
        attrs.gpuInstanceSliceCount = gi.profile.slice_count
        attrs.computeInstanceSliceCount = ci.profile.slice_count
        attrs.memorySizeMB = gi.profile.memory_mib
        return attrs

    nvmlDeviceGetAttributes_v2 = nvmlDeviceGetAttributes

    # -- compute mode (MPS sharing) ----------------------------------------------------------------------------

    @locked
    def nvmlDeviceGetComputeMode(self, handle: Any) -> int:
        gpu = self._full_gpu(handle)
        gpu.check_alive()
        return gpu.compute_mode

    @locked
    def nvmlDeviceSetComputeMode(self, handle: Any, mode: int) -> None:
        gpu = self._full_gpu(handle)
        gpu.check_alive()
        if not 0 <= mode < t.NVML_COMPUTEMODE_COUNT:
            raise t.NVMLError_InvalidArgument(f"compute mode {mode} is not an NVML compute mode")
        gpu.compute_mode = mode

    @locked
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        """One entry per simulated process (pid, used memory unknown)."""
        gpu = self._full_gpu(handle)
        gpu.check_alive()
        return [t.c_nvmlProcessInfo_t(pid=1000 + n) for n in range(gpu.processes)]

    # -- events ----------------------------------------------------------------------------------------------

    @locked
    def nvmlEventSetCreate(self) -> Any:
        return ctypes.pointer(t.struct_c_nvmlEventSet_t(self._events.create()))

    @locked
    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        self._full_gpu(handle)
        return _SUPPORTED_EVENTS

    @locked
    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None:
        gpu = self._full_gpu(handle)
        if event_types & ~_SUPPORTED_EVENTS:
            raise t.NVMLError_NotSupported(
                f"event types {event_types:#x} are not supported on GPU {gpu.index}"
            )
        self._events.register(
            handle_contents(event_set, t.struct_c_nvmlEventSet_t).serial, gpu.index, event_types
        )

    @locked
    def nvmlEventSetWait(self, event_set: Any, timeoutms: int) -> Any:
        event = self._events.wait(handle_contents(event_set, t.struct_c_nvmlEventSet_t).serial, timeoutms)
        return t.c_nvmlEventData_t(
            self._device_handle(event.gpu), event.event_type, event.data, event.gi_id, event.ci_id
        )

    nvmlEventSetWait_v2 = nvmlEventSetWait

    @locked
    def nvmlEventSetFree(self, event_set: Any) -> None:
        self._events.free(handle_contents(event_set, t.struct_c_nvmlEventSet_t).serial)
