"""The embedded cluster behind `gpudra up`: API server, stand-in control plane, simulated nodes."""
