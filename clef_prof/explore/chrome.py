"""Request journeys as Chrome Trace Event JSON (ui.perfetto.dev, chrome://tracing, trace_processor).

What goes in, for the selected requests:
- each request as a `B`/`E` slice `request <rid>` with its segments nested in it as `X` slices,
  on a request lane of its process: requests that overlap in time (coroutine handlers on one
  thread) go on separate lanes, so that slices nest on every lane; lanes are named
  `requests <k> (thread <tid>)` after the thread of the first request on them;
- the batches they were in, as `B`/`E` slices on the batch's own thread, their stage ranges
  nested in them as `X` slices;
- the GPU work launched inside those batches (kernels, copies, memsets, graphs) as `X` slices
  on GPU lanes of the process (one per device, more where records overlap);
- a flow arrow (`s` on the request's `batch` segment, `f` with `bp: "e"` on its batch, bound by
  one id) from each request to its batch;
- `process_name`/`thread_name` metadata for every pid/tid used.

Timestamps are µs from the session start (ns precision, 3 decimals). Synthetic lanes have tids
above 2^31 (real tids are below 2^22 on Linux), so they never collide with a real one.
"""
from __future__ import annotations

import heapq

import numpy as np

SEGMENT_NAMES = ("receive", "queue", "batch", "after_batch", "encode", "send")
LANE_BASE = 1 << 31


def _us(ns) -> float:
    return round(int(ns) / 1000.0, 3)


def lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """A lane per interval such that intervals on one lane do not overlap (greedy, by start): the
    fewest lanes that hold them."""
    order = np.argsort(start, kind="stable")
    out = np.zeros(len(start), np.int64)
    free: list[tuple[int, int]] = []        # (end of the lane's last interval, lane)
    n = 0
    for i in order:
        if free and free[0][0] <= start[i]:
            _, lane = heapq.heappop(free)
        else:
            lane, n = n, n + 1
        out[i] = lane
        heapq.heappush(free, (int(end[i]), lane))
    return out


def trace(requests, batches, stages, gpu, names: dict, slot_names: list[str]) -> dict:
    """The trace as a dict (`json.dump` it). `requests`: the selected rows of `Analysis.journeys`;
    `batches`: the batches' start, end, gtid (all of them: `batch` indexes it); `stages`: stage
    instances (stage, start, end, gtid, batch); `gpu`: GPU intervals (gpid, start, end, slot, batch,
    kind, device) or None; `names`: {"process": {pid: name}, "thread": {(pid, tid): name}}."""
    ev: list[dict] = []
    meta_p: dict[int, str] = {}
    meta_t: dict[tuple[int, int], str] = {}

    def pid_tid(g):
        g = int(g)
        return (g >> 24) & 0xFFFFFF, g & 0xFFFFFF

    def proc(pid):
        meta_p.setdefault(pid, names.get("process", {}).get(pid) or f"process {pid}")

    # requests, on lanes per process
    rg = requests["gtid"].astype(np.int64)
    rpid = (rg >> 24) & 0xFFFFFF
    lane = np.zeros(len(requests), np.int64)
    for p in np.unique(rpid):
        m = rpid == p
        lane[m] = lanes(requests["start"][m], np.where(requests["cut"][m], requests["start"][m], requests["end"][m]))
    sel_batches = sorted({int(b) for b in requests["batch"] if b >= 0})
    flow = {}
    for i in range(len(requests)):
        pid, tid = pid_tid(rg[i])
        proc(pid)
        ltid = LANE_BASE + int(lane[i])
        meta_t.setdefault((pid, ltid), f"requests {int(lane[i])} (thread {tid})")
        r0 = int(requests["start"][i])
        r1 = r0 + int(requests["e2e_ns"][i])
        rid = str(requests["rid"][i])
        args = {"rid": rid, "thread": tid, "e2e_ns": int(requests["e2e_ns"][i]),
                "unattributed_ns": int(requests["unattributed_ns"][i]), "batch": int(requests["batch"][i]),
                "cut_by_window": bool(requests["cut"][i] and not requests["reversed"][i])}
        ev.append({"ph": "B", "name": f"request {rid}", "cat": "request", "pid": pid, "tid": ltid, "ts": _us(r0),
                   "args": args})
        for s in SEGMENT_NAMES:
            d = int(requests[f"{s}_ns"][i])
            start = _segment_start(requests, i, s)
            if start is None:
                continue
            start = min(max(start, r0), r1)
            ev.append({"ph": "X", "name": s.replace("_", " "), "cat": "segment", "pid": pid, "tid": ltid,
                       "ts": _us(start), "dur": _us(min(d, r1 - start)), "args": {"ns": d}})
        ev.append({"ph": "E", "pid": pid, "tid": ltid, "ts": _us(r1)})
        b = int(requests["batch"][i])
        if b >= 0:
            fid = i + 1
            flow.setdefault(b, []).append(fid)
            ev.append({"ph": "s", "name": "to batch", "cat": "flow", "id": fid, "pid": pid, "tid": ltid,
                       "ts": _us(requests["batch_start"][i])})

    # the batches and their stages, on their own threads
    bs, be, bg = batches["start"], batches["end"], batches["gtid"].astype(np.int64)
    for b in sel_batches:
        pid, tid = pid_tid(bg[b])
        proc(pid)
        meta_t.setdefault((pid, tid), names.get("thread", {}).get((pid, tid)) or f"thread {tid}")
        ev.append({"ph": "B", "name": "batch", "cat": "batch", "pid": pid, "tid": tid, "ts": _us(bs[b]),
                   "args": {"batch": b, "size": int(batches["size"][b]) if "size" in batches else None}})
        for fid in flow.get(b, []):
            ev.append({"ph": "f", "bp": "e", "name": "to batch", "cat": "flow", "id": fid, "pid": pid, "tid": tid,
                       "ts": _us(bs[b])})
        m = stages["batch"] == b
        for s, s0, s1 in zip(stages["stage"][m], stages["start"][m], stages["end"][m]):
            ev.append({"ph": "X", "name": str(s), "cat": "stage", "pid": pid, "tid": tid, "ts": _us(s0),
                       "dur": _us(s1 - s0)})
        ev.append({"ph": "E", "pid": pid, "tid": tid, "ts": _us(be[b])})

    # the GPU work launched inside them
    if gpu is not None and len(gpu) and sel_batches:
        keep = np.isin(gpu["batch"], sel_batches) & (gpu["end"] >= gpu["start"])
        g = gpu[keep]
        gp = (g["gpid"].astype(np.int64) >> 24) & 0xFFFFFF
        dev = g["device"] if "device" in g else np.zeros(len(g), np.int64)
        for p in np.unique(gp):
            for d in np.unique(dev[gp == p]):
                m = (gp == p) & (dev == d)
                ln = lanes(g["start"][m], g["end"][m])
                for k, s0, s1, slot, kind, b in zip(ln, g["start"][m], g["end"][m], g["slot"][m], g["kind"][m],
                                                   g["batch"][m]):
                    ptid = LANE_BASE + (1 << 20) + int(d) * 1024 + int(k)
                    proc(int(p))
                    meta_t.setdefault((int(p), ptid), f"GPU {int(d)} lane {int(k)}")
                    where = slot_names[int(slot)] if 0 <= int(slot) < len(slot_names) else "?"
                    ev.append({"ph": "X", "name": f"{kind} ({where})", "cat": "gpu", "pid": int(p), "tid": ptid,
                               "ts": _us(s0), "dur": _us(s1 - s0), "args": {"batch": int(b)}})

    meta = [{"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": n}} for p, n in meta_p.items()]
    meta += [{"ph": "M", "name": "thread_name", "pid": p, "tid": t, "args": {"name": n}}
             for (p, t), n in meta_t.items()]
    ev.sort(key=lambda e: e["ts"])         # stable: at one time, the order they were made in
    return {"traceEvents": meta + ev, "displayTimeUnit": "ns",
            "otherData": {"producer": "clef-prof export --chrome-trace", "requests": len(requests),
                          "batches": len(sel_batches)}}


def _segment_start(rows, i: int, seg: str):
    """Where segment `seg` of journey i starts (ns), None when it has no start of its own."""
    pts = {"receive": rows["start"][i], "queue": rows["enqueue"][i], "batch": rows["batch_start"][i],
           "after_batch": rows["batch_end"][i], "encode": rows["encode_start"][i],
           "send": rows["encode_end"][i] if rows["encode_start"][i] >= 0 else rows["batch_end"][i]}
    need = {"receive": rows["enqueue"][i], "queue": rows["batch_start"][i] if rows["enqueue"][i] >= 0 else -1,
            "batch": rows["batch_start"][i], "after_batch": rows["encode_start"][i] if rows["batch_end"][i] >= 0 else -1,
            "encode": rows["encode_start"][i], "send": pts["send"]}
    if need[seg] < 0 or pts[seg] < 0:
        return None
    return int(pts[seg])
