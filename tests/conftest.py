import os

# Single-threaded math in the test process: distributed tests start several workers on 2 cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Fixtures shared by the hub tests (fake_hub, hub_api, sources).
pytest_plugins = ("hub_support",)
