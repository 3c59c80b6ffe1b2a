"""Pydantic models of the Kubernetes objects gpudra uses, its CRDs and the opaque configs. Pure: no I/O."""
