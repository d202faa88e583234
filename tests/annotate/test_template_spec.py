"""annotations/pytorch-server-template.toml, as docs/profile-your-own-server.md uses it: a plain
aiohttp server shaped like the template (tests/programs/myserver) recorded with no source edit
and analyzed into a per-stage table. The per-request stages lie outside the batch ranges, the
per-batch ones inside, once per batch; requests are the batch ranges' sizes (plain SQL)."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from conftest import ROOT, nsys_bin
from httpcheck import free_port

SPEC = ROOT / "annotations" / "pytorch-server-template.toml"


@pytest.mark.nsys("2023.4")
def test_the_template_records_a_plain_aiohttp_server(tmp_path):
    port = free_port()
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"texts": ["the quick brown fox jumps over the lazy dog"]}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "programs")])}
    clef = [sys.executable, "-m", "clef_prof"]
    p = subprocess.run([*clef, "record", "--out", str(tmp_path / "rec"), "--spec", str(SPEC), "--window", "nsys",
                        "--preset", "none", "--nsys", str(nsys_bin("2023.4")), "--url", f"http://127.0.0.1:{port}",
                        "--request-path", "/embed", "--request-body", str(body), "--warmup", "0.5",
                        "--duration", "1.5", "--quiet", "--", sys.executable, "-m", "myserver.app", "--port",
                        str(port)], capture_output=True, text=True, env=env, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    a = subprocess.run([*clef, "analyze", str(tmp_path / "rec"), "--spec", str(SPEC), "-f", "json"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert a.returncode == 0, a.stderr
    r = json.loads(a.stdout)
    con = sqlite3.connect(f"file:{tmp_path / 'rec' / 'capture.sqlite'}?mode=ro", uri=True)
    # a batch range still open when the capture stopped is closed by nsys at the session's end
    # (or left without an end): cut at the edge, counted apart
    sizes, cut = [], 0
    for text, end, session_end in con.execute(
            "SELECT COALESCE(e.text, s.value), e.[end], (SELECT duration FROM ANALYSIS_DETAILS) FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE COALESCE(e.text, s.value) LIKE 'pooler n=%'"):
        if end is None or end >= session_end:
            cut += 1
        else:
            sizes.append(int(text.split("n=")[1].split()[0]))
    con.close()
    assert r["batches"] == len(sizes) > 10 and r["requests"] == sum(sizes)
    assert r["excluded"]["cut_at_edges"].get("pooler", 0) == cut <= 1
    stages = r["stages"]
    assert list(stages) == ["parse", "tokenize", "transfer", "forward", "readback", "encode"]
    for name in ("tokenize", "transfer", "forward", "readback"):          # once per batch, inside it
        assert stages[name]["instances"] == r["batches"] and stages[name]["outside_batch_instances"] == 0
    for name in ("parse", "encode"):                                      # once per HTTP request, outside
        s = stages[name]
        assert s["instances"] == s["outside_batch_instances"] > 0
        assert abs(s["instances"] - r["requests"]) <= 2 * 16                 # requests in flight at the edges
