"""Holding an analyze result against the manifest `clef-prof record` wrote beside its capture
(read by read.manifest): warnings only."""
from __future__ import annotations

import os

from ...base.config import STATUS_OK
from ..model import Result
from ..read.manifest import edge_tolerance


def sampling_check(result: Result, manifest: dict) -> list[str]:
    """A warning when the manifest asked for Python samples and the capture has none to read:
    clef-prof's sampler (`python_sampling_hz` with `python_sampler` "clef-prof"), or nsys' own
    (`nsys_python_sampling_hz`; in manifests older than clef-prof's sampler, `python_sampling_hz`)."""
    if result.samples is not None and result.samples.samples:
        return []
    trace = manifest.get("trace") or {}

    def rate(v) -> float:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else 0.0
    ours = trace.get("python_sampler") == "clef-prof"
    out = []
    if ours and rate(trace.get("python_sampling_hz")):
        out.append(f"record asked for Python samples at {rate(trace['python_sampling_hz']):g} Hz (clef-prof's sampler) "
                   "and the capture holds none: the sampler starts with the first clef_prof stage or batch range of a "
                   "process (annotate the server or use --spec), and nothing else in the capture names Python functions")
    hz = rate(trace.get("nsys_python_sampling_hz")) or (0.0 if ours or "nsys_python_sampling_hz" in trace
                                                          else rate(trace.get("python_sampling_hz")))
    if hz and not out:
        out.append(f"record asked nsys for Python samples at {hz:g} Hz and the capture holds none that analyze could "
                   "read (nsys 2022.4 has no Python sampler; 2023.4's frames are read from a JSON export: analyze the "
                   ".nsys-rep, keep it beside the export with the same name, or put `nsys export --type json` of it "
                   "there as NAME.json)")
    return out


def check_manifest(result: Result, manifest: dict) -> list[str]:
    """Warnings from comparing an analyze result with the capture's record manifest.

    - the capture is not marked "ok" (the server died, the run was interrupted or failed);
    - the requests counted from batch ranges lie outside the client's bounds for the span in
      which the server was recorded: at least the requests sent and answered inside it, at most
      those whose send-to-answer span meets it (no batch lost, none from another client); the span
      comes from the export, so a window that ended by itself (vLLM's max_iterations) needs no
      special case;
    - the server's own count of its profiling window disagrees;
    - the manifest's export is another file;
    - nsys said, while recording, importing or exporting, that records were lost or misread;
    - record asked for Python samples and the capture holds none.
    """
    out: list[str] = sampling_check(result, manifest)
    said = (manifest.get("nsys") or {}).get("messages") or []
    if said:
        out.append(f"nsys reported while recording or exporting: {' | '.join(said[:5])}"
                   f"{f' (+{len(said) - 5} more)' if len(said) > 5 else ''}; records may be missing")
    status = manifest.get("status", STATUS_OK)
    if status != STATUS_OK:
        why = manifest.get("status_detail") or ""
        out.append(f"the record manifest marks this capture {status!r}{': ' + why if why else ''}; "
                   "its figures cover a partial window")
    exp = manifest.get("export")
    path = result.path
    if exp and path and os.path.basename(str(exp)) != os.path.basename(str(path)):
        out.append(f"the record manifest describes {os.path.basename(str(exp))}, not {os.path.basename(str(path))}")
    req = result.requests
    src = str(result.requests_source or "")
    if req is None or status != STATUS_OK or src == "--requests":
        return out          # nothing counted, a partial capture, or a count given by hand
    cap = (manifest.get("client") or {}).get("capture") or {}
    lo, hi = cap.get("requests_inside"), cap.get("requests_overlapping")
    if isinstance(lo, int) and isinstance(hi, int) and not lo <= req <= hi:
        span = cap.get("recorded_s")
        where = f"the {span:.3f} s the server was recorded" if isinstance(span, (int, float)) else "the capture"
        out.append(f"batch ranges count {req} requests, outside the client's bounds for {where}: {lo} requests "
                   f"sent and answered inside it, {hi} in flight during it; " +
                   ("batch ranges were lost (NVTX ranges dropped, or batches not annotated)" if req < lo else
                    "the batch ranges hold requests this client did not send (another client, or a wrong n=K)"))
    server = manifest.get("server_counts") or {}
    sreq = server.get("requests") if isinstance(server, dict) else None
    mode = (manifest.get("window") or {}).get("mode")
    if isinstance(sreq, int):
        # the server counts between its own start and stop calls: the capture holds at least that
        # much, and with a cudaProfilerApi window exactly that, up to the batches on the edges
        tol = edge_tolerance(manifest)
        if req < sreq - 2 * tol or (mode == "profiler-api" and req > sreq + 2 * tol):
            out.append(f"batch ranges count {req} requests, but the server counted {sreq} inside its profiling "
                       "window")
    return out


# what the network and the client's own loop may add to a request on one host: the client's mean
# latency may exceed the journeys' mean end-to-end by this much, plus this share of the client's mean
CLIENT_ALLOWANCE_MS = 2.0
CLIENT_ALLOWANCE_SHARE = 0.25


def client_check(result: Result, manifest: dict):
    """(ClientCheck, warnings): the journeys' mean end-to-end against the load generator's mean
    latency over the span the server was recorded (manifest client.capture); (None, []) when
    either is missing. The client's latency also holds the connection, the HTTP parsing before
    the handler and the client's event loop: it may be larger by the allowance, never smaller by
    more than it."""
    from ..model import ClientCheck

    j = result.journey
    cap = (manifest.get("client") or {}).get("capture") or {}
    client = cap.get("latency_ms_mean")
    if j is None or j.e2e_ms_mean is None or not isinstance(client, (int, float)):
        return None, []
    lag = cap.get("loop_lag_ms_mean")
    lag = float(lag) if isinstance(lag, (int, float)) and not isinstance(lag, bool) and 0 <= lag < 1e6 else None
    # the client's own noise: a request waits in its loop at its send and at its answer
    allowance = CLIENT_ALLOWANCE_MS + CLIENT_ALLOWANCE_SHARE * float(client) + 2.0 * (lag or 0.0)
    gap = float(client) - j.e2e_ms_mean
    n = cap.get("completions")
    check = ClientCheck(journey_e2e_ms_mean=j.e2e_ms_mean, client_latency_ms_mean=float(client),
                        client_completions=n if isinstance(n, int) else None, gap_ms=gap, allowance_ms=allowance,
                        agrees=-allowance <= gap <= allowance, client_loop_lag_ms=lag)
    if check.agrees:
        return check, []
    why = ("the client waited longer than the server's request ranges explain: time outside the handler "
           "(accept, HTTP parsing, a saturated client loop) or request ranges that miss part of the handler"
           if gap > 0 else "the request ranges last longer than the client's requests: ids or ranges do not "
                           "belong to this client's requests")
    measured = (f" (with its loop's measured lag, {lag:.3f} ms a wake-up, twice)" if lag is not None else
                " (the manifest has no measure of the client loop's lag: recorded before clef-prof measured it)")
    return check, [f"client check: mean end-to-end {j.e2e_ms_mean:.3f} ms per request from {j.complete} journeys, "
                   f"{float(client):.3f} ms per request from the client ({n} completions); the gap of {gap:.3f} ms "
                   f"is beyond the {allowance:.3f} ms network and client loop explain{measured}: {why}"]
