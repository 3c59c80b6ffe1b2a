"""The agent's static MIG: apply the node's desired MigLayout state to its GPUs, safely, step by step."""
