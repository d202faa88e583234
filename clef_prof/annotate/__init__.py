"""1. annotate: NVTX stage ranges from code (`api`, over the ctypes `nvtx_client`), or with no source edits
from a stage spec (`spec`) that `inject` installs through an import hook (`_startup/sitecustomize.py`).
Runs inside the profiled server: standard library only."""
