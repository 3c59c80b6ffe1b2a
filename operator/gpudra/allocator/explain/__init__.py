"""The allocator's words for a failure: the nearest nodes and devices, and the explanation a user reads."""
