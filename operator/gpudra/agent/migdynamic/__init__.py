"""The agent's dynamic MIG: which GPUs follow claims, and creating and destroying the MIG instances that claims'
allocations name."""
