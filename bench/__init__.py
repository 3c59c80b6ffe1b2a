"""gpudra benchmarks: run with `make bench`."""
