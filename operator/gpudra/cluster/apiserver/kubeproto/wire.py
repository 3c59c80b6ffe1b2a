"""The ``application/vnd.kubernetes.protobuf`` wire form of kube-apiserver, for the built-in kinds.

A body is the magic prefix ``k8s\\x00`` and a ``runtime.Unknown`` envelope: the object's apiVersion and kind, and
the protobuf message of the object as bytes. A watch streams ``meta.v1.WatchEvent`` messages, each preceded by
its length (4 bytes, big-endian) and without the envelope; the event's object is enveloped. Kinds with no
message (custom resources, and what this server does not serve) have no protobuf form, as on a real server.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import Any

from google.protobuf import symbol_database
from google.protobuf.message import Message

from . import pb
from .convert import ConversionError, from_json, to_json

PROTOBUF = "application/vnd.kubernetes.protobuf"
WATCH_STREAM = PROTOBUF + ";stream=watch"
MAGIC = b"k8s\x00"
_META = "k8s.io.apimachinery.pkg.apis.meta"


@functools.cache
def _symbols() -> symbol_database.SymbolDatabase:
    for module in pkgutil.iter_modules(pb.__path__):
        importlib.import_module(f"{pb.__name__}.{module.name}")
    return symbol_database.Default()


def _package(group: str) -> str:
    """The proto package prefix of an API group, as Kubernetes' go-to-protobuf names it."""
    if group == "":
        return "k8s.io.api.core"
    if group == "meta.k8s.io":
        return _META
    return "k8s.io.api." + group.split(".")[0]


def message_type(api_version: str, kind: str) -> type[Message] | None:
    """The message class of ``kind`` in ``api_version``, or of the meta kind (Status, DeleteOptions, ...) that
    every group version carries; None when there is none."""
    group, _, version = api_version.rpartition("/")
    if not version or not kind:
        return None
    symbols = _symbols()
    for name in (f"{_package(group)}.{version}.{kind}", f"{_META}.v1.{kind}"):
        try:
            found: type[Message] = symbols.GetSymbol(name)
        except KeyError:
            continue
        return found
    return None


def _unknown() -> Message:
    cls: type[Message] = _symbols().GetSymbol("k8s.io.apimachinery.pkg.runtime.Unknown")
    return cls()


def decode(body: bytes) -> dict[str, Any]:
    """A protobuf request body -> the JSON object; ValueError with a message a client can act on."""
    if not body.startswith(MAGIC):
        raise ValueError("the body does not start with the protobuf magic number k8s\\x00")
    envelope: Any = _unknown()
    try:
        envelope.ParseFromString(body[len(MAGIC) :])
    except Exception as exc:  # protobuf's DecodeError
        raise ValueError(f"the protobuf envelope cannot be decoded: {exc}") from exc
    api_version, kind = envelope.typeMeta.apiVersion, envelope.typeMeta.kind
    cls = message_type(api_version, kind)
    if cls is None:
        raise ValueError(f'no kind "{kind}" is registered for version "{api_version}"')
    try:
        message = cls.FromString(envelope.raw)
        obj = to_json(message)
    except ConversionError:
        raise
    except Exception as exc:
        raise ValueError(f"the {kind} cannot be decoded from protobuf: {exc}") from exc
    return {"kind": kind, "apiVersion": api_version, **obj}


def _message(obj: dict[str, Any]) -> Message:
    api_version, kind = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
    cls = message_type(api_version, kind)
    if cls is None:
        raise ConversionError("", f"{api_version} {kind} has no protobuf form")
    try:
        return from_json(cls(), obj)
    except ConversionError:
        raise
    except (ValueError, TypeError, OverflowError) as exc:
        raise ConversionError("", str(exc)) from exc


def _envelope(api_version: str, kind: str, raw: bytes) -> bytes:
    envelope: Any = _unknown()
    envelope.typeMeta.apiVersion = api_version
    envelope.typeMeta.kind = kind
    envelope.raw = raw
    return bytes(MAGIC + envelope.SerializeToString())


def encode(obj: dict[str, Any]) -> bytes:
    """A JSON object (with apiVersion and kind) -> its protobuf body; ConversionError when it has none."""
    raw = _message(obj).SerializeToString()
    return _envelope(str(obj["apiVersion"]), str(obj["kind"]), raw)


def watch_frame(event_type: str, obj: dict[str, Any]) -> bytes:
    """One watch event as a length-prefixed ``WatchEvent`` frame."""
    event: Any = _symbols().GetSymbol(f"{_META}.v1.WatchEvent")()
    event.type = event_type
    event.object.raw = encode(obj)
    data = event.SerializeToString()
    return bytes(len(data).to_bytes(4, "big") + data)


def has_protobuf(api_version: str, kind: str) -> bool:
    return message_type(api_version, kind) is not None


def prefers_protobuf(accept: str) -> bool:
    """Whether content negotiation on this Accept header picks protobuf over JSON (highest q, then order)."""
    best: tuple[float, int] | None = None
    chosen = ""
    for position, item in enumerate(accept.split(",")):
        media, *params = (p.strip() for p in item.split(";"))
        options = dict(p.partition("=")[::2] for p in params)
        if "as" in options:  # a Table or metadata-only view, handled elsewhere
            continue
        try:
            quality = float(options.get("q", "1"))
        except ValueError:
            continue
        if media.lower() not in (PROTOBUF, "application/json", "application/*", "*/*") or quality <= 0:
            continue
        rank = (-quality, position)
        if best is None or rank < best:
            best, chosen = rank, media.lower()
    return chosen == PROTOBUF
