#!/usr/bin/env python3
"""Check the demo server's GPU workload without nsys: per-request CUDA counts from torch.profiler,
then a few seconds of HTTP load with /start_profile and /stop_profile.

    PYTHONPATH=. python3 scripts/gpu-demo-check.py [--seconds 5]

Expected per request (both variants): 15 cudaLaunchKernel in head, 1 cudaGraphLaunch, 3424 bytes
host to device; main 9 H2D copies from pageable memory (+ 9 syncs), pr 3 from pinned memory;
one DtoH copy per batch. Prints one JSON object per variant, exit 1 when a count is off.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time


def counts(variant: str, sizes=(16, 7, 1, 16)) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from clef_prof.record.demo_server import GpuPooler, index_request, parse_request
    from clef_prof.record.load import make_bodies

    pooler = GpuPooler(variant)
    bodies = make_bodies(200, 1, n=16, seed=3)

    def batch(n):
        metas = [index_request(parse_request(b)) for b in bodies[:n]]
        dev = pooler.transfer(metas)
        pooler.head(dev)

    for n in sizes:       # warm
        batch(n)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for n in sizes:
            batch(n)
        torch.cuda.synchronize()
    req, nb = sum(sizes), len(sizes)
    api, h2d, d2h, kinds = {}, 0, 0, {}
    for e in prof.events():
        name = e.name
        if name.startswith("cuda") and "Launch" in name or name in ("cudaMemcpyAsync", "cudaStreamSynchronize"):
            api[name] = api.get(name, 0) + 1
        if name.startswith("Memcpy HtoD"):
            h2d += 1
            kinds[name] = kinds.get(name, 0) + 1
        elif name.startswith("Memcpy DtoH"):
            d2h += 1
    return {"variant": variant, "requests": req, "batches": nb, "api": api, "h2d_copies": h2d, "h2d_kinds": kinds,
            "d2h_copies": d2h, "h2d_per_request": h2d / req, "kernel_launches_per_request":
            api.get("cudaLaunchKernel", 0) / req, "graph_launches_per_request": api.get("cudaGraphLaunch", 0) / req,
            "d2h_per_batch": d2h / nb}


def serve_and_load(variant: str, seconds: float) -> dict:
    from clef_prof.record.demo_server import DemoServer
    from clef_prof.record.load import Load, LoadSettings
    from clef_prof.record.control import http

    srv = DemoServer(variant, port=0, quiet=True)
    # serve() installs signal handlers and blocks: run its pieces on threads instead
    srv.warm_up()
    srv.ready = True
    threading.Thread(target=srv.httpd.serve_forever, daemon=True).start()
    threading.Thread(target=srv.batcher, daemon=True).start()
    url = f"http://127.0.0.1:{srv.port}"
    load = Load(LoadSettings(url=url, concurrency=16)).start()
    time.sleep(1.0)
    st = http("POST", url + "/start_profile")
    t0 = time.time_ns()
    time.sleep(seconds)
    t1 = time.time_ns()
    sp = http("POST", url + "/stop_profile", timeout=60)
    load.stop(2.0)
    srv.stopping.set()
    srv.httpd.shutdown()
    return {"start_profile": st[0], "stop_profile": json.loads(sp[1]) if sp[0] == 200 else sp,
            "client": load.summary(t0, t1), "version": srv.version_info()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check", file=sys.stderr)
        return 1
    bad = []
    for variant in ("main", "pr"):
        c = counts(variant)
        c["http"] = serve_and_load(variant, args.seconds)
        print(json.dumps(c, indent=1))
        want_h2d = 9 if variant == "main" else 3
        if c["h2d_per_request"] != want_h2d:
            bad.append(f"{variant}: {c['h2d_per_request']} H2D copies per request, expected {want_h2d}")
        if c["kernel_launches_per_request"] != 15:
            bad.append(f"{variant}: {c['kernel_launches_per_request']} kernel launches per request, expected 15")
        if c["graph_launches_per_request"] != 1:
            bad.append(f"{variant}: {c['graph_launches_per_request']} graph launches per request, expected 1")
        if c["d2h_per_batch"] != 1:
            bad.append(f"{variant}: {c['d2h_per_batch']} DtoH copies per batch, expected 1")
    for b in bad:
        print("MISMATCH", b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
