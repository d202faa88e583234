"""clef-prof inject: stage wrappers loaded into every Python process of a command.

Three layers:
- in-process: install() on throw-away packages, with a recording fake in place of the NVTX
  injection (which ranges, in which order, with which message and payload);
- subprocesses without nsys: the environment form reaches the process itself, spawn and
  forkserver workers and Python subprocesses, chains an existing sitecustomize, and fails
  with one clear line on bad targets;
- acceptance under real nsys 2022.4 and 2023.4 (`nsys profile -t nvtx,osrt`, CPU only): the
  pooler program runs once annotated in its source and once injected by the environment
  form, and `analyze` finds every stage range, with the right counts, on the worker's thread.
  Plus nsys 2023.4 running the JSON of `--emit-nsys-json` for real.
"""
from __future__ import annotations

import asyncio
import importlib
import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from clicheck import assert_one_line
from recording import profile

from clef_prof.annotate import check, envform, importhook, registry, wrap
from clef_prof.annotate.spec import from_dict

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "programs"
POOLER_SPEC = PROGRAMS / "pooler.toml"
STAGES = ("parse", "index", "transfer", "head", "encode")
NSYS_VERSIONS = ("2022.4", "2023.4")


# ---------------------------------------------------------------------------------------------
# in-process: a fake NVTX tool and throw-away packages

@pytest.fixture
def nvtx_events(monkeypatch):
    """Make clef_prof's NVTX client believe a tool is attached; record what it is sent."""
    from clef_prof.annotate import api as annotate
    from clef_prof.annotate import nvtx_client as nc

    events, strings, domains = [], {}, {}
    ids = iter(range(1000, 10**6))

    def create(name):
        h = next(ids)
        domains[h] = name.decode()
        return h

    def register(_domain, text):
        h = next(ids)
        strings[h] = text.decode()
        return h

    def text(a):
        return strings[a.message.registered] if a.messageType == nc.MESSAGE_TYPE_REGISTERED else a.message.ascii.decode()

    def payload(a):
        return a.payload.llValue if a.payloadType == nc.PAYLOAD_TYPE_INT64 else None

    def dom(d):
        return domains[d.value]         # the client passes its domain's ctypes handle, as to a C function

    def push(d, a):
        events.append(("push", dom(d), text(a), payload(a)))
        return 0

    def pop(d):
        events.append(("pop", dom(d)))
        return 0

    def start(d, a):
        events.append(("start", dom(d), text(a), payload(a)))
        return next(ids)

    def end(d, _rid):
        events.append(("end", dom(d)))

    for name, value in (("_state", "done"), ("_ON", True), ("_create", create), ("_register", register),
                        ("_push", push), ("_pop", pop), ("_start", start), ("_end", end), ("_domains", {})):
        monkeypatch.setattr(nc, name, value)
    monkeypatch.setattr(annotate, "_stages", {})
    monkeypatch.setattr(annotate, "_names", {})
    return events


@pytest.fixture
def clean_hooks(monkeypatch):
    """install() state is process-wide: give each test its own and take the finder out after."""
    monkeypatch.setattr(importhook, "_hooks", {})
    monkeypatch.setattr(registry, "_installed", {})
    monkeypatch.setattr(registry, "_states", {})
    monkeypatch.setattr(importhook, "_finder", None)
    before = list(sys.meta_path)
    yield
    sys.meta_path[:] = before


@pytest.fixture
def make_pkg(tmp_path, monkeypatch, clean_hooks):
    """make_pkg({"server": src, ...}) -> a fresh, importable, not yet imported package name."""
    made = []

    def make(modules: dict[str, str]) -> str:
        name = f"clefinj_{uuid.uuid4().hex[:10]}"
        d = tmp_path / name
        d.mkdir()
        (d / "__init__.py").write_text("")
        for mod, src in modules.items():
            (d / f"{mod}.py").write_text(textwrap.dedent(src))
        made.append(name)
        return name

    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield make
    for name in made:
        for m in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[m]


SERVER = """
import asyncio

def parse_schema(requests):
    return [r * 2 for r in requests]

class Meta:
    def __init__(self, lens):
        self.prompt_lens = lens

class Pooler:
    scale = 3

    def run(self, batch, meta=None):
        x = parse_schema(batch)
        i = self._indices(x)
        t = self.transfer(i)
        h = self.head(t)
        return asyncio.run(encode(h))

    @staticmethod
    def _indices(x):
        return list(range(len(x)))

    @classmethod
    def transfer(cls, idx):
        return [cls.scale * i for i in idx]

    def head(self, moved):
        return sum(moved)

async def encode(out):
    await asyncio.sleep(0)
    return str(out)
"""


def spec_for(pkg: str, **batch) -> object:
    b = {"target": f"{pkg}.server:Pooler.run", "size_arg": "batch", **batch}
    return from_dict({"batch": b, "stages": {
        "parse": f"{pkg}.server:parse_schema", "index": f"{pkg}.server:Pooler._indices",
        "transfer": f"{pkg}.server:Pooler.transfer", "head": f"{pkg}.server:Pooler.head",
        "encode": f"{pkg}.server:encode"}}, f"<{pkg}>")


def test_lazy_wrap_every_kind(make_pkg, nvtx_events):
    pkg = make_pkg({"server": SERVER})
    importhook.install(spec_for(pkg))
    assert f"{pkg}.server" not in sys.modules          # nothing imported up front
    server = importlib.import_module(f"{pkg}.server")
    p = server.Pooler()
    assert p.run([1, 2, 3]) == "9"                       # behaviour unchanged
    assert nvtx_events == [
        ("push", "clef", "pooler n=3", 3),
        ("push", "clef", "parse", None), ("pop", "clef"),
        ("push", "clef", "index", None), ("pop", "clef"),
        ("push", "clef", "transfer", None), ("pop", "clef"),
        ("push", "clef", "head", None), ("pop", "clef"),
        ("start", "clef", "encode", None), ("end", "clef"),   # a coroutine: a start/end range
        ("pop", "clef")]
    # classmethod and staticmethod keep their binding, through the class and an instance
    assert server.Pooler.transfer([1]) == [3] and p.transfer([2]) == [6]
    assert server.Pooler._indices("ab") == [0, 1] and p._indices("abc") == [0, 1, 2]
    assert isinstance(server.Pooler.__dict__["transfer"], classmethod)
    assert isinstance(server.Pooler.__dict__["_indices"], staticmethod)
    assert asyncio.iscoroutinefunction(server.encode)
    assert server.parse_schema.__wrapped__.__name__ == "parse_schema"
    assert getattr(server.Pooler.run, wrap.MARK) == ("batch", "pooler")
    assert getattr(server.Pooler.__dict__["transfer"].__func__, wrap.MARK) == ("stage", "transfer")


def test_already_imported_and_from_import(make_pkg, nvtx_events):
    pkg = make_pkg({"server": SERVER, "user": "from .server import parse_schema\n"})
    server = importlib.import_module(f"{pkg}.server")   # imported before install: wrapped at once
    importhook.install(spec_for(pkg))
    assert hasattr(server.parse_schema, wrap.MARK)
    user = importlib.import_module(f"{pkg}.user")       # binds the wrapped function
    user.parse_schema([1])
    assert nvtx_events == [("push", "clef", "parse", None), ("pop", "clef")]
    importhook.install(spec_for(pkg))                       # idempotent: no double wrapping
    assert not hasattr(server.parse_schema.__wrapped__, wrap.MARK)


def test_batch_size_paths_and_request_ids(make_pkg, nvtx_events):
    pkg = make_pkg({"server": SERVER})
    spec = from_dict({"batch": {"target": f"{pkg}.server:Pooler.head", "size_arg": "moved",
                                "request_ids_arg": "moved"}, "stages": {"parse": f"{pkg}.server:parse_schema"}}, "<t>")
    importhook.install(spec)
    server = importlib.import_module(f"{pkg}.server")
    assert server.Pooler().head(moved=[3, 4]) == 7
    assert nvtx_events == [("push", "clef", "pooler n=2 rid=3,4", 2), ("pop", "clef")]


def test_batch_size_attribute_path_and_int(make_pkg, nvtx_events):
    pkg = make_pkg({"server": SERVER + "\ndef step(num_reqs):\n    return num_reqs\n"})
    spec = from_dict({"batch": {"target": f"{pkg}.server:Pooler.run", "size_arg": "meta.prompt_lens"},
                      "stages": {"head": f"{pkg}.server:step"}}, "<t>")
    importhook.install(spec)
    server = importlib.import_module(f"{pkg}.server")
    server.Pooler().run([1], meta=server.Meta([5, 6, 7, 8]))
    assert nvtx_events[0] == ("push", "clef", "pooler n=4", 4)
    nvtx_events.clear()
    server.Pooler().run([1])                 # meta=None: size unknown, the range still opens
    assert nvtx_events[0] == ("push", "clef", "pooler", None)


def test_batch_size_arg_must_be_a_parameter(make_pkg):
    pkg = make_pkg({"server": SERVER})
    importhook.install(spec_for(pkg, size_arg="requests"))
    with pytest.raises(wrap.TargetError) as e:
        importlib.import_module(f"{pkg}.server")
    assert "has no parameter 'requests' (parameters: self, batch, meta)" in str(e.value)


@pytest.mark.parametrize("stage_target, source, needle", [
    ("server:parse_schemaX", SERVER, "server has no attribute 'parse_schemaX'"),
    ("server:Nope.run", SERVER, "server has no attribute 'Nope'"),
    ("server:LIMIT", SERVER + "\nLIMIT = 3\n", "is not callable (a int)"),
    ("server:Pooler.size", SERVER + "\nPooler.size = property(None, lambda s, v: None)\n",
     "is a property without a getter"),
    ("server:Pooler", SERVER, "is a class; a wrapper would replace it by a function"),
    ("server:gen", SERVER + "\ndef gen():\n    yield 1\n", "is a generator function"),
    ("server:agen", SERVER + "\nasync def agen():\n    yield 1\n", "is an async generator function"),
])
def test_unresolvable_target_one_line(make_pkg, stage_target, source, needle):
    pkg = make_pkg({"server": source})
    spec = from_dict({"stages": {"parse": f"{pkg}.{stage_target}"}}, "/x/spec.toml")
    importhook.install(spec)
    with pytest.raises(wrap.TargetError) as e:
        importlib.import_module(f"{pkg}.server")
    msg = str(e.value)
    assert "\n" not in msg and needle in msg
    assert msg.startswith(f"spec /x/spec.toml [stages].parse: {pkg}.{stage_target}: ")


def test_missing_module_found_when_its_package_is_imported(make_pkg):
    pkg = make_pkg({"server": SERVER})
    spec = from_dict({"stages": {"parse": f"{pkg}.servr:parse_schema"}}, "/x/spec.toml")
    importhook.install(spec)
    with pytest.raises(wrap.TargetError) as e:
        importlib.import_module(pkg)
    assert f"no module named '{pkg}.servr'" in str(e.value)


def test_lenient_warns_and_skips(make_pkg, capsys):
    pkg = make_pkg({"server": SERVER})
    spec = from_dict({"stages": {"parse": f"{pkg}.server:nope", "head": f"{pkg}.server:Pooler.head"}}, "/x/s.toml")
    importhook.install(spec, on_error="warn")
    server = importlib.import_module(f"{pkg}.server")
    assert hasattr(server.Pooler.head, wrap.MARK)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "warning" in err[0] and "no attribute 'nope'" in err[0] and "skipped" in err[0]


# ---------------------------------------------------------------------------------------------
# subprocesses, no nsys

def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEF_PROF_") and k != "PYTHONPATH"}
    env.update(extra)
    return env


def injected_env(spec=POOLER_SPEC, lenient=False, base_pythonpath: str | None = None) -> dict:
    base = clean_env()
    if base_pythonpath:
        base["PYTHONPATH"] = base_pythonpath
    return {**base, **envform.environment(str(spec), lenient=lenient, base=base)}


def run_cli(*args, env=None, cwd=ROOT, timeout=120):
    return subprocess.run([sys.executable, "-m", "clef_prof", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


@pytest.mark.parametrize("start", ["spawn", "forkserver", "subprocess"])
def test_env_form_reaches_every_process(tmp_path, start):
    """No clef_prof on the program's path: the hook loads it from $CLEF_PROF_PKG."""
    out = tmp_path / "facts.json"
    p = subprocess.run([sys.executable, "pooler_serve.py", "--start", start, "--batches", "3", "--out", out],
                       cwd=PROGRAMS, env=injected_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    facts = json.loads(out.read_text())
    assert facts["worker_pid"] != facts["parent_pid"]
    assert all(facts["worker_wrapped"].values()), facts
    assert all(facts["parent_wrapped"].values()), facts


@pytest.fixture(scope="module")
def pkg_copy(tmp_path_factory) -> Path:
    """A second clef_prof: a copy of this tree's package, in a directory of its own."""
    import shutil
    dst = tmp_path_factory.mktemp("copy") / "clef_prof"
    shutil.copytree(ROOT / "clef_prof", dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def test_env_form_loads_the_copy_named_by_clef_prof_pkg(pkg_copy):
    """Another clef_prof on PYTHONPATH (this tree's): the hook loads the copy $CLEF_PROF_PKG names,
    wraps with it, and leaves neither its loader module nor its directory behind."""
    startup_dir = str(pkg_copy / "annotate" / "_startup")
    env = clean_env(PYTHONPATH=os.pathsep.join([startup_dir, str(ROOT)]), CLEF_PROF_SPEC=str(POOLER_SPEC),
                    CLEF_PROF_PKG=str(pkg_copy))
    code = ("import json, sys, pooler_app.plain as p\n"
            "w = p.Pooler.head\n"
            "print(json.dumps({'pkg': sys.modules['clef_prof'].__file__, 'mark': list(w.__clef_prof__),\n"
            "                  'wrapper': w.__code__.co_filename, 'boot': '_clef_prof_boot' in sys.modules,\n"
            f"                  'startup_on_path': sys.path.count({startup_dir!r}),\n"
            "                  'heavy': [m for m in ('numpy', 'pandas') if m in sys.modules]}))\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=PROGRAMS, env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    facts = json.loads(p.stdout)
    assert facts["pkg"] == str(pkg_copy / "__init__.py")
    assert facts["mark"] == ["stage", "head"]
    assert Path(facts["wrapper"]).is_relative_to(pkg_copy)
    assert facts["boot"] is False and facts["startup_on_path"] == 1 and facts["heavy"] == []


def test_env_form_broken_copy_one_line(tmp_path):
    """A clef_prof at $CLEF_PROF_PKG that raises on import: one line, exit 1; leniently, the
    program runs without it (and no half-imported clef_prof is left in sys.modules)."""
    broken = tmp_path / "clef_prof"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise RuntimeError('broken copy')\n")
    env = {**injected_env(), envform.ENV_PKG: str(broken)}
    code = "import sys; print('ran', 'clef_prof' in sys.modules)"
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert_one_line(p, 1, "clef-prof inject: error: cannot install", "RuntimeError: broken copy")
    assert "ran" not in p.stdout
    p = subprocess.run([sys.executable, "-c", code], env={**env, "CLEF_PROF_LENIENT": "1"},
                       capture_output=True, text=True, timeout=60)
    assert_one_line(p, 0, "clef-prof inject: warning: cannot install", "RuntimeError: broken copy")
    assert p.stdout.split() == ["ran", "False"]


def test_check_child_loads_the_copy_that_runs_it(tmp_path, pkg_copy):
    """`inject --check` run by a copy of clef_prof, with this tree's on PYTHONPATH: the checking
    interpreter imports the targets with the copy that started it (its PKG_DIR)."""
    (tmp_path / "probe.py").write_text(
        "import sys\n"
        "open(__file__ + '.seen', 'w').write(sys.modules['clef_prof'].__file__)\n"
        "def f():\n    return 1\n")
    (tmp_path / "spec.toml").write_text('[stages]\nparse = "probe:f"\n')
    code = (f"import sys\nsys.path.insert(0, {str(pkg_copy.parent)!r})\n"
            "from clef_prof.cli import main\nsys.exit(main())\n")
    p = subprocess.run([sys.executable, "-c", code, "inject", "--spec", "spec.toml", "--check"], cwd=tmp_path,
                       env=clean_env(PYTHONPATH=str(ROOT)), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "1 of 1 targets import and wrap" in p.stderr
    assert (tmp_path / "probe.py.seen").read_text() == str(pkg_copy / "__init__.py")


def test_env_form_chains_existing_sitecustomize(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import builtins\nbuiltins.THEIR_SITECUSTOMIZE_RAN = True\n")
    (theirs / "helper_mod.py").write_text("VALUE = 42\n")
    env = injected_env(base_pythonpath=str(theirs))
    assert env["PYTHONPATH"].split(os.pathsep) == [envform.STARTUP_DIR, str(theirs)]
    code = ("import builtins, sys, helper_mod\n"
            "import clef_prof.annotate.registry as i\n"
            "print(getattr(builtins, 'THEIR_SITECUSTOMIZE_RAN', False), helper_mod.VALUE, len(i.installed()))\n")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "42", "1"]


def test_env_form_strict_and_lenient(tmp_path):
    spec = tmp_path / "bad.toml"
    spec.write_text('[stages]\nparse = "pooler_app.plain:parse_schemaX"\nhead = "pooler_app.plain:Pooler.head"\n')
    code = "import pooler_app.plain as p; print('ran', hasattr(p.Pooler.head, '__clef_prof__'))"
    p = subprocess.run([sys.executable, "-c", code], cwd=PROGRAMS, env=injected_env(spec),
                       capture_output=True, text=True, timeout=60)
    assert_one_line(p, 1, "clef-prof inject: error:", "[stages].parse", "pooler_app.plain:parse_schemaX",
                    "has no attribute 'parse_schemaX'", "CLEF_PROF_LENIENT=1")
    assert "ran" not in p.stdout
    p = subprocess.run([sys.executable, "-c", code], cwd=PROGRAMS, env=injected_env(spec, lenient=True),
                       capture_output=True, text=True, timeout=60)
    assert_one_line(p, 0, "warning", "parse_schemaX", "skipped")
    assert p.stdout.strip() == "ran True"


def test_env_form_bad_spec_one_line(tmp_path):
    spec = tmp_path / "broken.toml"
    spec.write_text("[stages\n")
    p = subprocess.run([sys.executable, "-c", "print('ran')"], env=injected_env(spec), capture_output=True,
                       text=True, timeout=60)
    assert_one_line(p, 1, "TOML syntax error", str(spec))
    assert "ran" not in p.stdout


def test_print_env_forms(tmp_path):
    env = clean_env(PYTHONPATH="/opt/a:/opt/b")
    p = run_cli("inject", "--spec", POOLER_SPEC, "--print-env", env=env)
    assert p.returncode == 0, p.stderr
    assert f"export CLEF_PROF_SPEC={POOLER_SPEC}" in p.stdout
    assert f"export PYTHONPATH={envform.STARTUP_DIR}:/opt/a:/opt/b" in p.stdout
    p = run_cli("inject", "--spec", POOLER_SPEC, "--print-env", "--format", "json", "--lenient", env=env)
    d = json.loads(p.stdout)
    assert d["CLEF_PROF_LENIENT"] == "1" and d["CLEF_PROF_PKG"] == envform.PKG_DIR
    # twice: the bootstrap directory is not added again
    again = envform.environment(str(POOLER_SPEC), base={"PYTHONPATH": d["PYTHONPATH"]})
    assert again["PYTHONPATH"] == d["PYTHONPATH"]


def test_inject_command_runs_with_wrappers(tmp_path):
    out = tmp_path / "facts.json"
    p = run_cli("inject", "--spec", "pooler.toml", "--", sys.executable, "pooler_serve.py", "--batches", "2",
                "--out", out, cwd=PROGRAMS, env=clean_env(PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stderr
    facts = json.loads(out.read_text())
    assert all(facts["worker_wrapped"].values()) and all(facts["parent_wrapped"].values())
    # the command's exit code passes through
    p = run_cli("inject", "--spec", "pooler.toml", "--", sys.executable, "-c", "raise SystemExit(7)",
                cwd=PROGRAMS, env=clean_env(PYTHONPATH=str(ROOT)))
    assert p.returncode == 7, p.stderr


@pytest.mark.parametrize("spec_text, needles", [
    ('[stages]\nparse = "pooler_app.nope:parse_schema"', ["[stages].parse", "no module named 'pooler_app.nope'"]),
    ('[stages]\nparse = "no_such_pkg_x.server:f"', ["no module named 'no_such_pkg_x'"]),
    ('[stages]\nparse = "pooler_app.plain:parse_schemaX"', ["has no attribute 'parse_schemaX'"]),
    ('[stages]\nparse = "pooler_app.plain:json"', ["pooler_app.plain:json", "is not callable (a module)"]),
    ("[stages\nparse = 1", ["TOML syntax error"]),
])
def test_inject_command_refuses_bad_spec_before_launch(tmp_path, spec_text, needles):
    spec = tmp_path / "spec.toml"
    spec.write_text(spec_text)
    marker = tmp_path / "launched"
    p = run_cli("inject", "--spec", spec, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')",
                cwd=PROGRAMS, env=clean_env(PYTHONPATH=str(ROOT)))
    assert_one_line(p, 1, "clef-prof: error:", *needles)
    assert not marker.exists()


def test_inject_command_errors(tmp_path):
    p = run_cli("inject", "--spec", tmp_path / "none.toml", "--", "true")
    assert_one_line(p, 1, "no such stage spec")
    p = run_cli("inject", "--spec", POOLER_SPEC, "--no-check", "--", "no-such-command-xyz")
    assert_one_line(p, 1, "no-such-command-xyz: command not found")
    p = run_cli("inject", "--spec", POOLER_SPEC)
    assert_one_line(p, 1, "needs a command after --")


def test_check_uses_command_interpreter_and_path():
    assert check.command_python([sys.executable, "-u", "x/prog.py"], cwd="/srv") == (sys.executable, "/srv/x")
    assert check.command_python(["python3", "-m", "pkg"], cwd="/srv")[1] == "/srv"
    assert check.command_python(["no-such-command-xyz"]) == (None, None)


def test_emit_nsys_json(tmp_path):
    out = tmp_path / "pooler.json"
    p = run_cli("inject", "--spec", "pooler.toml", "--emit-nsys-json", out, cwd=PROGRAMS,
                env=clean_env(PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stderr
    blocks = json.loads(out.read_text())
    assert [(b["module"], b["functions"], b["category"]) for b in blocks] == [
        ("pooler_app.plain", ["Pooler.run"], "pooler"),
        ("pooler_app.plain", ["parse_schema"], "parse"),
        ("pooler_app.plain", ["Pooler.head"], "head")]
    assert all(b["domain"] == "clef" and b["color"].startswith("0x") for b in blocks)
    err = p.stderr
    assert "Pooler._indices is a staticmethod" in err and "Pooler.transfer is a classmethod" in err
    assert "encode is a coroutine function" in err
    assert "--batch pooler_app.plain.Pooler.run --stages pooler_app.plain.parse_schema,pooler_app.plain.Pooler.head" in err


# ---------------------------------------------------------------------------------------------
# acceptance under real nsys

def record(version: str, out: Path, name: str, argv: list, env: dict, nsys_args=()) -> Path:
    """Run argv in tests/programs under `nsys profile -t nvtx,osrt` (recording.profile: recorded again
    only on nsys' known failures); the export, out/tryN/name.sqlite."""
    return profile(argv, out / name, version, env, PROGRAMS, nsys_args, timeout=300)


BATCHES = 12


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    """{(version, mode): (analysis result, program facts)}: one nsys run each, 4 in all."""
    from clef_prof.analyze.pipeline import analyze
    tmp = tmp_path_factory.mktemp("inject-nsys")
    out = {}
    for v in NSYS_VERSIONS:
        for mode in ("annotated", "injected"):
            facts = tmp / f"{v}-{mode}.json"
            argv = [sys.executable, "pooler_serve.py", "--start", "spawn", "--batches", str(BATCHES), "--out", facts,
                    "--mode", "annotated" if mode == "annotated" else "plain"]
            # annotated: clef_prof from the checkout; injected: only the environment form, no
            # clef_prof on the program's path and no annotation in its source
            env = clean_env(PYTHONPATH=str(ROOT)) if mode == "annotated" else injected_env()
            sqlite = record(v, tmp, f"{v}-{mode}", argv, env)
            out[v, mode] = (analyze(str(sqlite)).result, json.loads(facts.read_text()))
    return out


@pytest.mark.nsys(*NSYS_VERSIONS)
@pytest.mark.parametrize("mode", ["annotated", "injected"])
@pytest.mark.parametrize("version", NSYS_VERSIONS)
def test_nsys_records_stages_in_the_worker(captures, version, mode):
    r, facts = captures[version, mode]
    sizes = facts["sizes"]
    assert r.batches == BATCHES == len(sizes)
    assert r.requests == sum(sizes) and r.requests_source == "message n=K"
    for s in STAGES:
        assert r.stages[s].instances == BATCHES, (s, r.stages[s])
    threads = r.capture.threads
    assert len(threads) == 1, threads               # every range on one thread ...
    t = threads[0]
    assert t.pid == facts["worker_pid"] != facts["parent_pid"]   # ... of the spawned worker
    assert t.batches == BATCHES
    assert t.stage_instances == {s: BATCHES for s in STAGES}
    assert r.excluded.outside_batch_instances == 0 and not r.excluded.cut_at_edges
    assert facts["worker_wrapped"] == {k: mode == "injected" for k in facts["worker_wrapped"]}


@pytest.mark.nsys("2023.4")
def test_nsys_2023_4_accepts_emitted_json(tmp_path):
    """nsys 2023.4 runs the JSON of --emit-nsys-json (no nvtx package needed): ranges named
    module.qualname, the range name as category; analyze reads them with the printed options."""
    from clef_prof.analyze.pipeline import analyze
    from clef_prof.base.config import StageConfig
    js = tmp_path / "pooler.json"
    p = run_cli("inject", "--spec", "pooler.toml", "--emit-nsys-json", js, cwd=PROGRAMS,
                env=clean_env(PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stderr
    facts = tmp_path / "facts.json"
    sqlite = record("2023.4", tmp_path, "json",
                    [sys.executable, "pooler_serve.py", "--batches", "4", "--out", facts],
                    clean_env(), nsys_args=(f"--python-nvtx-annotations={js}",))
    r = analyze(str(sqlite), StageConfig("clef", "pooler_app.plain.Pooler.run",
                                         ("pooler_app.plain.parse_schema", "pooler_app.plain.Pooler.head")),
                requests=10).result
    assert r.batches == 4
    assert r.stages["pooler_app.plain.parse_schema"].instances == 4
    assert r.stages["pooler_app.plain.Pooler.head"].instances == 4
    assert r.capture.threads[0].pid == json.loads(facts.read_text())["worker_pid"]
