"""Pure: a node's hardware inventory -> DRA devices -> ResourceSlice specs, under NVIDIA's names.

No I/O and no awaits (``classes`` reads one file shipped inside this package). Modules:
``names`` (device names and their order), ``build`` (devices from an inventory), ``slices`` (devices split
into ResourceSlice specs), ``summary`` (counts for tables and metrics), ``classes`` (the DeviceClasses).
"""
