"""A stand-in for the ``pynvml`` binding of a DGX H100 (8 x H100 SXM5 80GB, MIG capable and off, NVSwitch), for
``bench agent``: the benchmark puts this directory first on the agent's PYTHONPATH, so ``gpudra agent --backend
nvml`` loads it where a real node loads nvidia-ml-py.

Only the calls into libnvidia-ml are replaced: constants, structures and NVMLError are nvidia-ml-py's own (its
module is loaded from its file under another name). It imports nothing of gpudra, so the agent's process holds
what it holds on a real node, less the driver library. Functions it does not answer are absent, as in an older
binding; the agent treats those details as not supported.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import threading
import time
from pathlib import Path
from typing import Any

_real_path = next(
    (
        Path(p) / "pynvml.py"
        for p in sys.path
        if p and (Path(p) / "pynvml.py").is_file() and Path(p) != Path(__file__).parent
    ),
    None,
)
if _real_path is None:
    raise ImportError("nvidia-ml-py is not installed: the stub borrows its constants and structures")
_spec = importlib.util.spec_from_file_location("_pynvml_binding", _real_path)
assert _spec is not None and _spec.loader is not None
_real = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _real  # nvidia-ml-py looks itself up there to add its error classes
_spec.loader.exec_module(_real)
for _name, _value in vars(_real).items():
    if _name.startswith("__") or (_name.startswith("nvml") and inspect.isfunction(_value)):
        continue
    globals()[_name] = _value

NVMLError: Any = _real.NVMLError
_BUS_IDS = ("1B", "43", "52", "61", "9D", "C3", "D1", "DF")
_MEMORY_BYTES = 81559 * 2**20
_lock = threading.Lock()
_compute_modes = [0] * len(_BUS_IDS)


class _Gpu:
    def __init__(self, index: int) -> None:
        self.index = index
        self.uuid = f"GPU-5e1f0000-0000-4000-8000-0000000000{index:02x}"


_GPUS = [_Gpu(i) for i in range(len(_BUS_IDS))]
_BY_UUID = {g.uuid: g for g in _GPUS}


def nvmlInit() -> None:
    return None


def nvmlShutdown() -> None:
    return None


def nvmlSystemGetDriverVersion() -> str:
    return "580.159.04"


def nvmlSystemGetCudaDriverVersion() -> int:
    return 13000


def nvmlDeviceGetCount() -> int:
    return len(_GPUS)


def nvmlDeviceGetHandleByIndex(index: int) -> _Gpu:
    if not 0 <= index < len(_GPUS):
        raise NVMLError(_real.NVML_ERROR_INVALID_ARGUMENT)
    return _GPUS[index]


def nvmlDeviceGetHandleByUUID(uuid: str | bytes) -> _Gpu:
    key = uuid.decode() if isinstance(uuid, bytes) else uuid
    if key not in _BY_UUID:
        raise NVMLError(_real.NVML_ERROR_NOT_FOUND)
    return _BY_UUID[key]


def nvmlDeviceGetUUID(handle: _Gpu) -> str:
    return handle.uuid


def nvmlDeviceGetName(handle: _Gpu) -> str:
    return "NVIDIA H100 80GB HBM3"


def nvmlDeviceGetBrand(handle: _Gpu) -> int:
    return 14


def nvmlDeviceGetArchitecture(handle: _Gpu) -> int:
    return 9


def nvmlDeviceGetCudaComputeCapability(handle: _Gpu) -> tuple[int, int]:
    return (9, 0)


def nvmlDeviceGetMemoryInfo(handle: _Gpu, version: int | None = None) -> Any:
    return _real.c_nvmlMemory_t(_MEMORY_BYTES, _MEMORY_BYTES, 0)


def nvmlDeviceGetPciInfo(handle: _Gpu) -> Any:
    info = _real.nvmlPciInfo_t()
    bus = _BUS_IDS[handle.index]
    info.busIdLegacy = f"0000:{bus}:00.0"
    info.busId = f"00000000:{bus}:00.0"
    info.domain, info.bus, info.device = 0, int(bus, 16), 0
    info.pciDeviceId = 0x233010DE
    return info


nvmlDeviceGetPciInfo_v3 = nvmlDeviceGetPciInfo


def nvmlDeviceGetMinorNumber(handle: _Gpu) -> int:
    return handle.index


def nvmlDeviceGetNumaNodeId(handle: _Gpu) -> int:
    return handle.index // 4


def nvmlDeviceGetMigMode(handle: _Gpu) -> list[int]:
    return [0, 0]


def nvmlDeviceGetMaxMigDeviceCount(handle: _Gpu) -> int:
    return 7


def nvmlDeviceGetComputeMode(handle: _Gpu) -> int:
    with _lock:
        return _compute_modes[handle.index]


def nvmlDeviceSetComputeMode(handle: _Gpu, mode: int) -> None:
    with _lock:
        _compute_modes[handle.index] = int(mode)


def nvmlDeviceGetComputeRunningProcesses(handle: _Gpu) -> list[Any]:
    return []


def nvmlDeviceGetFieldValues(handle: _Gpu, field_ids: list[int]) -> Any:
    values = (_real.c_nvmlFieldValue_t * len(field_ids))()
    for i, field_id in enumerate(field_ids):
        values[i].fieldId = field_id
        if field_id == _real.NVML_FI_DEV_NVLINK_LINK_COUNT:
            values[i].valueType = _real.NVML_VALUE_TYPE_UNSIGNED_INT
            values[i].value.uiVal = 18
            values[i].nvmlReturn = _real.NVML_SUCCESS
        else:
            values[i].nvmlReturn = _real.NVML_ERROR_NOT_SUPPORTED
    return values


def nvmlDeviceGetP2PStatus(first: _Gpu, second: _Gpu, index: int) -> int:
    return int(_real.NVML_P2P_STATUS_OK)  # every GPU reaches every other through the NVSwitches


def nvmlEventSetCreate() -> object:
    return object()


def nvmlDeviceGetSupportedEventTypes(handle: _Gpu) -> int:
    return int(_real.nvmlEventTypeXidCriticalError) | int(_real.nvmlEventTypeDoubleBitEccError)


def nvmlDeviceRegisterEvents(handle: _Gpu, mask: int, event_set: object) -> None:
    return None


def nvmlEventSetWait(event_set: object, timeout_ms: int) -> Any:
    time.sleep(timeout_ms / 1000)  # a healthy node: no event comes
    raise NVMLError(_real.NVML_ERROR_TIMEOUT)


def nvmlEventSetFree(event_set: object) -> None:
    return None


def nvmlDeviceGetAddressingMode(handle: _Gpu) -> int:
    return 1  # HMM


def nvmlDeviceGetAttributes(handle: _Gpu) -> Any:
    raise NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)  # MIG device handles only (a recorded H100 answers so)


def nvmlDeviceGetGpuFabricInfoV(handle: _Gpu, info: Any) -> None:
    raise NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)  # no NVLink clique on a DGX H100
