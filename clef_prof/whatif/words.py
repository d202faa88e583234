"""The words of a what-if that its text and its HTML page share: metric names, signed figures and
intervals, each slope's verdict and the statements of the result."""
from __future__ import annotations

import math

from clef_prof.whatif.model import WhatIf

NAMES = {"throughput_rps": "throughput", "p50_ms": "p50 latency", "p99_ms": "p99 latency",
         "goodput_rps": "goodput"}


def _g(v, signed=True) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return f"{v:+.3g}" if signed else f"{v:.3g}"


def _iv(lo, hi, none: str = "—") -> str:
    return none if lo is None or not math.isfinite(lo) else f"[{_g(lo)}, {_g(hi)}]"


def verdict_text(sl) -> str:
    """critical, or hidden with the slope it could have detected, or too few servers."""
    if sl.verdict == "hidden":
        return (f"hidden (indistinguishable from 0; could detect ±{sl.detectable_pct_per_ms:.3g}% "
                f"{NAMES.get(sl.metric, sl.metric)} per +1 ms/request)")
    if sl.verdict == "too few servers":
        return f"too few servers ({sl.servers} over {sl.levels} levels; needs {sl.needed})"
    return "critical"


def _statements(result: WhatIf) -> list[str]:
    out = []
    for s in result.stages:
        for sl in s.slopes:
            name = NAMES.get(sl.metric, sl.metric)
            head = f"{sl.stage}, {name}: {verdict_text(sl)}"
            if sl.verdict != "too few servers":
                rng = ("linear up to" if sl.linear else "linearity not testable (2 levels); fitted up to"
                       if sl.linear is None else f"{sl.bend}; fitted up to")
                head += f"; {rng} +{sl.linear_max_ms:.3g} ms/request ({sl.servers} servers)"
            im = sl.implied
            if im is not None:
                cut = f"-{im.speedup_pct:g}% of {sl.stage} ({im.delta_ms:+.3g} ms/request)"
                head += (f". Implied by {cut}, an extrapolation: {_g(im.change_pct)}% {name} "
                         f"{_iv(im.lo, im.hi)}" if im.refused is None else
                         f". {cut}: not given, {im.refused}")
            out.append(head)
    return out
