"""The real-GPU check (``hack/realgpu/run``, ``python -m gpudra.realgpu``): gpudra's real agent on this machine's
GPUs against an embedded API server, step by step, with a JSON summary; read-only for the hardware
(hack/realgpu/README.md)."""
