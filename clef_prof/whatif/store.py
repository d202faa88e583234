"""The what-if file: the observations (one per fresh server) that every analysis is re-run from.

Saving the observations, not only the slopes, lets `--from` and `predict` re-analyse a run with
another confidence or a newer analysis and still agree with each other."""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from clef_prof.base.errors import ClefError
from clef_prof.whatif.model import METRICS, Observation

SCHEMA = "clef-prof/whatif/1"
_FIELDS = {f.name for f in dataclasses.fields(Observation)}


def dump(observations: list[Observation], meta: dict | None = None) -> dict:
    """The file's JSON object: schema, the run's metadata (command, load, design) and observations."""
    obs = []
    for o in observations:
        d = dataclasses.asdict(o)
        d["metrics"] = {k: v for k, v in o.metrics.items() if math.isfinite(v)}
        obs.append(d)
    return {"schema": SCHEMA, "meta": meta or {}, "observations": obs}


def save(path: str | Path, observations: list[Observation], meta: dict | None = None) -> None:
    Path(path).write_text(json.dumps(dump(observations, meta), indent=2, allow_nan=False) + "\n")


def load(path: str | Path) -> tuple[list[Observation], dict]:
    """Observations and metadata of a what-if file; one clear ClefError for anything else."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ClefError(f"{path}: not a clef-prof what-if file ({e.__class__.__name__})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ClefError(f"{path}: not a clef-prof what-if file (schema is not {SCHEMA})")
    out = []
    for i, d in enumerate(doc.get("observations") or []):
        try:
            if not isinstance(d, dict) or set(d) - _FIELDS:
                raise TypeError
            m = d.get("metrics") or {}
            if not isinstance(m, dict) or set(m) - set(METRICS) or not all(
                    isinstance(v, (int, float)) and math.isfinite(v) for v in m.values()):
                raise TypeError
            out.append(Observation(**{**d, "metrics": {k: float(v) for k, v in m.items()}}))
        except TypeError:
            raise ClefError(f"{path}: observation {i} is not a what-if observation") from None
    if not out:
        raise ClefError(f"{path}: no observations")
    return out, doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
