"""clef_prof.request and clef_prof.enqueued: the NVTX rows nsys records (2022.4 and 2023.4), and a
no-op without a profiler (the id is not even computed)."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from conftest import ROOT
from recording import record

PROGRAM = """
import asyncio, clef_prof

with clef_prof.request("w1"):
    clef_prof.enqueued("w1")

async def main():
    async with clef_prof.request("a 1,x;y)"):        # unsafe characters become _
        clef_prof.enqueued("a 1,x;y)")
        await asyncio.sleep(0.001)

asyncio.run(main())

@clef_prof.request(lambda req, n: req["id"])
def handle(req, n):
    return n + 1

@clef_prof.request(lambda req: req["id"])
async def ahandle(req):
    await asyncio.sleep(0)
    return 7

assert handle({"id": "d1"}, 1) == 2
assert asyncio.run(ahandle({"id": "d2"})) == 7
with clef_prof.batch(request_ids=["w1", "a 1,x;y)"]):
    pass
"""


@pytest.mark.nsys("2022.4", "2023.4")
@pytest.mark.parametrize("version", ["2022.4", "2023.4"])
def test_rows_recorded(tmp_path, version):
    db = record(PROGRAM, tmp_path, version, env={"PYTHONPATH": str(ROOT)}, trace="nvtx")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute("SELECT eventType, text, \"end\" IS NULL FROM NVTX_EVENTS WHERE eventType != 75 "
                       "ORDER BY start").fetchall()
    con.close()
    assert rows == [(59, "request rid=w1", 0), (34, "enqueued rid=w1", 1),
                    (60, "request rid=a_1_x_y_", 0), (34, "enqueued rid=a_1_x_y_", 1),
                    (59, "request rid=d1", 0), (60, "request rid=d2", 0),
                    (59, "pooler n=2 rid=w1,a_1_x_y_", 0)]


NOOP = """
import asyncio, json, clef_prof
from clef_prof.annotate import nvtx_client

def boom(*a, **k):
    raise AssertionError("the id was computed with no profiler attached")

@clef_prof.request(boom)
def handle(x):
    return x * 2

@clef_prof.request(boom)
async def ahandle(x):
    return x * 3

async def main():
    async with clef_prof.request(boom):
        return await ahandle(2)

with clef_prof.request(boom):
    clef_prof.enqueued("r")
print(json.dumps({"on": nvtx_client.enabled(), "sync": handle(21), "async": asyncio.run(main()),
                  "wrapped": handle.__wrapped__.__name__}))
"""


def test_no_profiler_is_a_no_op():
    env = {k: v for k, v in os.environ.items() if k != "NVTX_INJECTION64_PATH"}
    env["PYTHONPATH"] = str(ROOT)
    p = subprocess.run([sys.executable, "-c", NOOP], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == {"on": False, "sync": 42, "async": 6, "wrapped": "handle"}
