"""Stages on two threads, for reading nsys' own Python samples per thread (docs/sampling.md).

    python sampled_threads.py --seconds S --out facts.json [--idle]   (under nsys --python-sampling=true)

The main thread runs batches whose `head` stage calls `heavy`; thread `w-light` runs batches whose
`encode` stage calls `light`, then sleeps about as long (outside every range); with `--idle`, a
third thread `w-idle` waits on an event the whole run (no range). `--out` gets what the program
itself knows: the process id, each thread's OS id (threading.get_native_id) and name, and per
thread its batches and the ns spent in its stage (perf_counter_ns around the call).
"""
import argparse
import json
import os
import threading
import time

import clef_prof

K = 20_000


def heavy(n):
    s = 0
    for i in range(n):
        s += i ^ 5
    return s


def light(n):
    s = 0
    for i in range(n):
        s += i ^ 3
    return s


def run_batches(stage, fn, pause, deadline, facts):
    facts["tid"] = threading.get_native_id()
    facts["name"] = threading.current_thread().name
    clock = time.perf_counter_ns
    spent = batches = 0
    while time.monotonic() < deadline:
        with clef_prof.batch(n=1):
            with clef_prof.stage(stage):
                t0 = clock()
                fn(K)
                spent += clock() - t0
        batches += 1
        if pause:
            time.sleep(spent / batches / 1e9)
    facts.update(stage=stage, batches=batches, stage_ns=spent)


def idle(stop, facts):
    facts["tid"] = threading.get_native_id()
    facts["name"] = threading.current_thread().name
    stop.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--out", required=True)
    ap.add_argument("--idle", action="store_true")
    a = ap.parse_args()
    deadline = time.monotonic() + a.seconds
    facts = {"MainThread": {}, "w-light": {}}
    stop = threading.Event()
    threads = [threading.Thread(target=run_batches, name="w-light",
                                args=("encode", light, True, deadline, facts["w-light"]))]
    if a.idle:
        facts["w-idle"] = {}
        threads.append(threading.Thread(target=idle, name="w-idle", args=(stop, facts["w-idle"])))
    for t in threads:
        t.start()
    run_batches("head", heavy, False, deadline, facts["MainThread"])
    stop.set()
    for t in threads:
        t.join()
    with open(a.out, "w") as f:
        json.dump({"pid": os.getpid(), "threads": facts}, f)


if __name__ == "__main__":
    main()
