"""The agent's dynamic MIG: create and destroy the MIG instances that claims' allocations name."""
