"""Suite-wide test settings.

Hypothesis explores new examples on every developer run, but CI (``CI=true``)
runs a derandomized profile: the same examples each time, so a red CI run is
reproducible and a green one is not luck. Failures print the blob to replay.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")
