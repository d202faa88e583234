"""Presentation of a `WhatIf`: terminal text (80 columns), Markdown and JSON."""
from __future__ import annotations

import dataclasses
import json

from clef_prof.whatif.model import WhatIf


def _rows(result: WhatIf):
    for s in result.stages:
        for sl in s.slopes:
            yield (sl.stage, sl.metric, f"{sl.pct_per_ms:+.3g}",
                   f"[{sl.pct_lo:+.3g}, {sl.pct_hi:+.3g}]", sl.verdict)


def _clean(v):
    """NaN (no estimate) becomes null so the JSON stays valid."""
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return None if isinstance(v, float) and v != v else v


def render(result: WhatIf, fmt: str) -> str:
    """`fmt`: "text", "markdown" or "json"."""
    head = ("stage", "metric", "%/ms", f"{result.confidence:.0%} interval", "verdict")
    if fmt == "json":
        return json.dumps(_clean(dataclasses.asdict(result)), indent=2, allow_nan=False)
    rows = [head, *_rows(result)]
    if fmt == "markdown":
        return "\n".join(["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(head)]
                         + ["| " + " | ".join(r) + " |" for r in rows[1:]]) + "\n"
    if fmt == "text":
        w = [max(len(r[i]) for r in rows) for i in range(len(head))]
        return "\n".join("  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip()
                         for r in rows) + "\n"
    raise ValueError(f"unknown format {fmt!r}: use text, markdown or json")
