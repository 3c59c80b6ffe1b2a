"""NvmlBackend: the GPU seam over NVML. The only module that imports ``pynvml``.

It calls NVML functions only (through the module it is given), so the very same code runs on a real GPU and on
:class:`gpudra.hardware.simulated.FakeNvml`. NVML errors become :mod:`gpudra.errors` hardware errors, chained
from the NVML error, with a message that says what was attempted on which GPU."""

from __future__ import annotations

import contextlib
import functools
import logging
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from gpudra.errors import (
    HardwareError,
    HardwareGpuLost,
    HardwareInsufficientResources,
    HardwareInUse,
    HardwareInvalidArgument,
    HardwareNotFound,
    HardwareNotSupported,
    HardwareTimeout,
)
from gpudra.hardware.gpus.backend import (
    ChangeCount,
    GpuInstanceInfo,
    HealthEvent,
    HealthEventKind,
    MigModeResult,
    MigProfileInfo,
)
from gpudra.hardware.gpus.inventory import GpuInfo, MigDeviceInfo, NodeInventory, PciGpu
from gpudra.hardware.nvml.gpu import GpuReader
from gpudra.hardware.nvml.mig import MigOperations
from gpudra.hardware.nvml.pcibus import PciBus, SysfsPciBus
from gpudra.hardware.nvml.vfio import VfioOperations

log = logging.getLogger(__name__)
LOST_LOG_SECONDS = 60
"""A GPU lost from the bus is logged when it goes, then once a minute while it stays lost (the inventory is read
several times a second)."""

_ERROR_CLASSES: dict[str, type[HardwareError]] = {
    "NVML_ERROR_NOT_SUPPORTED": HardwareNotSupported,
    "NVML_ERROR_INSUFFICIENT_RESOURCES": HardwareInsufficientResources,
    "NVML_ERROR_IN_USE": HardwareInUse,
    "NVML_ERROR_NOT_FOUND": HardwareNotFound,
    "NVML_ERROR_INVALID_ARGUMENT": HardwareInvalidArgument,
    "NVML_ERROR_TIMEOUT": HardwareTimeout,
    "NVML_ERROR_GPU_IS_LOST": HardwareGpuLost,
}
_KNOWN_CODES = (
    "NVML_SUCCESS",
    "NVML_ERROR_UNINITIALIZED",
    "NVML_ERROR_INVALID_ARGUMENT",
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_NOT_FOUND",
    "NVML_ERROR_INSUFFICIENT_SIZE",
    "NVML_ERROR_DRIVER_NOT_LOADED",
    "NVML_ERROR_TIMEOUT",
    "NVML_ERROR_LIBRARY_NOT_FOUND",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_GPU_IS_LOST",
    "NVML_ERROR_RESET_REQUIRED",
    "NVML_ERROR_IN_USE",
    "NVML_ERROR_INSUFFICIENT_RESOURCES",
    "NVML_ERROR_INVALID_STATE",
    "NVML_ERROR_UNKNOWN",
)
_WHOLE_GPU = 0xFFFFFFFF
_HEALTH_EVENT_MASK_NAMES = ("nvmlEventTypeXidCriticalError", "nvmlEventTypeDoubleBitEccError")


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _a_change(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """A method that changes the GPUs, counted in the backend's ``changes`` while it runs."""

    @functools.wraps(method)
    def counted(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        backend = args[0]
        assert isinstance(backend, NvmlBackend)
        with backend.changes.one():
            return method(*args, **kwargs)

    return counted


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def sysfs_pcie_root(pci_bus_id: str, sysfs: Path = Path("/sys")) -> str | None:
    """The PCIe root complex ("pci0000:15") of a device, read from sysfs; None when it cannot be found."""
    try:
        real = (sysfs / "bus" / "pci" / "devices" / pci_bus_id).resolve(strict=True)
    except OSError:
        return None
    return next((part for part in real.parts if part.startswith("pci")), None)


def load_binding() -> Any:
    """The real NVML binding (``pynvml`` from nvidia-ml-py); importing it needs no GPU."""
    import pynvml

    return pynvml


class NvmlBackend:
    """GpuBackend over an NVML binding: ``pynvml`` by default, or any object with its call surface.

    ``pcie_root_of`` maps a PCI bus id to its root complex (default: the binding's own ``pcie_root_of`` when
    it has one, as the simulation does, else sysfs); ``pci_bus`` likewise (the binding's ``pci_bus``, else sysfs)
    serves passthrough. NVML is initialised on first use; :meth:`close` shuts it
    down. Calls may come from several threads; :meth:`wait_health_event` is meant for one consumer (the
    health watcher).
    """

    def __init__(
        self,
        node_name: str,
        nvml: Any | None = None,
        *,
        pcie_root_of: Callable[[str], str | None] | None = None,
        pci_bus: PciBus | None = None,
    ) -> None:
        if nvml is None:
            nvml = load_binding()
        self.node_name = node_name
        self._nvml = nvml
        self.changes = ChangeCount()
        # A simulated NVML also stands in for sysfs (FakeNvml.pcie_root_of); pynvml has no such attribute.
        self._pcie_root_of = pcie_root_of or getattr(nvml, "pcie_root_of", None) or sysfs_pcie_root
        self._lock = threading.Lock()
        self._initialized = False
        self._mig = MigOperations(self)
        self._vfio = VfioOperations(
            self,
            pci_bus or getattr(nvml, "pci_bus", None) or SysfsPciBus(),
            lambda: self.read_inventory(nvlink_peers=False),  # names, processes and instances: no peers
        )
        self._event_set: Any = None
        # gpu uuid -> (NVML index when registered, handle). Keyed by UUID: a GPU bound to vfio-pci leaves NVML
        # and the GPUs after it move down an index, so an index names another GPU after a bind.
        self._watched: dict[str, tuple[int, Any]] = {}
        self._rewatch = (
            False  # a GPU left NVML or came back: register the GPUs listed now before the next wait
        )
        self._reported_lost: set[str] = set()  # gpu uuids
        self._lost_logged: dict[int, float] = {}  # NVML index of a lost GPU -> when its loss was last logged
        self._pending_events: list[HealthEvent] = []
        self._listener: Callable[[], None] | None = None  # listen_for_health_events
        self.unmonitored_gpus: tuple[int, ...] = ()

    # -- NVML plumbing (the NvmlCalls protocol that MigOperations uses) --------------------------------------

    @property
    def nvml(self) -> Any:
        self._ensure_initialized()
        return self._nvml

    def code_name(self, value: int) -> str:
        for name in _KNOWN_CODES:
            if getattr(self._nvml, name, None) == value:
                return name
        return f"NVML_ERROR_{value}"

    def error_code(self, exc: BaseException) -> str | None:
        """The NVML_ERROR_* name of an NVML error, or None when ``exc`` is not one."""
        if isinstance(exc, self._nvml.NVMLError):
            return self.code_name(int(getattr(exc, "value", -1)))
        return None

    @contextlib.contextmanager
    def errors(self, what: str, gpu_index: int | None = None) -> Iterator[None]:
        """Map NVML errors raised inside to HardwareError subclasses, saying what failed on which GPU."""
        try:
            yield
        except self._nvml.NVMLError as exc:
            code = self.error_code(exc) or "UNKNOWN"
            where = f" on GPU {gpu_index}" if gpu_index is not None else ""
            error_class = _ERROR_CLASSES.get(code, HardwareError)
            raise error_class(f"{what}{where} of node {self.node_name}: {exc} ({code})", code=code) from exc

    def optional(self, function_name: str, *args: Any, lenient: bool = False) -> Any:
        """Call an NVML function whose answer may legitimately be missing.

        None when the binding lacks the function or the GPU does not support it; with ``lenient``, None on any
        NVML error but a lost GPU (for details that must not keep a GPU out of the inventory).
        """
        function = getattr(self._nvml, function_name, None)
        if function is None:
            return None
        try:
            return function(*args)
        except self._nvml.NVMLError as exc:
            code = self.error_code(exc)
            if code in {"NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND"}:
                return None
            if lenient and code != "NVML_ERROR_GPU_IS_LOST":
                log.debug("%s failed on node %s: %s (%s)", function_name, self.node_name, exc, code)
                return None
            raise

    def handle(self, gpu_index: int) -> Any:
        with self.errors("get the handle", gpu_index):
            return self.nvml.nvmlDeviceGetHandleByIndex(gpu_index)

    # -- lifecycle -------------------------------------------------------------------------------------------

    def initialise(self) -> None:
        """NVML initialised now (once): a HardwareError when the driver cannot be used at all."""
        self._ensure_initialized()

    def _ensure_initialized(self) -> None:
        with self._lock:
            if self._initialized:
                return
            with self.errors("initialise NVML"):
                self._nvml.nvmlInit()
            self._initialized = True

    def close(self) -> None:
        with self._lock:
            if not self._initialized:
                return
            with contextlib.suppress(self._nvml.NVMLError):
                if self._event_set is not None:
                    self._nvml.nvmlEventSetFree(self._event_set)
            self._event_set = None
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()
            self._initialized = False

    # -- inventory -------------------------------------------------------------------------------------------

    def read_inventory(self, *, nvlink_peers: bool = True) -> NodeInventory:
        nvml = self.nvml
        with self.errors("read the driver versions"):
            driver_version = _text(nvml.nvmlSystemGetDriverVersion())
            cuda = int(nvml.nvmlSystemGetCudaDriverVersion())
            count = int(nvml.nvmlDeviceGetCount())
        gpus, problems = [], []
        for index in range(count):
            reader = GpuReader(self, self._mig, self._pcie_root_of, index)
            try:
                gpu = reader.read()
            except HardwareGpuLost as exc:
                now = time.monotonic()
                if now - self._lost_logged.get(index, -LOST_LOG_SECONDS) >= LOST_LOG_SECONDS:
                    self._lost_logged[index] = now
                    log.warning(
                        "GPU %d of node %s is lost and left out of the inventory (said again every %d s while it "
                        "stays lost): %s", index, self.node_name, LOST_LOG_SECONDS, exc,
                    )  # fmt: skip
                continue
            problems.extend(reader.problems)
            if gpu is not None:
                gpus.append(gpu)
                self._reported_lost.discard(gpu.uuid)  # back on the bus: a later loss is reported again
                self._lost_logged.pop(index, None)
        return NodeInventory(
            node_name=self.node_name,
            driver_version=driver_version,
            cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}",
            gpus=self._with_nvlink_peers(gpus) if nvlink_peers else tuple(gpus),
            problems=tuple(problems),
        )

    def _with_nvlink_peers(self, gpus: list[GpuInfo]) -> tuple[GpuInfo, ...]:
        """Each GPU with the UUIDs of the others it reaches over NVLink: nvmlDeviceGetP2PStatus(gpu, other,
        NVML_P2P_CAPS_INDEX_NVLINK) for every ordered pair, a peer where it answers NVML_P2P_STATUS_OK. A pair
        NVML cannot answer for (not supported, a GPU lost meanwhile) counts as no peer."""
        nvlink_index = getattr(self._nvml, "NVML_P2P_CAPS_INDEX_NVLINK", None)
        if nvlink_index is None or len(gpus) < 2:
            return tuple(gpus)
        status_ok = getattr(self._nvml, "NVML_P2P_STATUS_OK", 0)
        handles = {}
        for gpu in gpus:
            with contextlib.suppress(HardwareError):
                handles[gpu.index] = self.handle(gpu.index)
        result = []
        for gpu in gpus:
            peers = []
            for other in gpus:
                if other.index == gpu.index or gpu.index not in handles or other.index not in handles:
                    continue
                try:
                    with self.errors("read the NVLink P2P status", gpu.index):
                        status = self.optional(
                            "nvmlDeviceGetP2PStatus",
                            handles[gpu.index],
                            handles[other.index],
                            nvlink_index,
                            lenient=True,
                        )
                except HardwareError as exc:
                    log.debug("no NVLink peer status for GPUs %d and %d: %s", gpu.index, other.index, exc)
                    continue
                if status is not None and int(status) == status_ok:
                    peers.append(other.uuid)
            result.append(gpu.model_copy(update={"nvlink_peers": tuple(sorted(peers))}))
        return tuple(result)

    # -- MIG -------------------------------------------------------------------------------------------------

    @_a_change
    def set_mig_mode(self, gpu_index: int, enabled: bool) -> MigModeResult:
        return self._mig.set_mode(gpu_index, enabled)

    def mig_profiles(self, gpu_index: int) -> tuple[MigProfileInfo, ...]:
        return self._mig.profiles(gpu_index)

    @_a_change
    def create_mig_device(self, gpu_index: int, profile: str, placement_start: int) -> MigDeviceInfo:
        return self._mig.create(gpu_index, profile, placement_start)

    @_a_change
    def destroy_mig_device(self, gpu_index: int, gi_id: int) -> None:
        self._mig.destroy(gpu_index, gi_id)

    def gpu_instances(self, gpu_index: int) -> tuple[GpuInstanceInfo, ...]:
        return self._mig.gpu_instances(gpu_index)

    # -- passthrough -----------------------------------------------------------------------------------------

    def pci_gpus(self) -> tuple[PciGpu, ...]:
        return self._vfio.gpus()

    @_a_change
    def bind_vfio(self, pci_bus_id: str) -> PciGpu:
        try:
            return self._vfio.bind(pci_bus_id)
        finally:
            self._watch_again()

    @_a_change
    def unbind_vfio(self, pci_bus_id: str) -> PciGpu:
        try:
            return self._vfio.unbind(pci_bus_id)
        finally:
            self._watch_again()

    def _watch_again(self) -> None:
        """The GPUs in NVML changed: register them before the next wait (a listener looks now, as a waiting
        thread would at its next wait)."""
        self._rewatch = True
        if self._listener is not None:
            self._listener()

    # -- sharing ---------------------------------------------------------------------------------------------

    @_a_change
    def set_compute_mode(self, gpu_uuid: str, exclusive_process: bool) -> None:
        nvml = self.nvml
        mode = nvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS if exclusive_process else nvml.NVML_COMPUTEMODE_DEFAULT
        with self.errors(f"set the compute mode of {gpu_uuid} to {int(mode)}"):
            handle = nvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
            if int(nvml.nvmlDeviceGetComputeMode(handle)) != int(mode):
                nvml.nvmlDeviceSetComputeMode(handle, mode)

    @_a_change
    def set_time_slice(self, gpu_uuid: str, interval: int) -> None:
        """NVML has no call for the compute-policy time slice: the simulation records it, a real node runs
        ``nvidia-smi compute-policy`` (as NVIDIA's driver does)."""
        simulated = getattr(self._nvml, "set_time_slice", None)
        if simulated is not None:
            with self.errors(f"set the time slice of {gpu_uuid}"):
                simulated(gpu_uuid, interval)
            return
        command = ["nvidia-smi", "compute-policy", "-i", gpu_uuid, f"--set-timeslice={interval}"]
        try:
            subprocess.run(command, check=True, capture_output=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as exc:
            detail = getattr(exc, "stderr", b"") or b""
            raise HardwareError(
                f"set the time slice of {gpu_uuid} on node {self.node_name}: {exc} {_text(detail).strip()}"
            ) from exc

    # -- health ----------------------------------------------------------------------------------------------

    def _ensure_event_set(self) -> Any:
        """The event set, created on first use. After a GPU left NVML for vfio-pci or came back, the GPUs NVML
        lists now are registered on the same set (one it already watches is left as it is), so no event queued
        meanwhile is lost and a GPU given back is watched again."""
        with self._lock:
            if self._event_set is not None and not self._rewatch:
                return self._event_set
            self._rewatch = False
            event_set = self._event_set
        nvml = self.nvml
        mask = 0
        for name in _HEALTH_EVENT_MASK_NAMES:
            mask |= int(getattr(nvml, name))
        with self.errors("create the NVML event set"):
            if event_set is None:
                event_set = nvml.nvmlEventSetCreate()
            count = int(nvml.nvmlDeviceGetCount())
        unmonitored = []
        watched: dict[str, tuple[int, Any]] = {}
        for index in range(count):
            try:
                handle = self.handle(index)
                with self.errors("register health events", index):
                    gpu_uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                    if gpu_uuid not in self._watched:
                        supported = int(nvml.nvmlDeviceGetSupportedEventTypes(handle))
                        nvml.nvmlDeviceRegisterEvents(handle, mask & supported, event_set)
                    watched[gpu_uuid] = (index, handle)
            except HardwareError as exc:
                log.warning("GPU %d of node %s is not monitored: %s", index, self.node_name, exc)
                unmonitored.append(index)
        with self._lock:
            self.unmonitored_gpus = tuple(unmonitored)
            self._watched = watched
            self._event_set = event_set
        return event_set

    def listen_for_health_events(self, listener: Callable[[], None] | None) -> bool:
        set_listener = getattr(self.nvml, "set_event_listener", None)  # the simulated NVML's
        if set_listener is None:
            return False
        self._listener = listener
        set_listener(listener)
        return True

    def wait_health_event(self, timeout_s: float) -> HealthEvent | None:
        if self._pending_events:
            return self._pending_events.pop(0)
        event_set = self._ensure_event_set()
        nvml = self.nvml
        try:
            data = nvml.nvmlEventSetWait(event_set, max(int(timeout_s * 1000), 0))
        except nvml.NVMLError as exc:
            code = self.error_code(exc)
            if code == "NVML_ERROR_TIMEOUT":
                return None
            if code == "NVML_ERROR_GPU_IS_LOST":
                return self._lost_gpu_events()
            with self.errors("wait for health events"):
                raise
        with self.errors("read a health event"):
            gpu_uuid = _text(nvml.nvmlDeviceGetUUID(data.device))
        index = self._watched[gpu_uuid][0] if gpu_uuid in self._watched else None
        event_type = int(data.eventType)
        if event_type & int(nvml.nvmlEventTypeXidCriticalError):
            kind, xid = HealthEventKind.XID, int(data.eventData)
        elif event_type & int(nvml.nvmlEventTypeDoubleBitEccError):
            kind, xid = HealthEventKind.DOUBLE_BIT_ECC, None
        else:
            kind, xid = HealthEventKind.SINGLE_BIT_ECC, None
        gi, ci = int(data.gpuInstanceId), int(data.computeInstanceId)
        return HealthEvent(
            kind=kind,
            gpu_index=index,
            gpu_uuid=gpu_uuid,
            xid=xid,
            gi_id=None if gi == _WHOLE_GPU else gi,
            ci_id=None if ci == _WHOLE_GPU else ci,
        )

    def _lost_gpu_events(self) -> HealthEvent:
        """NVML said a GPU is lost without saying which: ask each watched GPU."""
        for gpu_uuid, (index, handle) in sorted(self._watched.items(), key=lambda item: item[1][0]):
            if gpu_uuid in self._reported_lost:
                continue
            try:
                self._nvml.nvmlDeviceGetUUID(handle)
            except self._nvml.NVMLError as exc:
                if self.error_code(exc) == "NVML_ERROR_GPU_IS_LOST":
                    self._reported_lost.add(gpu_uuid)
                    self._pending_events.append(
                        HealthEvent(kind=HealthEventKind.GPU_LOST, gpu_index=index, gpu_uuid=gpu_uuid)
                    )
        if self._pending_events:
            return self._pending_events.pop(0)
        return HealthEvent(kind=HealthEventKind.GPU_LOST, gpu_index=None, gpu_uuid=None)
