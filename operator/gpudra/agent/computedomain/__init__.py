"""The compute-domain.nvidia.com driver of the node agent and the IMEX daemon's registration."""
