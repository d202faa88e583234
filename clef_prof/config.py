"""Which NVTX ranges describe a server's pooler. Standard library only, so that light
entry points (record, demo-server, inject) never import pandas."""
from __future__ import annotations

from dataclasses import dataclass

DEFAULT_DOMAIN = "clef"
DEFAULT_BATCH = "pooler"
DEFAULT_STAGES = ("parse", "index", "transfer", "head", "encode")


@dataclass(frozen=True)
class StageConfig:
    """The NVTX domain, the outer batch range and the stage names; `findings`: threshold
    overrides for the findings rules, as (key, value) pairs."""

    domain: str = DEFAULT_DOMAIN
    batch: str = DEFAULT_BATCH
    stages: tuple[str, ...] = DEFAULT_STAGES
    findings: tuple[tuple[str, float], ...] = ()
