"""Fixtures shared by the integration and e2e tiers."""

from clusterkit import start_cluster

__all__ = ["start_cluster"]
