"""The names the PCI bus gives an NVIDIA GPU: its vendor id and the kernel drivers that may hold it. Pure."""

NVIDIA_DRIVER = "nvidia"
VFIO_DRIVER = "vfio-pci"
NVIDIA_VENDOR = 0x10DE
