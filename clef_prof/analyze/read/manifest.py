"""Reading the manifest `clef-prof record` writes beside a capture (judge.manifest holds a result against it)."""
from __future__ import annotations

import json
import os
from dataclasses import replace

from ...base.config import MANIFEST as NAME, StageConfig
from ...base.errors import ClefError


class ManifestError(ClefError):
    """A manifest that is missing, not a regular file, or not a JSON object."""


def read(path: str) -> dict:
    """The record manifest at `path` (a JSON object); one line (ManifestError) otherwise."""
    from ...base.safeio import check_regular

    if os.path.exists(path):
        try:
            check_regular(path, "manifest")
        except ClefError as exc:
            raise ManifestError(str(exc)) from None
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such manifest") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{path}: not a readable JSON manifest ({exc})") from None
    except RecursionError:
        raise ManifestError(f"{path}: not a readable JSON manifest (nested too deeply)") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: a manifest must be a JSON object with an \"export\" key")
    return data


def find_for(export: str) -> str | None:
    """The manifest beside an export: `manifest.json` in its folder naming it (or naming nothing)."""
    folder = os.path.dirname(os.path.abspath(export))
    path = os.path.join(folder, NAME)
    if not os.path.isfile(path):
        return None
    try:
        m = read(path)
    except ManifestError:
        return None
    named = m.get("export")
    if named is not None and not isinstance(named, str):
        return None
    if named and os.path.normpath(os.path.join(folder, named)) != os.path.normpath(os.path.abspath(export)):
        return None
    return path


def recorded_config(manifest: dict, where: str) -> StageConfig | None:
    """The stage configuration a capture was recorded with (`record --spec`): the manifest's
    "stage_config" snapshot, else (manifests older than it) the spec file it names in "spec",
    read again when it still exists; None when the capture was recorded without a spec.
    ManifestError when the manifest names a spec that neither gives (analyze would read the
    default stages, with zeros, and miss the real ones)."""
    snap = manifest.get("stage_config")
    if snap is not None:
        try:
            return StageConfig.from_dict(snap, where, source=f"recorded in {where}")
        except ClefError as exc:
            raise ManifestError(str(exc)) from None
    spec = manifest.get("spec")
    if spec is None:
        return None
    if not isinstance(spec, str) or not spec:
        raise ManifestError(f"{where}: \"spec\" is not a path to a stage spec; pass --spec or --stages")
    if not os.path.isfile(spec):
        raise ManifestError(f"{where}: recorded with the stage spec {spec}, which no longer exists (and the "
                            "manifest holds no copy of it): pass --spec, or --domain/--batch/--stages")
    from ...annotate.spec import load
    return replace(load(spec).config, source=f"spec {spec}, recorded in {where}")


def window_by_record(manifest: dict) -> bool:
    """Whether `clef-prof record` opened and closed the capture window (its manifest says how)."""
    return bool((manifest.get("window") or {}).get("mode"))


def edge_tolerance(manifest: dict) -> int:
    """Requests that may be in flight at one window edge: the load's concurrency (at least 1)."""
    load = manifest.get("load") or {}
    c = load.get("concurrency")
    return max(1, int(c)) if isinstance(c, (int, float)) and c else 16
