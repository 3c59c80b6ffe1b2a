"""The plumbing of FakeNvml: the lock every call takes, the opaque handles (ctypes pointers to structures that
carry a GPU index and an object serial) and out-parameter helpers shaped like pynvml's."""

from __future__ import annotations

import ctypes
import functools
import os
import pickle
import re
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, Self, TypeVar

from gpudra.hardware.gpus.pcinames import NVIDIA_DRIVER
from gpudra.hardware.simulated import nvml_types as t
from gpudra.hardware.simulated.events import EventHub
from gpudra.hardware.simulated.gpu_state import SimComputeInstance, SimGpuInstance, SimulatedGpu

P = ParamSpec("P")
R = TypeVar("R")
MigRef = tuple[SimGpuInstance, SimComputeInstance]
_QUERY = re.compile(r"^nvml(System|Device|GpuInstance|ComputeInstance)(Get|Is)[A-Z]\w*$")
"""NVML's query calls: they change no GPU, so the state file is not compared after them (pickling a node's
state after every call was 85 % of reading a MIG-partitioned dgx-h100's inventory)."""


def locked(method: Callable[P, R]) -> Callable[P, R]:
    query = _QUERY.match(method.__name__) is not None

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        self = args[0]
        assert isinstance(self, FakeNvmlBase)
        with self._lock:
            self._check_initialized(method.__name__)
            injected = self._injected(method.__name__, args[1:])
            if injected is not None:
                answer: R = injected.answer()
                return answer
            if query:
                return method(*args, **kwargs)
            try:
                return method(*args, **kwargs)
            finally:
                self._persist(self._gpu_of_call(method.__name__, args[1:]))

    return wrapper


def deref(ref: Any) -> Any:
    """The object behind ``byref(x)`` / ``pointer(x)`` / ``x``."""
    if hasattr(ref, "_obj"):
        return ref._obj
    if hasattr(ref, "contents"):
        return ref.contents
    return ref


def handle_contents(handle: Any, struct: type[ctypes.Structure]) -> Any:
    """The structure an opaque handle points at, checked to be of the expected kind."""
    if handle is None or not bool(handle):
        raise t.NVMLError_InvalidArgument("NULL handle")
    try:
        contents = handle.contents
    except (AttributeError, ValueError):
        raise t.NVMLError_InvalidArgument(f"not an NVML handle: {handle!r}") from None
    if not isinstance(contents, struct):
        raise t.NVMLError_InvalidArgument(
            f"expected a {struct.__name__} handle, got {type(contents).__name__}"
        )
    return contents


def fill_array(array: Any, count_ref: Any, items: Sequence[Any]) -> None:
    count = deref(count_ref)
    if array is None:
        count.value = len(items)
        return
    if count.value < len(items):
        count.value = len(items)
        raise t.NVMLError_InsufficientSize(f"{len(items)} entries do not fit an array of {count.value}")
    for i, item in enumerate(items):
        array[i] = item
    count.value = len(items)


_RETURNS_NOTHING = object()


@dataclass
class CallInjection:
    """A test's stand-in answer to one NVML call: raise ``error``, or return ``returns`` instead of asking the
    simulated GPU (which then does not change). ``gpu`` (a position on the PCI bus) limits it to calls about
    that GPU (a device, GPU-instance or compute-instance handle of it, or its NVML index); ``times`` to that
    many calls (None: until cleared)."""

    call: str
    gpu: int | None = None
    error: type[t.NVMLError] | None = None
    returns: Any = _RETURNS_NOTHING
    times: int | None = None

    def answer(self) -> Any:
        if self.times is not None:
            self.times -= 1
        if self.error is not None:
            raise self.error(f"{self.call} failed (injected by a test)")
        return self.returns


@dataclass(frozen=True)
class _SavedState:
    gpus: list[bytes] | list[SimulatedGpu]
    """Each GPU pickled apart, so that a call about one GPU pickles that GPU alone (a state file written before
    2026-12-01 holds the GPUs themselves)."""
    driver_version: str
    cuda_driver_version: int

    def simulated_gpus(self) -> list[SimulatedGpu]:
        return [pickle.loads(gpu) if isinstance(gpu, bytes) else gpu for gpu in self.gpus]


def write_atomically(path: Path, data: bytes) -> None:
    """A new file renamed over the old one: a process killed mid-write leaves the old state, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class FakeNvmlBase:
    """State and handle plumbing shared by the NVML call groups of FakeNvml."""

    def __init__(
        self, gpus: Sequence[SimulatedGpu], *, driver_version: str, cuda_driver_version: int
    ) -> None:
        self._lock = threading.RLock()
        self._all = list(gpus)  # every GPU on the PCI bus; NVML sees those the nvidia driver holds
        self._gpus = self._on_nvidia()
        self._driver_version = driver_version
        self._cuda_driver_version = cuda_driver_version
        self._init_count = 0
        self._events = EventHub(self._lock)
        self._handles: dict[tuple[str, int, int], Any] = {}
        self._state_file: Path | None = None
        self._saved: list[bytes] = []  # each GPU's pickle, as the state file holds it
        self._injections: list[CallInjection] = []
        self._bind_failures: dict[tuple[int, str], int] = {}  # (GPU position, driver) -> failures left

    # -- injected answers (test hooks) -----------------------------------------------------------------------

    def inject_call(
        self,
        call: str,
        *,
        gpu: int | None = None,
        error: type[t.NVMLError] | None = None,
        returns: Any = _RETURNS_NOTHING,
        times: int | None = None,
    ) -> None:
        """From now on ``call`` (its pynvml name, e.g. "nvmlDeviceGetArchitecture") answers as a
        :class:`CallInjection` says; the latest injection for a call wins."""
        if (error is None) == (returns is _RETURNS_NOTHING):
            raise ValueError("inject exactly one of error and returns")
        with self._lock:
            self._injections.insert(0, CallInjection(call, gpu, error, returns, times))

    def clear_injections(self) -> None:
        with self._lock:
            self._injections.clear()
            self._bind_failures.clear()

    def fail_bind(self, gpu: int, driver: str, *, times: int = 1) -> None:
        """The next ``times`` moves of the GPU (a position on the PCI bus) to ``driver`` unbind it from its
        driver and then fail to bind it: the GPU is left with no driver, as a failed sysfs bind leaves it."""
        with self._lock:
            self._bind_failures[(gpu, driver)] = times

    def bind_fails(self, gpu: int, driver: str) -> bool:
        """Whether this move fails (one of the injected failures is used up)."""
        with self._lock:
            left = self._bind_failures.get((gpu, driver), 0)
            if left > 0:
                self._bind_failures[(gpu, driver)] = left - 1
            return left > 0

    def _injected(self, call: str, args: Sequence[Any]) -> CallInjection | None:
        if not self._injections:
            return None
        gpu = self._gpu_of_call(call, args)
        for injection in self._injections:
            if injection.call == call and injection.gpu in (None, gpu) and injection.times != 0:
                return injection
        return None

    def _gpu_of_call(self, call: str, args: Sequence[Any]) -> int | None:
        """The PCI-bus position of the GPU a call is about, when its first argument says."""
        if not args:
            return None
        first = args[0]
        if call == "nvmlDeviceGetHandleByIndex" and isinstance(first, int):
            return self._gpus[first].index if 0 <= first < len(self._gpus) else None
        contents = getattr(first, "contents", None)
        gpu = getattr(contents, "gpu", None)
        return gpu if isinstance(gpu, int) else None

    # -- the hardware's memory across agent restarts ---------------------------------------------------------

    def persist_to(self, path: Path) -> None:
        """Keep the GPUs' state (MIG mode, instances, compute mode, ...) in ``path``, written atomically after
        every call that changed it, so a FakeNvml loaded from it (:meth:`FakeNvmlBase.load`) finds what real
        GPUs keep when the agent process is killed and started again."""
        with self._lock:
            self._state_file = path
            self._persist()

    def saved_state(self) -> bytes:
        """The GPUs' state as :meth:`persist_to` writes it (a state file another process may :meth:`load`)."""
        with self._lock:
            return self._state_of([pickle.dumps(gpu) for gpu in self._all])

    def _state_of(self, gpus: list[bytes]) -> bytes:
        return pickle.dumps(_SavedState(gpus, self._driver_version, self._cuda_driver_version))

    def _persist(self, slot: int | None = None) -> None:
        """Write the state file when the GPUs changed: after a call about one GPU (``slot``, its position on
        the PCI bus) only that GPU is pickled again to see whether it did (a MIG instance created on a
        dgx-h100 used to pickle all eight twice)."""
        if self._state_file is None:
            return
        if slot is None or not 0 <= slot < len(self._all) or len(self._saved) != len(self._all):
            gpus = [pickle.dumps(gpu) for gpu in self._all]
        else:
            gpus = list(self._saved)
            gpus[slot] = pickle.dumps(self._all[slot])
        if gpus != self._saved:
            write_atomically(self._state_file, self._state_of(gpus))
            self._saved = gpus

    @classmethod
    def load(cls, path: Path, *, keep_persisting: bool = True) -> Self:
        """The node whose state :meth:`persist_to` keeps in ``path`` (and, ``keep_persisting``, keep it there;
        without, a snapshot to inspect)."""
        state = pickle.loads(path.read_bytes())  # a file this simulator wrote itself
        if not isinstance(state, _SavedState):
            raise ValueError(f"{path} does not hold a simulated node's state")
        nvml = cls(
            state.simulated_gpus(),
            driver_version=state.driver_version,
            cuda_driver_version=state.cuda_driver_version,
        )
        if keep_persisting:
            nvml.persist_to(path)
        return nvml

    def _on_nvidia(self) -> list[SimulatedGpu]:
        """The GPUs NVML lists, in PCI order: a GPU bound to vfio-pci leaves NVML and the ones after it move
        down an index, as on a real node."""
        return [gpu for gpu in self._all if gpu.driver == NVIDIA_DRIVER]

    # -- handles ---------------------------------------------------------------------------------------------

    def _handle(self, kind: str, struct: type[ctypes.Structure], gpu: int, serial: int) -> Any:
        key = (kind, gpu, serial)
        handle = self._handles.get(key)
        if handle is None:
            handle = ctypes.pointer(struct(gpu, serial))
            self._handles[key] = handle
        return handle

    def _device_handle(self, gpu: int, serial: int = 0) -> Any:
        return self._handle("device", t.struct_c_nvmlDevice_t, gpu, serial)

    def _gi_handle(self, gpu: int, gi: SimGpuInstance) -> Any:
        return self._handle("gi", t.struct_c_nvmlGpuInstance_t, gpu, gi.serial)

    def _ci_handle(self, gpu: int, ci: SimComputeInstance) -> Any:
        return self._handle("ci", t.struct_c_nvmlComputeInstance_t, gpu, ci.serial)

    def _attached(self, slot: int) -> SimulatedGpu:
        """The GPU a handle names: handles carry the GPU's position on the PCI bus, not its NVML index, so a
        handle keeps naming its GPU while another one leaves NVML for vfio-pci (as NVML's handles do). A GPU
        that vfio-pci holds itself answers no call."""
        if not 0 <= slot < len(self._all):
            raise t.NVMLError_InvalidArgument(f"no GPU {slot}")
        gpu = self._all[slot]
        if gpu.driver != NVIDIA_DRIVER:
            raise t.NVMLError_NotFound(f"GPU {gpu.uuid} is bound to {gpu.driver}, not to the nvidia driver")
        gpu.check_alive()
        return gpu

    def _resolve(self, handle: Any) -> tuple[SimulatedGpu, MigRef | None]:
        contents = handle_contents(handle, t.struct_c_nvmlDevice_t)
        gpu = self._attached(contents.gpu)
        if contents.serial == 0:
            return gpu, None
        found = gpu.find_compute_instance(contents.serial)
        if found is None:
            raise t.NVMLError_InvalidArgument("the MIG device of this handle was destroyed")
        return gpu, found

    def _full_gpu(self, handle: Any) -> SimulatedGpu:
        gpu, mig = self._resolve(handle)
        if mig is not None:
            raise t.NVMLError_InvalidArgument("a MIG device handle cannot be used here")
        return gpu

    def _mig(self, handle: Any) -> tuple[SimulatedGpu, MigRef]:
        gpu, mig = self._resolve(handle)
        if mig is None:
            raise t.NVMLError_InvalidArgument("not a MIG device handle")
        return gpu, mig

    def _gi(self, handle: Any) -> tuple[SimulatedGpu, SimGpuInstance]:
        contents = handle_contents(handle, t.struct_c_nvmlGpuInstance_t)
        gpu = self._attached(contents.gpu)
        gi = gpu.find_gpu_instance(contents.serial)
        if gi is None:
            raise t.NVMLError_InvalidArgument("the GPU instance of this handle was destroyed")
        return gpu, gi

    def _ci(self, handle: Any) -> tuple[SimulatedGpu, SimGpuInstance, SimComputeInstance]:
        contents = handle_contents(handle, t.struct_c_nvmlComputeInstance_t)
        gpu = self._attached(contents.gpu)
        found = gpu.find_compute_instance(contents.serial)
        if found is None:
            raise t.NVMLError_InvalidArgument("the compute instance of this handle was destroyed")
        return gpu, *found

    def _check_initialized(self, function: str) -> None:
        if self._init_count == 0 and function not in {"nvmlInit", "nvmlInitWithFlags"}:
            raise t.NVMLError_Uninitialized(f"{function} called before nvmlInit")
