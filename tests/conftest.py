"""Shared test settings."""

import os

# No test may touch the network: a model name must fail fast, not retry.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

# The models in the tests are tiny: one thread beats two (and a loaded
# machine punishes oversubscribed BLAS threads badly).
torch.set_num_threads(1)

# Notebooks under tests/ are fixtures of other tests (the browser test opens
# one in JupyterLab), not lessons for nbval to run.
collect_ignore_glob = ["*/*.ipynb", "*.ipynb"]
