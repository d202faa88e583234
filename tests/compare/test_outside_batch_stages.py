"""#35 B1: stages that run outside every batch range (bertsrv's `encode`: the response encoded per
request on the event loop, 1254 instances, none in a batch) are compared per request, as analyze
reports them: each arm's figure is analyze's and SQL's (the stage's summed range time over the
requests the batch ranges count), and a gate on them judges that figure, not 0 against 0.

Arms: the real gpu25-bertsrv capture and two windows sliced from it (main), and copies of those
three with every encode range half as long (pr): encode per request -50%, the rest unchanged."""
from __future__ import annotations

import json
import re

import pytest

from clef_prof.capture.slicing import slice_capture
from clicheck import run_main
from conftest import edited_copy, sql

WINDOWS = ((100_000_000, 800_000_000), (800_000_000, 1_500_000_000))
HALVE = """UPDATE NVTX_EVENTS SET "end" = start + ("end" - start) / 2
           WHERE eventType = 59 AND textId = (SELECT id FROM StringIds WHERE value = 'encode')"""
ENCODE_NS = """SELECT sum(e."end" - e.start) FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId
               WHERE e.eventType = 59 AND s.value = 'encode' AND e."end" IS NOT NULL"""
BATCH_NAMES = """SELECT coalesce(s.value, e.text) AS name FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
                 WHERE e.eventType = 59 AND name LIKE 'pooler n=%' AND e."end" IS NOT NULL"""


@pytest.fixture(scope="module")
def arms(capture, tmp_path_factory):
    out = tmp_path_factory.mktemp("outside")
    src = str(capture("gpu25-bertsrv"))
    main = [src]
    for i, (t0, t1) in enumerate(WINDOWS):
        slice_capture(src, str(out / f"main-{i}.sqlite"), t0, t1)
        main.append(str(out / f"main-{i}.sqlite"))
    pr = [str(edited_copy(p, out / f"pr-{i}.sqlite", HALVE)) for i, p in enumerate(main)]
    return {"main": main, "pr": pr}


def _sql_per_request_ms(path) -> float:
    (ns,), = sql(path, ENCODE_NS)
    requests = sum(int(re.search(r"n=(\d+)", name).group(1)) for name, in sql(path, BATCH_NAMES))
    return ns / requests / 1e6


def _compare(arms, *gates):
    argv = ["compare", "--arm", "main=" + ",".join(arms["main"]), "--arm", "pr=" + ",".join(arms["pr"]),
            "-f", "json", *[a for g in gates for a in ("--fail-if", g)]]
    return run_main(*argv)


def test_outside_stage_is_compared_per_request(arms):
    p = _compare(arms)
    assert p.returncode == 0, p.stderr
    comp = json.loads(p.stdout)
    row = next(m for m in comp["metrics"] if m["metric"] == "stages.encode.host_ms_per_request")
    for arm, paths in arms.items():
        per_capture = row["arms"][arm]["per_capture"]
        each = [json.loads(run_main("analyze", x, "-f", "json").stdout) for x in paths]
        assert all(d["stages"]["encode"]["outside_batch_instances"] == d["stages"]["encode"]["instances"] > 0
                   for d in each)
        assert per_capture == pytest.approx([d["stages"]["encode"]["host_ms_per_request"] for d in each], rel=1e-12)
        assert per_capture == pytest.approx([_sql_per_request_ms(x) for x in paths], rel=1e-12)
        # the batches are still counted as batches, not with the outside rows
        assert row["arms"][arm]["instances"] == sum(d["batches"] for d in each)
    assert 0.15 < row["arms"]["main"]["mean"] < 0.2          # 212.4 ms over 1264 requests in the whole capture
    assert row["change_pct"] == pytest.approx(-50, abs=0.1)
    assert row["beyond_noise"] is True
    # the batch's own figures are untouched by the outside rows
    pooler = next(m for m in comp["metrics"] if m["metric"] == "per_request.pooler_host_ms")
    assert pooler["change_pct"] == pytest.approx(0, abs=1e-9)
    assert any("outside batch ranges: compared per request" in n for n in comp["notes"])


def test_a_gate_on_an_outside_stage_judges_its_figure(arms):
    fired = _compare(arms, "stages.encode.host_ms_per_request < -10%")
    assert fired.returncode == 1, fired.stderr
    assert "stages.encode.host_ms_per_request" in fired.stderr
    held = _compare(arms, "stages.encode.host_ms_per_request > +5%")
    assert held.returncode == 0, held.stderr
