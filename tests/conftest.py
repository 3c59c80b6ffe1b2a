"""Fixtures shared by the integration and e2e tiers, and the hypothesis profile of every tier."""

from hypothesis import settings

from browserkit import browser
from clusterkit import start_cluster

# No per-example deadline: these machines are shared and noisy, and a timing is not a behaviour a test may assert
# (speed is measured by bench/, as ratios within one run).
settings.register_profile("gpudra", deadline=None)
settings.load_profile("gpudra")

__all__ = ["browser", "start_cluster"]
