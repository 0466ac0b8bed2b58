"""Configuration of the repository's own test run (the plugin itself lives in gradcheck.plugin)."""

import os

from hypothesis import HealthCheck, settings

# Deterministic property tests: a fixed seed and no example database, as in grading.
settings.register_profile("repo", derandomize=True, database=None, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repo"))
