"""1. annotate: NVTX stage ranges from code (`api`, over the ctypes `nvtx_client`), or with no source edits
from a stage spec (`spec`) installed in every Python process by `_startup/sitecustomize.py` (`startup`:
`wrap`, the post-import `importhook`, `mainhook` for the main module, `registry` of what both did); out
of the process, `check`, `envform` and `nsys_json` serve `clef-prof inject`. Standard library only."""
