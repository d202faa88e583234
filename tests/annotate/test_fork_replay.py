"""The NVTX client after a fork, against a fake tool whose tables start afresh in the child (as nsys
does for a forked child): every domain is created and every string registered again, in the
parent's order, and what callers made before the fork (a stage's bound push and pop, a
StringHandle, a Domain) names the same domain and text through the child's new handles; strings
registered with replay=False are dropped. The real thing under nsys: tests/record/test_fork_marks.py."""
from __future__ import annotations

import itertools

import pytest

from clef_prof.annotate import api as annotate
from clef_prof.annotate import nvtx_client as nc


class Tool:
    """A tool's domain and string tables; `fork()` starts them afresh with other handle values."""

    def __init__(self):
        self.events, self.created = [], []
        self.fork(1000)

    def fork(self, base: int) -> None:
        self.domains, self.strings = {}, {}
        self.ids = itertools.count(base)

    def create(self, name):
        h = next(self.ids)
        self.domains[h] = name.decode()
        self.created.append(name.decode())
        return h

    def register(self, domain, text):
        h = next(self.ids)
        self.strings[h] = (self.domains[domain.value], text.decode())
        return h

    def push(self, d, a):
        if a.messageType == nc.MESSAGE_TYPE_REGISTERED:
            dom, text = self.strings[a.message.registered]
            assert dom == self.domains[d.value]
        else:
            text = a.message.ascii.decode()
        self.events.append((self.domains[d.value], text))
        return 0

    def pop(self, d):
        assert d.value in self.domains
        return 0


@pytest.fixture
def tool(monkeypatch):
    t = Tool()
    for name, value in (("_state", "done"), ("_ON", True), ("_create", t.create), ("_register", t.register),
                        ("_push", t.push), ("_pop", t.pop), ("_domains", {}), ("_lock", nc._lock)):
        monkeypatch.setattr(nc, name, value)
    monkeypatch.setattr(annotate, "_stages", {})
    monkeypatch.setattr(annotate, "_names", {})
    return t


def test_handles_made_before_a_fork_name_the_same_things_after_it(tool):
    parse = annotate.stage("parse")                     # bound push/pop, built once
    samples = nc.Domain("clef-prof samples")
    clef = nc.Domain("clef")
    kept = samples.register("clef-prof clock")
    samples.register("t 123 456", replay=False)         # stamped with the parent's pid
    with parse:
        pass
    old = (clef.handle, kept.value)

    tool.fork(5000)                                     # the child's tables: nothing known yet
    nc._after_fork_in_child()

    assert tool.created == ["clef", "clef-prof samples", "clef", "clef-prof samples"]   # the parent's order
    assert clef.handle in tool.domains and clef.handle != old[0]
    assert kept.value != old[1] and kept.attr.message.registered == kept.value
    assert tool.strings[kept.value] == ("clef-prof samples", "clef-prof clock")
    assert "t 123 456" not in samples._strings and samples.register("t 789 1", replay=False).value
    with parse:                                         # the partials made before the fork
        pass
    annotate.push("parse")
    annotate.pop()
    nc.Domain("clef").push("ascii text")
    assert tool.events == [("clef", "parse"), ("clef", "parse"), ("clef", "parse"), ("clef", "ascii text")]


def test_no_replay_when_no_tool_is_attached(tool, monkeypatch):
    nc.Domain("clef").register("parse")
    monkeypatch.setattr(nc, "_ON", False)
    tool.fork(5000)
    nc._after_fork_in_child()
    assert tool.created == ["clef"] and tool.strings == {}
