"""clef-prof inject on ordinary Python: the program keeps working and inject says the truth.

tests/programs/plainpy/server.py has a target of each shape that broke inject once (an
`lru_cache` function, a staticmethod, a classmethod, a `cached_property`, a callable instance
whose class first stands as a `None` placeholder, a class that redefines the name it first
imported, a coroutine function, a function defined in the main guard) and a hot loop at its top
level. Each function counts its own calls; under inject the program must compute the same facts
as without it, exit the same way (a SIGINT death included), and under nsys 2023.4 record one
range per call, counted with plain SQL against the program's own counts and `cache_info()`.
"""
from __future__ import annotations

import asyncio
import hashlib
import importlib
import json
import pathlib
import pickle
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest
from clicheck import assert_one_line
from test_inject import PROGRAMS, ROOT, clean_env, clean_hooks, make_pkg, nvtx_events, record, run_cli  # noqa: F401
from test_inject_main import ranges_per_process

from clef_prof.annotate import importhook, mainhook, registry, wrap
from clef_prof.annotate.spec import from_dict

SPEC = PROGRAMS / "plainpy.toml"
LAUNCH = {"module": ["-m", "plainpy.server"], "script": ["plainpy/server.py"]}
# a script's sys.path[0] is its own folder: plainpy/server.py imports its package only with
# tests/programs on PYTHONPATH
PATHS = os.pathsep.join([str(ROOT), str(PROGRAMS)])
TARGETS = ("run", "tokenize", "scale", "make", "table", "handle", "encode", "respond", "report")


def default_sigint():
    signal.signal(signal.SIGINT, signal.SIG_DFL)   # whatever the shell that started pytest ignores


def run_plainpy(launch, out, *args, inject=True, env_extra=None):
    argv = [sys.executable, *LAUNCH[launch], "--out", str(out), *args]
    cmd = [sys.executable, "-m", "clef_prof", "inject", "--spec", str(SPEC), "--", *argv] if inject else argv
    env = clean_env(PYTHONPATH=PATHS, **(env_extra or {}))
    return subprocess.run(cmd, cwd=PROGRAMS, env=env, capture_output=True, text=True, timeout=120,
                          preexec_fn=default_sigint)


@pytest.mark.parametrize("launch", ["module", "script"])
def test_ordinary_python_keeps_working(tmp_path, launch):
    plain = run_plainpy(launch, tmp_path / "plain.json", inject=False)
    assert plain.returncode == 0, plain.stderr
    p = run_plainpy(launch, tmp_path / "inj.json")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    want, got = (json.loads((tmp_path / f).read_text()) for f in ("plain.json", "inj.json"))
    assert got.pop("marked") == {**{t: True for t in TARGETS}, "base_encode": False}
    assert want.pop("marked") == {**{t: False for t in TARGETS}, "base_encode": False}
    assert got == want
    # the figures the program computed itself, by hand: batches of 1, 2, 3 texts
    assert got["cache_info"] == {"hits": 3, "misses": 3}
    assert got["calls"] == {"run": 3, "scale": 5, "make": 2, "table": 1, "handle": 6, "encode": 3, "respond": 3,
                            "report": 1}
    assert got["base_calls"] == {"base_encode": 3}
    assert got["handle_is_handler"] and got["respond_is_coroutine"] and got["tokenize_name"] == "tokenize"


SHAPES = """
import asyncio, functools

class Model:
    @functools.lru_cache(maxsize=None)
    def embed(self, x):
        return x * 2

    @property
    def width(self):
        return 4

class Handler:
    def __init__(self):
        self.served = 0

    async def __call__(self, batch):
        self.served += 1
        await asyncio.sleep(0)
        return len(batch)

handle = Handler()
count = functools.partial(lambda scale, batch: scale * len(batch), 10)
"""


def test_callable_shapes_keep_their_attributes_and_get_their_ranges(make_pkg, nvtx_events):
    """An lru_cache method, a property, an async callable instance (the batch target, size read
    from its argument) and a partial: each call in its range, each object's own attributes,
    binding, coroutine-ness and pickling as before."""
    pkg = make_pkg({"shapes": SHAPES})
    spec = from_dict({"batch": {"target": f"{pkg}.shapes:handle", "size_arg": "batch"},
                      "stages": {"head": f"{pkg}.shapes:Model.embed", "index": f"{pkg}.shapes:Model.width",
                                 "parse": f"{pkg}.shapes:count"}}, "<shapes>")
    importhook.install(spec)
    m = importlib.import_module(f"{pkg}.shapes")
    model = m.Model()
    assert model.embed(3) == model.embed(3) == 6 and model.width == 4
    assert asyncio.run(m.handle([1, 2, 3])) == 3 and m.count([1, 2]) == 20
    assert nvtx_events == [("push", "clef", "head", None), ("pop", "clef")] * 2 + [
        ("push", "clef", "index", None), ("pop", "clef"),
        ("start", "clef", "pooler n=3", 3), ("end", "clef"),       # awaited: a start/end range
        ("push", "clef", "parse", None), ("pop", "clef")]
    info = model.embed.cache_info()
    assert (info.hits, info.misses) == (1, 1) and m.Model.embed.cache_info() == info
    m.Model.embed.cache_clear()
    assert m.Model.embed.cache_info().currsize == 0
    assert m.handle.served == 1 and isinstance(m.handle, m.Handler)
    assert asyncio.iscoroutinefunction(m.handle.__call__) and m.count.args == (10,)
    assert m.Model.embed.__qualname__ == "Model.embed" and m.Model.embed.__module__ == m.__name__
    assert pickle.loads(pickle.dumps(m.Model.__dict__["embed"])) is m.Model.__dict__["embed"]
    for wrapped in (m.Model.__dict__["embed"], m.Model.__dict__["width"].fget, m.handle, m.count):
        assert getattr(wrapped, wrap.MARK)[1] in ("head", "index", "pooler", "parse")


@pytest.mark.parametrize("launch", ["module", "script"])
def test_check_agrees_with_the_run(launch):
    p = run_cli("inject", "--spec", SPEC, "--check", "--", sys.executable, *LAUNCH[launch], cwd=PROGRAMS,
                env=clean_env(PYTHONPATH=PATHS))
    assert p.returncode == 0, p.stderr
    assert "9 of 9 targets import and wrap" in p.stderr and "(9 in the main module" in p.stderr, p.stderr


def test_check_by_path_sees_that_the_script_cannot_import_its_package(tmp_path):
    """Without tests/programs on the path, `python plainpy/server.py` cannot import plainpy
    (sys.path[0] is plainpy/, not the current folder): the check says so, as the run does."""
    argv = [sys.executable, "plainpy/server.py", "--out", str(tmp_path / "f.json")]
    real = subprocess.run(argv, cwd=PROGRAMS, env=clean_env(), capture_output=True, text=True, timeout=60)
    assert real.returncode == 1 and "No module named 'plainpy'" in real.stderr
    p = run_cli("inject", "--spec", SPEC, "--check", "--", *argv, cwd=PROGRAMS, env=clean_env(PYTHONPATH=str(ROOT)))
    lines = p.stderr.splitlines()
    assert p.returncode == 1 and len(lines) == len(TARGETS) + 1, p.stderr
    assert all("ModuleNotFoundError: No module named 'plainpy'" in line for line in lines[:-1]), p.stderr
    # a file target, checked with no command: the script is loaded as `python PATH` runs it
    spec = tmp_path / "file.toml"
    spec.write_text(f'[stages]\ntokenize = "{PROGRAMS / "plainpy" / "server.py"}:tokenize"\n')
    p = run_cli("inject", "--spec", spec, "--check", cwd=PROGRAMS, env=clean_env(PYTHONPATH=str(ROOT)))
    assert_one_line(p, 1, "tokenize", "ModuleNotFoundError: No module named 'plainpy'")
    p = run_cli("inject", "--spec", spec, "--check", cwd=PROGRAMS, env=clean_env(PYTHONPATH=PATHS))
    assert p.returncode == 0 and "1 of 1 targets import and wrap" in p.stderr, p.stderr


@pytest.mark.parametrize("launch", ["module", "script"])
def test_sigint_death_passes_through(tmp_path, launch):
    """An uncaught KeyboardInterrupt kills the interpreter with SIGINT after the exit handlers
    and with open files flushed; under inject too (it used to exit 130 for a script)."""
    plain = run_plainpy(launch, tmp_path / "plain.json", "--interrupt", inject=False)
    p = run_plainpy(launch, tmp_path / "inj.json", "--interrupt")
    assert plain.returncode == -signal.SIGINT, plain.stderr
    assert p.returncode == -signal.SIGINT, p.stderr
    assert "KeyboardInterrupt" in p.stderr
    # nothing of clef-prof's own in it: no frame of the package, no message of the tool (the
    # paths may hold the clone's folder name, `clef-prof`, so frames are judged by their file)
    frames = re.findall(r'^  File "([^"]+)"', p.stderr, re.M)
    assert frames and not [f for f in frames if pathlib.Path(f).resolve().is_relative_to(ROOT / "clef_prof")], p.stderr
    assert not re.search(r"^clef-prof\b", p.stderr, re.M), p.stderr
    assert p.stderr == plain.stderr                 # the program's own traceback, as without inject
    for name in ("plain", "inj"):
        assert (tmp_path / f"{name}.json.atexit").read_text() == "atexit"
        assert (tmp_path / f"{name}.json.open").read_text() == "unflushed"


def main_run(tmp_path, source, targets, *extra, check=True):
    (tmp_path / "srv.py").write_text(textwrap.dedent(source))
    spec = tmp_path / "spec.toml"
    spec.write_text("[stages]\n" + "".join(f'{k} = "srv.py:{v}"\n' for k, v in targets.items()))
    cmd = [sys.executable, "srv.py", str(tmp_path / "ran")]
    return run_cli("inject", "--spec", spec, *extra, *(() if check else ("--no-check",)), "--", *cmd, cwd=tmp_path,
                   env=clean_env(PYTHONPATH=str(ROOT)))


PLACEHOLDER_ONLY = """
    import sys
    Handler = None
    if __name__ == "__main__":
        open(sys.argv[1], "w").write("ran")
"""


def test_placeholder_never_defined_refused_by_check_and_run(tmp_path):
    """A name left as its `None` placeholder: the check refuses it, and so does the run (at the
    main guard, before the program's own code), in one line each; leniently the program runs."""
    p = main_run(tmp_path, PLACEHOLDER_ONLY, {"head": "Handler.run"})
    assert_one_line(p, 1, "[stages].head", "srv.py:Handler.run", "has no attribute 'run'")
    p = main_run(tmp_path, PLACEHOLDER_ONLY, {"head": "Handler.run"}, check=False)
    assert_one_line(p, 1, "clef-prof inject: error:", "srv.py:Handler.run", "has no attribute 'run'")
    assert not (tmp_path / "ran").exists()
    p = main_run(tmp_path, PLACEHOLDER_ONLY, {"head": "Handler.run"}, "--lenient", check=False)
    assert_one_line(p, 0, "clef-prof inject: warning:", "has no attribute 'run'", "skipped")
    assert (tmp_path / "ran").read_text() == "ran"


PLACEHOLDER_THEN_GUARD = """
    import sys
    Handler = None
    if __name__ == "__main__":
        class Handler:
            def run(self):
                return hasattr(Handler.run, "__clef_prof__")
        open(sys.argv[1], "w").write(str(Handler().run()))
"""


def test_placeholder_defined_in_the_main_guard(tmp_path):
    """`None` at the top level, the class in the main guard: the check runs the guard's class
    statement and passes; the run waits for the guard's definition and wraps it."""
    p = main_run(tmp_path, PLACEHOLDER_THEN_GUARD, {"head": "Handler.run"}, "--check")
    assert p.returncode == 0 and p.stderr.splitlines() == [
        f"clef-prof: {tmp_path / 'spec.toml'}: 1 of 1 targets import and wrap in {sys.executable} (1 in the main "
        f"module {tmp_path / 'srv.py'}, wrapped as their definitions run)"], p.stderr
    p = main_run(tmp_path, PLACEHOLDER_THEN_GUARD, {"head": "Handler.run"})
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert (tmp_path / "ran").read_text() == "True"


ATTRIBUTE_SET_LATER = """
    import sys
    class App:
        pass
    app = App()
    def handler(x):
        return x
    app.handle = handler
    if __name__ == "__main__":
        open(sys.argv[1], "w").write(str(hasattr(app.handle, "__clef_prof__")))
"""


def test_attribute_set_after_its_name_is_bound(tmp_path):
    """`app.handle` resolves only once `app.handle = ...` ran: no error when `app` is bound, the
    wrapper set after the attribute is; the check (final state) and the run agree."""
    p = main_run(tmp_path, ATTRIBUTE_SET_LATER, {"head": "app.handle"})
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert (tmp_path / "ran").read_text() == "True"


GUARD_NEEDS_STATE = """
    import sys
    if __name__ == "__main__":
        base = object
        class Handler(base):
            def run(self):
                return hasattr(Handler.run, "__clef_prof__")
        open(sys.argv[1], "w").write(str(Handler().run()))
"""


def test_main_guard_definition_that_needs_the_guard(tmp_path):
    """A class in the main guard built from what the guard sets first cannot be checked out of
    the program: the check says so in one warning line and launches; the run wraps it."""
    p = main_run(tmp_path, GUARD_NEEDS_STATE, {"head": "Handler.run"})
    assert_one_line(p, 0, "clef-prof: warning:", "defined inside the main guard",
                    "NameError: name 'base' is not defined", "wrapped when it runs")
    assert (tmp_path / "ran").read_text() == "True"


def test_hook_cost_does_not_grow_with_a_top_level_loop(monkeypatch, tmp_path):
    """The main module's code calls the wrapping hook after the statements that can bind a
    target's name, and once at the end: as often for a loop of 10 iterations as of 100,000."""
    calls = {"_main_bound": 0, "_main_settle": 0}
    for name in calls:
        real = getattr(mainhook, name)

        def counted(key, g, *more, real=real, name=name):
            calls[name] += 1
            real(key, g, *more)
        monkeypatch.setattr(mainhook, name, counted)
    monkeypatch.setattr(registry, "_installed", {})
    monkeypatch.setattr(registry, "_states", {})
    spec = from_dict({"stages": {"head": "srv:f"}}, str(tmp_path / "spec.toml"))
    state = registry.register(spec, "raise", False)
    seen = []
    for n in (10, 100_000):
        source = f"import os\ndef f():\n    return 1\ntotal = 0\nfor i in range({n}):\n    total += i\n"
        g = {"__name__": "srv"}
        exec(mainhook.main_code(source, "srv.py", [(state, spec.bindings()[0])]), g)
        assert g["total"] == n * (n - 1) // 2 and hasattr(g["f"], "__clef_prof__")
        seen.append(dict(calls))
        calls.update({k: 0 for k in calls})
    # after `def f`, and inside the settle at the end (which catches up first)
    assert seen == [{"_main_bound": 2, "_main_settle": 1}] * 2


def test_check_prints_one_line_per_unresolved_target(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text("[stages]\n" + "".join(f's{i} = "json:missing_{i}"\n' for i in range(11)))
    p = run_cli("inject", "--spec", spec, "--check", cwd=tmp_path, env=clean_env(PYTHONPATH=str(ROOT)))
    lines = p.stderr.splitlines()
    assert p.returncode == 1 and len(lines) == 12 and "Traceback" not in p.stderr, p.stderr
    for i, line in enumerate(lines[:-1]):
        assert line == (f"clef-prof: error: spec {spec} [stages].s{i}: json:missing_{i}: json has no attribute "
                        f"'missing_{i}'")
    assert lines[-1] == f"clef-prof: error: spec {spec}: 11 of 11 targets cannot be wrapped (one line each above)"


def test_emit_nsys_json_never_overwrites_an_input(tmp_path):
    script = tmp_path / "srv.py"
    script.write_text("def f():\n    return 1\n")
    (tmp_path / "cached.py").write_text("import functools\n\n@functools.lru_cache\ndef tok(x):\n    return x\n")
    spec = tmp_path / "spec.toml"
    spec.write_text('[stages]\nparse = "json:dumps"\nhead = "srv.py:f"\nindex = "cached:tok"\n')
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (spec, script)}
    for out, what in ((spec, "the spec"), (script, "a target script"), (tmp_path / "." / "spec.toml", "the spec")):
        p = run_cli("inject", "--spec", spec, "--emit-nsys-json", out, cwd=tmp_path,
                    env=clean_env(PYTHONPATH=str(ROOT)))
        assert_one_line(p, 1, "--emit-nsys-json", f"is {what} it reads: refused")
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (spec, script)} == before
    p = run_cli("inject", "--spec", spec, "--emit-nsys-json", tmp_path / "out.json", cwd=tmp_path,
                env=clean_env(PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stderr
    assert [b["functions"] for b in json.loads((tmp_path / "out.json").read_text())] == [["dumps"]]
    # nsys's own wrapper would take an lru_cache function's cache_info away: left out, and said
    assert "[stages].index: cached:tok is a callable that is not a function" in p.stderr
    assert "cache_info" in p.stderr


@pytest.mark.nsys("2023.4")
def test_nsys_counts_one_range_per_call(tmp_path):
    """Recorded under nsys 2023.4 through inject: per range name, as many complete ranges as
    the program counted calls (the lru_cache function: hits + misses from cache_info; the
    redefined Encoder: its own calls, not twice through the imported base)."""
    facts_path = tmp_path / "facts.json"
    argv = [sys.executable, "-m", "clef_prof", "inject", "--spec", SPEC, "--", sys.executable, *LAUNCH["module"],
            "--out", facts_path]
    db = record("2023.4", tmp_path, "plainpy", argv, clean_env(PYTHONPATH=PATHS))
    facts = json.loads(facts_path.read_text())
    counts, sizes = ranges_per_process(db)
    info = facts["cache_info"]
    want = {**{k: v for k, v in facts["calls"].items() if k != "run"}, "pooler": facts["calls"]["run"],
            "tokenize": info["hits"] + info["misses"]}
    assert {name: n for (_pid, name), n in counts.items()} == want
    assert len({pid for pid, _ in counts}) == 1
    assert [t for _, t in sizes] == [f"pooler n={k}" for k in facts["sizes"]]
