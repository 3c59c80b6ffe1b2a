"""The simulated fleet's own controls: faults injected from outside the process (``gpudra sim fault``, GpuFault
objects), fleet files, recordings and copies of real clusters as simulated nodes. Simulation only: nothing in
the driver imports it."""
