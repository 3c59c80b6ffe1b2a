"""Validation of writes as kube-apiserver does it: decoding against Kubernetes' OpenAPI definitions, strict
field validation, defaults, the resource.k8s.io and core rules the schema cannot express, CRD structural schemas
and their CEL rules, and 400 / 422 ``Status`` errors shaped as Kubernetes shapes them."""

from __future__ import annotations

from .admission import MODES, Admission, Admitter

__all__ = ["MODES", "Admission", "Admitter"]
