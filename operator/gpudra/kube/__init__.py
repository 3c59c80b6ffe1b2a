"""The client layer: the only place that talks to the Kubernetes API (through kubernetes_asyncio)."""
