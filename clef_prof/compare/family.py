"""Families of verdicts: many figures judged at once (compare's rows and function tables, bench's
metrics over its cases), each at 1 - α. Were nothing changed, the chance that at least one says
"beyond noise" grows with their number: up to 1 - (1 - α)^m (`welch.family_bound`). Each report
states it; `--family holm` applies Holm's step-down correction (`welch.holm`) to the verdicts and
to the gates over several figures, holding that chance to α whatever the figures' dependence.
Calibrated by tests/compare/test_family.py (seeded simulation of correlated figures through these
functions and `welch.unit_interval`)."""
from __future__ import annotations

import numpy as np

from . import welch


def apply_family(rows: list[dict], family: str, confidence: float) -> dict:
    """The family's summary; with family "holm" each row's verdict (rows with a "p": those judged)
    becomes Holm's at level 1 - confidence, its adjusted p in "p_family"."""
    judged = [r for r in rows if r.get("p") is not None]
    m = len(judged)
    alpha = 1.0 - confidence
    if family == "holm" and m:
        adj = welch.holm(np.array([r["p"] for r in judged]))
        for r, pa in zip(judged, adj.tolist()):
            beyond = bool(pa <= alpha)
            r.update({"p_family": pa, "beyond_noise": beyond, "verdict": "beyond noise" if beyond else "within noise"})
    bound = alpha if family == "holm" else welch.family_bound(m, confidence)
    return {"method": family, "figures": m, "any_beyond_if_none_changed_pct": 100.0 * bound if m else 0.0}


def family_line(label: str, f: dict, confidence: float) -> str | None:
    """One line stating a family's false-positive rate (None for a family of one or none)."""
    m = f["figures"]
    if m < 2:
        return None
    conf = f"{100 * confidence:g}%"
    if f["method"] == "holm":
        return (f"Family ({label}): {m} figures judged with Holm's correction: were nothing changed, the chance "
                f"that any says beyond noise is at most {f['any_beyond_if_none_changed_pct']:.0f}%; each interval "
                f"shown is the figure's own {conf} one.")
    return (f"Family ({label}): {m} figures judged at {conf} each: were nothing changed, the chance that any "
            f"says beyond noise is up to {f['any_beyond_if_none_changed_pct']:.0f}% (1 - {confidence:g}^{m}); "
            f"--family holm holds it to {100 * (1 - confidence):.0f}%.")


def family_gates(verdicts: list[dict], family: str, confidence: float) -> list[dict]:
    """With family "holm", the gates read on intervals (basis "ci") over several figures fire by
    Holm's correction of their one-sided p (the interval's end passes the threshold at level
    (1 - confidence) / 2), holding the chance that any fires when nothing passed its threshold to
    that level; exact and not-judged gates are as they were."""
    noisy = [v for v in verdicts if v["basis"] == "ci" and v.get("p_gate") is not None]
    for v in verdicts:
        v["family"] = family if v in noisy else "none"
    if family != "holm" or len(noisy) < 2:
        return verdicts
    adj = welch.holm(np.array([v["p_gate"] for v in noisy]))
    for v, pa in zip(noisy, adj.tolist()):
        v.update({"p_family": pa, "fired": bool(pa <= (1.0 - confidence) / 2.0), "family_size": len(noisy)})
    return verdicts
