"""The Trace Event format's rules (the Chrome "Trace Event Format" document), checked on a trace
dict: what Perfetto's trace_processor needs to import it without dropping events."""
from __future__ import annotations

PHASES = {"B", "E", "X", "i", "I", "b", "n", "e", "s", "t", "f", "M", "C", "P", "O", "N", "D"}


def violations(doc: dict) -> list[str]:
    out = []
    ev = doc.get("traceEvents")
    if not isinstance(ev, list):
        return ["traceEvents is not a list"]
    named_p, named_t = set(), set()
    for e in ev:
        if e.get("ph") == "M":
            if e.get("name") == "process_name":
                named_p.add(e["pid"])
            elif e.get("name") == "thread_name":
                named_t.add((e["pid"], e["tid"]))
            if not isinstance(e.get("args", {}).get("name"), str):
                out.append(f"metadata without a name: {e}")
    stacks: dict[tuple, list] = {}
    flows: dict[object, list] = {}
    slices: dict[tuple, list] = {}          # (pid, tid) -> (start, end) of B/E and X slices
    for e in sorted((e for e in ev if e.get("ph") != "M"), key=lambda e: e["ts"]):
        ph = e.get("ph")
        if ph not in PHASES:
            out.append(f"unknown ph {ph!r}")
            continue
        if not isinstance(e.get("pid"), int) or not isinstance(e.get("tid"), int):
            out.append(f"pid/tid not integers: {e}")
            continue
        if not isinstance(e.get("ts"), (int, float)) or e["ts"] < 0:
            out.append(f"bad ts: {e}")
        key = (e["pid"], e["tid"])
        if e["pid"] not in named_p:
            out.append(f"pid {e['pid']} has no process_name")
        if key not in named_t:
            out.append(f"thread {key} has no thread_name")
        if ph == "B":
            stacks.setdefault(key, []).append(e)
        elif ph == "E":
            st = stacks.get(key)
            if not st:
                out.append(f"E without B on {key} at {e['ts']}")
            else:
                b = st.pop()
                slices.setdefault(key, []).append((b["ts"], e["ts"]))
        elif ph == "X":
            if not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0:
                out.append(f"X with a bad duration: {e}")
            else:
                slices.setdefault(key, []).append((e["ts"], e["ts"] + e["dur"]))
        elif ph in ("s", "t", "f"):
            if "id" not in e:
                out.append(f"flow event without id: {e}")
            flows.setdefault(e.get("id"), []).append(e)
    for key, st in stacks.items():
        if st:
            out.append(f"{len(st)} B without E on {key}")
    for key, sl in slices.items():             # slices of one thread nest: none overlaps another partly
        sl.sort(key=lambda s: (s[0], -s[1]))
        open_: list[float] = []
        for s0, s1 in sl:
            while open_ and open_[-1] <= s0 + 1e-6:      # µs floats: a ns of slack
                open_.pop()
            if open_ and s1 > open_[-1] + 1e-6:
                out.append(f"slices overlap without nesting on {key}: ends {open_[-1]} and ({s0}, {s1})")
            open_.append(s1)
    for fid, fs in flows.items():
        phs = [f["ph"] for f in fs]
        if phs.count("s") != 1 or phs.count("f") != 1:
            out.append(f"flow {fid}: {phs}, not one s and one f")
            continue
        s, f = (next(x for x in fs if x["ph"] == p) for p in ("s", "f"))
        if f["ts"] < s["ts"]:
            out.append(f"flow {fid} ends before it starts")
        for x in (s, f):                       # each end binds to a slice enclosing it on its thread
            key = (x["pid"], x["tid"])
            if not any(a <= x["ts"] <= b for a, b in slices.get(key, [])):
                out.append(f"flow {fid} {x['ph']} at {x['ts']} has no enclosing slice on {key}")
    return out
