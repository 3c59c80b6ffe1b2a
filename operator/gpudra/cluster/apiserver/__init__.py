"""The project's own in-process Kubernetes API server (aiohttp on 127.0.0.1: HTTPS under ``gpudra up``; bearer tokens
and RBAC: identity.py, rbac.py).

Faithful to what kopf, kubernetes_asyncio and kubectl rely on: server-set metadata, a global
resourceVersion, optimistic concurrency, typed lists, watches from a resourceVersion over a bounded history
(410 Expired), label and field selectors, merge / JSON / strategic (as merge, lists replaced) / apply
(as merge, CRD list-maps merged by key) patches, status subresources, finalizers, ownerReference garbage
collection, discovery, a minimal OpenAPI v3, the Table format, and CRDs that become served resources. Request
and response bodies are JSON, YAML (requests) or, for the built-in kinds, protobuf as kube-apiserver speaks it
(kubeproto/). Writes are decoded, defaulted and validated as kube-apiserver does it (``validation``). No admission
plugins, no controllers.
"""

from __future__ import annotations

from .server import EmbeddedAPIServer
from .status import APIStatusError

__all__ = ["APIStatusError", "EmbeddedAPIServer"]
