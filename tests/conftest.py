"""Shared test settings."""

import os

# No test may touch the network: a model name must fail fast, not retry.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from hypothesis import HealthCheck, settings

# A loaded 2-core CI machine must not fail a property test for being slow:
# no per-example deadline and no too-slow health check, for every test (a test's
# own @settings inherits these for whatever it does not set).
settings.register_profile("pagedkit", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("pagedkit")

# The models in the tests are tiny: one thread beats two (and a loaded
# machine punishes oversubscribed BLAS threads badly).
torch.set_num_threads(1)

# Notebooks under tests/ are fixtures of other tests (the browser test opens
# one in JupyterLab), not lessons for nbval to run.
collect_ignore_glob = ["*/*.ipynb", "*.ipynb"]
