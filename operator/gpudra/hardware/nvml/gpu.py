"""Reading one GPU from NVML call by call, so that one failing call, or one answer gpudra does not know, costs only
what that call answers and never the node's other GPUs (NVIDIA's driver lost whole nodes this way: an unknown
architecture on Rubin, memory info NOT_SUPPORTED on GB10).

What a GPU cannot be published without (its handle, UUID, minor number, PCI address, MIG mode and, with MIG on,
its MIG devices) leaves that GPU out of the inventory. Any other call that fails, or answers a value that is out
of range or unknown (an architecture, brand or addressing mode gpudra has no name for, a product name too long
for a DRA attribute), leaves that detail out (None) and the GPU in. Either way the inventory's ``problems`` name
the GPU, the NVML call and what went wrong; the agent posts them as Warning Events on its Node.

A lost GPU (GPU_IS_LOST from any call) is not a problem of one call: :class:`HardwareGpuLost` goes up to the
backend, which leaves the GPU out and reports its loss as before.
"""

from __future__ import annotations

import ctypes
import uuid
from collections.abc import Callable
from typing import Any, NoReturn

from gpudra.errors import HardwareError, HardwareGpuLost
from gpudra.hardware.gpus.inventory import FabricInfo, GpuInfo, GpuProblem, MigDeviceInfo
from gpudra.hardware.nvml.mig import MigOperations, NvmlCalls

# The brand strings go-nvlib prints (and NVIDIA's DRA driver publishes), by NVML_BRAND_* value.
BRAND_NAMES = {
    0: "Unknown",
    1: "Quadro",
    2: "Tesla",
    3: "NVS",
    4: "Grid",
    5: "GeForce",
    6: "Titan",
    7: "NvidiaVApps",
    8: "NvidiaVPC",
    9: "NvidiaVCS",
    10: "NvidiaVWS",
    11: "NvidiaCloudGaming",
    12: "QuadroRTX",
    13: "NvidiaRTX",
    14: "Nvidia",
    15: "GeForceRTX",
    16: "TitanRTX",
}
# NVML_DEVICE_ARCH_* -> the architecture name NVIDIA's DRA driver publishes.
ARCHITECTURE_NAMES = {
    2: "Kepler",
    3: "Maxwell",
    4: "Pascal",
    5: "Volta",
    6: "Turing",
    7: "Ampere",
    8: "Ada Lovelace",
    9: "Hopper",
    10: "Blackwell",
    13: "Rubin",
}
ADDRESSING_MODES = {0: "None", 1: "HMM", 2: "ATS"}

ATTRIBUTE_STRING_MAX = 64
"""Kubernetes refuses a whole ResourceSlice whose string attribute is longer (resource.k8s.io/v1)."""
MINOR_MAX = 254
"""/dev/nvidia0 .. /dev/nvidia254 (255 is /dev/nvidiactl)."""
NUMA_NODE_MAX = 1023
NVLINK_COUNT_MAX = 64
CAPABILITY_PART_MAX = 99

_NOT_THERE = frozenset({"NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND"})
"""Answers that say a detail does not exist on this GPU: nothing to warn about for optional details."""
NO_ANSWER: Any = object()
"""What :meth:`GpuReader._call` returns for a call that failed or is not supported (None is an answer)."""


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def normalize_pci_bus_id(bus_id: str) -> str:
    """NVML's "00000000:1A:00.0" as Kubernetes' resource.kubernetes.io/pciBusID wants it: "0000:1a:00.0"."""
    domain, bus, device_function = _text(bus_id).strip().split(":")
    return f"{int(domain, 16):04x}:{bus.lower()}:{device_function.lower()}"


class _LeftOut(Exception):
    """The GPU cannot be published: ``problem`` says which call and why."""

    def __init__(self, problem: GpuProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


class GpuReader:
    """Reads one GPU (:meth:`read`) and says what it could not read (:attr:`problems`)."""

    def __init__(
        self, calls: NvmlCalls, mig: MigOperations, pcie_root_of: Callable[[str], str | None], index: int
    ) -> None:
        self._calls = calls
        self._mig = mig
        self._pcie_root_of = pcie_root_of
        self._index = index
        self._uuid: str | None = None
        self.problems: list[GpuProblem] = []

    # -- one call --------------------------------------------------------------------------------------------

    def _problem(self, call: str, detail: str, *, published: bool) -> GpuProblem:
        return GpuProblem(
            gpu_index=self._index, gpu_uuid=self._uuid, call=call, detail=detail, published=published
        )

    def _call(self, call: str, *args: Any, essential: bool = False, optional: bool = False) -> Any:
        """``nvml.<call>(*args)``; NO_ANSWER when it failed (a problem noted) or, ``optional``, is not supported.
        ``essential``: a failure leaves the GPU out. A lost GPU raises HardwareGpuLost."""
        nvml = self._calls.nvml
        function = getattr(nvml, call, None)
        if function is None:
            self._failed(call, "the NVML binding has no such function", essential=essential)
            return NO_ANSWER
        try:
            return function(*args)
        except nvml.NVMLError as exc:
            code = self._calls.error_code(exc) or "NVML_ERROR_UNKNOWN"
            if code == "NVML_ERROR_GPU_IS_LOST":
                raise HardwareGpuLost(
                    f"{call} on GPU {self._index} of node {self._calls.node_name}: {exc} ({code})", code=code
                ) from exc
            if optional and code in _NOT_THERE:
                return NO_ANSWER
            self._failed(call, f"failed: {exc} ({code})", essential=essential)
            return NO_ANSWER

    def _failed(self, call: str, detail: str, *, essential: bool) -> None:
        if essential:
            self._leave_out(call, detail)
        self.problems.append(self._problem(call, detail, published=True))

    def _leave_out(self, call: str, detail: str) -> NoReturn:
        raise _LeftOut(self._problem(call, detail, published=False))

    def _unusable(self, call: str, value: Any, why: str) -> None:
        """The call answered ``value``, which cannot be published: note it (the detail is left out)."""
        self._failed(call, f"answered {value!r}, {why}", essential=False)

    def _refused(self, call: str, value: Any, why: str) -> NoReturn:
        """The call answered ``value``, without which the GPU cannot be published."""
        self._leave_out(call, f"answered {value!r}, {why}")

    # -- the GPU ---------------------------------------------------------------------------------------------

    def read(self) -> GpuInfo | None:
        """The GPU as far as it can be read; None when it cannot be published (see :attr:`problems`)."""
        try:
            return self._read()
        except _LeftOut as left_out:
            self.problems.append(left_out.problem)
            return None

    def _read(self) -> GpuInfo:
        handle = self._call("nvmlDeviceGetHandleByIndex", self._index, essential=True)
        self._uuid = self._read_uuid(handle)
        minor = self._read_minor(handle)
        bus_id, pci_device_id = self._read_pci(handle)
        mig_mode = self._read_mig_mode(handle)
        total_bytes = self._read_memory(handle)
        mig_enabled = bool(mig_mode and mig_mode[0])
        return GpuInfo(
            index=self._index,
            minor=minor,
            uuid=self._uuid,
            product_name=self._read_name(handle),
            brand=self._named("nvmlDeviceGetBrand", handle, BRAND_NAMES, "brand"),
            architecture=self._named("nvmlDeviceGetArchitecture", handle, ARCHITECTURE_NAMES, "architecture"),
            cuda_compute_capability=self._read_capability(handle),
            pci_bus_id=bus_id,
            pci_device_id=pci_device_id,
            pcie_root=self._pcie_root_of(bus_id),
            numa_node=self._read_numa(handle),
            addressing_mode=self._read_addressing(handle),
            memory_bytes=total_bytes,
            multiprocessors=self._read_multiprocessors(handle),
            mig_capable=mig_mode is not None,
            mig_enabled=mig_enabled,
            mig_pending=bool(mig_mode and mig_mode[1]),
            mig_devices=self._read_mig_devices(handle, minor, total_bytes) if mig_enabled else (),
            nvlink_count=self._read_nvlink_count(handle),
            fabric=self._read_fabric(handle),
        )

    # -- what a GPU is not published without -----------------------------------------------------------------

    def _read_uuid(self, handle: Any) -> str:
        value = _text(self._call("nvmlDeviceGetUUID", handle, essential=True))
        if not value.startswith("GPU-") or len(value) > ATTRIBUTE_STRING_MAX:
            self._refused("nvmlDeviceGetUUID", value, "not a GPU UUID")
        return value

    def _read_minor(self, handle: Any) -> int:
        value = self._call("nvmlDeviceGetMinorNumber", handle, essential=True)
        if not isinstance(value, int) or not 0 <= value <= MINOR_MAX:
            self._refused("nvmlDeviceGetMinorNumber", value, f"not a minor number 0-{MINOR_MAX}")
        return int(value)

    def _read_pci(self, handle: Any) -> tuple[str, int]:
        info = self._call("nvmlDeviceGetPciInfo", handle, essential=True)
        try:
            return normalize_pci_bus_id(info.busId), int(info.pciDeviceId)
        except (AttributeError, ValueError, TypeError):
            self._refused("nvmlDeviceGetPciInfo", getattr(info, "busId", info), "not a PCI address")

    def _read_mig_mode(self, handle: Any) -> tuple[int, int] | None:
        """(current, pending); None when the GPU has no MIG. Unknown, the GPU might be partitioned: left out."""
        mode = self._call("nvmlDeviceGetMigMode", handle, essential=True, optional=True)
        if mode is NO_ANSWER:
            return None
        try:
            current, pending = (int(m) for m in mode)
        except (TypeError, ValueError):
            self._refused("nvmlDeviceGetMigMode", mode, "not a MIG mode pair")
        if current not in (0, 1) or pending not in (0, 1):
            self._refused("nvmlDeviceGetMigMode", mode, "not MIG modes 0 or 1")
        return current, pending

    def _read_mig_devices(
        self, handle: Any, minor: int, total_bytes: int | None
    ) -> tuple[MigDeviceInfo, ...]:
        if total_bytes is None:
            self._leave_out(
                "nvmlDeviceGetMemoryInfo",
                "MIG is on and its profiles are named by the GPU's memory, which NVML did not give",
            )
        assert self._uuid is not None
        try:
            return self._mig.read_devices(handle, self._index, self._uuid, minor, total_bytes)
        except HardwareGpuLost:
            raise
        except HardwareError as exc:
            self._leave_out("reading its MIG devices", str(exc))

    # -- details left out when unknown -----------------------------------------------------------------------

    def _read_name(self, handle: Any) -> str | None:
        value = self._call("nvmlDeviceGetName", handle)
        if value is NO_ANSWER:
            return None
        name = _text(value).strip() if isinstance(value, str | bytes) else ""
        if not name or len(name) > ATTRIBUTE_STRING_MAX or not name.isprintable():
            self._unusable(
                "nvmlDeviceGetName",
                value,
                f"not a product name of 1-{ATTRIBUTE_STRING_MAX} printable characters",
            )
            return None
        return name

    def _named(self, call: str, handle: Any, names: dict[int, str], what: str) -> str | None:
        value = self._call(call, handle)
        if value is NO_ANSWER:
            return None
        name = names.get(value) if isinstance(value, int) else None
        if name is None:
            self._unusable(call, value, f"an {what} gpudra does not know")
            return None
        return name

    def _read_capability(self, handle: Any) -> str | None:
        value = self._call("nvmlDeviceGetCudaComputeCapability", handle)
        if value is NO_ANSWER:
            return None
        try:
            major, minor = (int(part) for part in value)
        except (TypeError, ValueError):
            self._unusable("nvmlDeviceGetCudaComputeCapability", value, "not (major, minor)")
            return None
        if not (0 < major <= CAPABILITY_PART_MAX and 0 <= minor <= CAPABILITY_PART_MAX):
            self._unusable("nvmlDeviceGetCudaComputeCapability", value, "out of range")
            return None
        return f"{major}.{minor}"

    def _read_memory(self, handle: Any) -> int | None:
        info = self._call("nvmlDeviceGetMemoryInfo", handle)
        if info is NO_ANSWER:
            return None
        total = getattr(info, "total", None)
        if not isinstance(total, int) or total <= 0:
            self._unusable("nvmlDeviceGetMemoryInfo", total, "not a memory size")
            return None
        return total

    def _read_numa(self, handle: Any) -> int | None:
        value = self._call("nvmlDeviceGetNumaNodeId", handle, optional=True)
        if value is NO_ANSWER or value == -1:  # -1: the platform has no NUMA affinity for the GPU
            return None
        if not isinstance(value, int) or not 0 <= value <= NUMA_NODE_MAX:
            self._unusable("nvmlDeviceGetNumaNodeId", value, "not a NUMA node")
            return None
        return value

    def _read_addressing(self, handle: Any) -> str | None:
        value = self._call("nvmlDeviceGetAddressingMode", handle, optional=True)
        if value is NO_ANSWER:
            return None
        mode = ADDRESSING_MODES.get(value) if isinstance(value, int) else None
        if mode is None:
            self._unusable("nvmlDeviceGetAddressingMode", value, "an addressing mode gpudra does not know")
            return None
        return mode

    def _read_multiprocessors(self, handle: Any) -> int:
        attributes = self._call("nvmlDeviceGetAttributes", handle, optional=True)
        count = getattr(attributes, "multiprocessorCount", 0)
        return count if isinstance(count, int) and count >= 0 else 0

    def _read_nvlink_count(self, handle: Any) -> int:
        """Active NVLink links; 0 without NVLink, or (a problem noted) when NVML's answer is unusable."""
        field = getattr(self._calls.nvml, "NVML_FI_DEV_NVLINK_LINK_COUNT", None)
        if field is None:
            return 0
        values = self._call("nvmlDeviceGetFieldValues", handle, [field], optional=True)
        if values is NO_ANSWER or not values or int(values[0].nvmlReturn) != 0:
            return 0
        count = int(values[0].value.uiVal)
        if not 0 <= count <= NVLINK_COUNT_MAX:
            self._unusable("nvmlDeviceGetFieldValues", count, "not an NVLink link count (counted as 0)")
            return 0
        return count

    def _read_fabric(self, handle: Any) -> FabricInfo | None:
        nvml = self._calls.nvml
        struct = getattr(nvml, "c_nvmlGpuFabricInfoV_t", None)
        if struct is None or not hasattr(nvml, "nvmlDeviceGetGpuFabricInfoV"):
            return None
        info = struct()
        if self._call("nvmlDeviceGetGpuFabricInfoV", handle, ctypes.byref(info), optional=True) is NO_ANSWER:
            return None
        return FabricInfo(
            cluster_uuid=str(uuid.UUID(bytes=bytes(info.clusterUuid))),
            clique_id=int(info.cliqueId),
            state=int(info.state),
            status=int(info.status),
        )
