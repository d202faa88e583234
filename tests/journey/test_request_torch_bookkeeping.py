"""Request ranges and enqueue marks under a torch profiler: the emission's BOOKKEEPING only.

torch cannot be installed on the CPU machine, so these tests put a RECORDING STAND-IN of
`torch.autograd.profiler` into sys.modules: its `record_function` writes down which names are
opened and closed, on which object and in which order; `_is_profiler_enabled` is the switch.
No figure comes from it (no time, no trace): what reaches a real Kineto trace is checked on the
GPU machine by scripts/gpu-torch-journey.sh (the demo server recorded with
`clef-prof record --profiler torch`, then analyzed), and the conversion of such a trace into
journeys by tests/journey/test_journey_kineto.py over real traces.
"""
from __future__ import annotations

import asyncio
import sys
import types

import pytest

from clef_prof.annotate import api, nvtx_client


@pytest.fixture
def stand_in(monkeypatch):
    """A recording stand-in of torch.autograd.profiler (NOT torch), and api's torch state reset
    so that it is looked up again (monkeypatch puts everything back)."""
    assert not nvtx_client.enabled(), "these tests run without nsys: NVTX is off, only the torch path emits"
    log = []                        # (event, name, object id) in call order

    class record_function:          # the stand-in: records, measures nothing
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            log.append(("enter", self.name, id(self)))
            return self

        def __exit__(self, *exc):
            log.append(("exit", self.name, id(self)))
            return False

    mod = types.ModuleType("torch.autograd.profiler")
    mod.record_function = record_function
    mod._is_profiler_enabled = False
    monkeypatch.setitem(sys.modules, "torch.autograd.profiler", mod)
    for name, value in (("_torch_prof", None), ("_rf_cls", None), ("_prof_enabled", None), ("_TORCH_ON", False),
                        ("_RF_USED", False), ("_QUIET", False)):
        monkeypatch.setattr(api, name, value)
    monkeypatch.setattr(api, "_rf_local", type(api._rf_local)())
    return mod, log


def _names(log):
    return [(ev, name) for ev, name, _ in log]


def _paired(log) -> bool:
    """Every exit closes the object its enter opened (by identity), innermost first per object."""
    open_ = {}
    for ev, name, oid in log:
        if ev == "enter":
            open_[oid] = name
        elif open_.pop(oid, None) != name:
            return False
    return not open_


def test_sync_request_enqueue_and_stage_nest_in_order(stand_in):
    mod, log = stand_in
    mod._is_profiler_enabled = True
    with api.batch(n=1, request_ids=["warm"]):      # a batch range looks the profiler up, as in a server
        pass
    log.clear()
    with api.request("a b,c"):
        api.enqueued("a b,c")
        with api.stage("encode"):
            pass
    assert _names(log) == [("enter", "request rid=a_b_c"), ("enter", "enqueued rid=a_b_c"),
                           ("exit", "enqueued rid=a_b_c"), ("enter", "encode"), ("exit", "encode"),
                           ("exit", "request rid=a_b_c")]
    assert _paired(log)


def test_async_requests_interleaved_on_one_thread_close_their_own(stand_in):
    mod, log = stand_in
    mod._is_profiler_enabled = True
    api.torch_refresh()
    gate = asyncio.Event()

    async def handler(rid, first):
        async with api.request(rid):
            api.enqueued(rid)
            if first:
                await gate.wait()       # r1 stays open while r2 runs to its end
            else:
                gate.set()

    async def main():
        await asyncio.gather(handler("r1", True), handler("r2", False))

    asyncio.run(main())
    assert _names(log) == [("enter", "request rid=r1"), ("enter", "enqueued rid=r1"), ("exit", "enqueued rid=r1"),
                           ("enter", "request rid=r2"), ("enter", "enqueued rid=r2"), ("exit", "enqueued rid=r2"),
                           ("exit", "request rid=r2"), ("exit", "request rid=r1")]
    assert _paired(log)


def test_decorator_made_before_the_profiler_sees_it_start_and_stop(stand_in):
    mod, log = stand_in

    @api.request(lambda req: req["id"])
    def handle(req):
        api.enqueued(req["id"])
        return 1

    @api.request(lambda req: req["id"])
    async def ahandle(req):
        return 2

    assert api.torch_refresh() is False
    assert handle({"id": "off"}) == 1 and log == []          # no profiler: nothing opened
    assert api.request("x") is api._NO_REQUEST
    mod._is_profiler_enabled = True
    api.torch_refresh()                                      # what the next batch range does
    assert handle({"id": "d1"}) == 1 and asyncio.run(ahandle({"id": "d2"})) == 2
    assert _names(log) == [("enter", "request rid=d1"), ("enter", "enqueued rid=d1"), ("exit", "enqueued rid=d1"),
                           ("exit", "request rid=d1"), ("enter", "request rid=d2"), ("exit", "request rid=d2")]
    assert _paired(log)
    log.clear()
    mod._is_profiler_enabled = False
    api.torch_refresh()
    assert handle({"id": "off2"}) == 1 and log == []
    assert api.request("y") is api._NO_REQUEST


def test_a_range_open_when_the_profiler_starts_closes_nothing(stand_in):
    """Entered with the profiler off, left with it on: no record_function was opened, none is
    closed (the thread's innermost one, a stage's, stays open until its own exit)."""
    mod, log = stand_in
    api.torch_refresh()
    req = api.request("early")
    assert req is api._NO_REQUEST
    r = api.Request("early2")           # a request object made while off (as a decorator's is)
    with r:
        mod._is_profiler_enabled = True
        api.torch_refresh()
        with api.stage("parse"):
            pass
    assert _names(log) == [("enter", "parse"), ("exit", "parse")]
    assert _paired(log)


def test_spec_injected_request_enqueue_and_batch_emit_under_torch(stand_in):
    """The wrappers `clef-prof inject` puts around a spec's targets ([request], enqueue, batch):
    with NVTX off and the stand-in's profiler on, the same names as from code, in order; with it
    off, only the calls."""
    from clef_prof.annotate import wrap

    mod, log = stand_in

    def submit(rid):
        return rid

    def run_batch(ids):
        return len(ids)

    def handle(req):
        enq(req["id"])
        return batch([req["id"], "other"])

    enq = wrap._make_request_wrapper(submit, "enqueue", "clef", lambda a, k: a[0])
    batch = wrap._make_batch_wrapper(run_batch, "pooler", "clef", None, wrap._ArgGetter(run_batch, "ids"))
    handler = wrap._make_request_wrapper(handle, "request", "clef", lambda a, k: a[0]["id"])
    assert handler({"id": "s0"}) == 2 and log == []             # no profiler: only the calls
    mod._is_profiler_enabled = True
    assert batch(["warm"]) == 1                                   # the batch wrapper looks the profiler up
    log.clear()
    assert handler({"id": "s1"}) == 2
    assert _names(log) == [("enter", "request rid=s1"), ("enter", "enqueued rid=s1"), ("exit", "enqueued rid=s1"),
                           ("enter", "pooler n=2 rid=s1,other"), ("exit", "pooler n=2 rid=s1,other"),
                           ("exit", "request rid=s1")]
    assert _paired(log)
