"""MIG: pure layout validation, placement search, plans (current -> desired) and demand packing."""
