"""One shared instance of each equal immutable value, for the parts of published objects that repeat across a
fleet: a device's attributes (``productName``, ``driverVersion``, ``pciBusID``: the same on every dgx-h100) and
capacities. Every parse of a ResourceSlice (the agent's own, the stand-in scheduler's, the controller's) then
points at the same few values instead of holding its own copy of each: about 0.5 KiB a value, 13 values a GPU.

The values must be frozen models (an assignment raises), so that no holder can change another's. The table holds
them weakly: a value no parsed object uses any more goes, and the table never grows beyond what is alive. It is
shared by every thread of the process (the controller runs in one of its own in ``gpudra up``).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable
from typing import Generic, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


class Interner(Generic[M]):
    """Equal values (by a key the caller computes) made one: ``interned(key, value)`` is the first value seen for
    ``key`` while it lives, else ``value`` itself."""

    def __init__(self, model: type[M]) -> None:
        if not model.model_config.get("frozen"):
            raise TypeError(f"only frozen models can be shared: {model.__name__} is not")
        self._values: weakref.WeakValueDictionary[Hashable, M] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def interned(self, key: Hashable, value: M) -> M:
        with self._lock:
            known = self._values.get(key)
            if known is not None:
                return known
            self._values[key] = value
            return value

    def __len__(self) -> int:
        return len(self._values)
