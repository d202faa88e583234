"""Stage specs: the minimal TOML form, the extensions inject needs, and one clear line per bad spec."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clef_prof.base import config
from clef_prof.base.errors import SpecError
from clef_prof.annotate.spec import Binding, Target, from_dict, load
from clicheck import run_main

ROOT = Path(__file__).resolve().parents[2]

MINIMAL = """\
domain = "clef"                      # optional; "clef" by default
[batch]
target = "pkg.server:Pooler.run"     # the outer batch range
size_arg = "batch"                   # the batch size is len() of this parameter
[stages]
parse = "pkg.server:parse_schema"
index = "pkg.server:Pooler._indices"
transfer = "pkg.server:Pooler.transfer"
head = "pkg.server:Pooler.head"
encode = "pkg.frontend:encode"
"""


def write(tmp_path, text, name="spec.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_minimal_form(tmp_path):
    s = load(write(tmp_path, MINIMAL))
    assert s.domain == "clef" and s.batch_name == "pooler" and s.size_arg == "batch"
    assert s.batch_target == Target("pkg.server", "Pooler.run")
    assert s.config == config.StageConfig()          # what analyze reads: the defaults
    assert s.stages["index"] == (Target("pkg.server", "Pooler._indices"),)
    assert [b.where for b in s.bindings()] == ["[batch].target", "[stages].parse", "[stages].index",
                                               "[stages].transfer", "[stages].head", "[stages].encode"]
    assert s.bindings()[0] == Binding("batch", "pooler", Target("pkg.server", "Pooler.run"), "[batch].target", "batch")


def test_domain_defaults_and_analyze_only_form(tmp_path):
    s = load(write(tmp_path, '[stages]\nparse = "a:b"\n'))
    assert s.domain == config.DEFAULT_DOMAIN and s.batch_target is None and s.bindings()[0].role == "stage"


def test_extensions_round_trip(tmp_path):
    text = MINIMAL.replace('size_arg = "batch"', 'size_arg = "metadata.prompt_lens"\n'
                           'request_ids_arg = "self.input_batch.req_ids"\nname = "pool"')
    text = text.replace('encode = "pkg.frontend:encode"', 'encode = ["pkg.frontend:encode", "pkg.frontend:encode_bytes"]')
    s = load(write(tmp_path, 'description = "x"\n' + text))
    assert s.size_arg == "metadata.prompt_lens" and s.request_ids_arg == "self.input_batch.req_ids"
    assert s.batch_name == "pool" and s.config.batch == "pool"
    assert [b.where for b in s.bindings()][-2:] == ["[stages].encode[0]", "[stages].encode[1]"]
    assert from_dict(s.to_dict(), s.path) == s


def test_cli_analyze_reads_spec(tmp_path):
    spec = write(tmp_path, '[batch]\nname = "pooler"\n[stages]\nparse = "a:b"\nhead = "a:c"\n')
    p = run_main("analyze", ROOT / "traces" / "cpu23-inline.sqlite", "--spec", spec, "-f", "json", cwd=ROOT)
    assert p.returncode == 0, p.stderr
    import json
    r = json.loads(p.stdout)
    assert set(r["stages"]) == {"parse", "head"} and r["requests"] == 400


@pytest.mark.parametrize("text, needle", [
    ("[stages\nparse = 1", "TOML syntax error"),
    ('domain = "clef"\nstage = {}\n[stages]\nparse = "a:b"', "unknown keys stage"),
    ('[batch]\ntarget = "a:b"\nsize = "x"\n[stages]\nparse = "a:c"', "unknown keys in [batch]: size"),
    ('[stages]\nparse = "pkg.server.parse_schema"', "is not a target of the form"),
    ('[stages]\nparse = "pkg.server:"', "is not a target of the form"),
    ('[stages]\nparse = 3', "is not a target of the form"),
    ('[stages]\nparse = []', "an empty list of targets"),
    ("[stages]", "[stages] must map stage names to targets"),
    ('[batch]\ntarget = "a:b"\n[stages]\nparse = "a:b"', "already the target of [batch].target"),
    ('[stages]\nparse = "a:b"\nhead = "a:b"', "already the target of [stages].parse"),
    ('[stages]\npooler = "a:b"', "cannot share the batch range's name"),
    ('[batch]\nsize_arg = "len(batch)"\n[stages]\nparse = "a:b"', "[batch].size_arg must be a parameter name"),
    ('[batch]\nname = ""\n[stages]\nparse = "a:b"', "[batch].name must be a non-empty string"),
    ('domain = 3\n[stages]\nparse = "a:b"', "domain must be a string"),
])
def test_bad_spec_one_line(tmp_path, text, needle):
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as e:
        load(path)
    msg = str(e.value)
    assert "\n" not in msg and needle in msg and str(path) in msg


def test_missing_and_directory(tmp_path):
    with pytest.raises(SpecError, match="no such stage spec"):
        load(tmp_path / "nope.toml")
    with pytest.raises(SpecError, match="is a directory"):
        load(tmp_path)


def test_shipped_specs_load():
    specs = sorted((ROOT / "annotations").glob("*.toml"))
    assert any(p.name == "clef-vllm.toml" for p in specs)
    for p in specs:
        s = load(p)
        assert s.bindings() and s.config.stages
    vllm = load(ROOT / "annotations" / "clef-vllm.toml")
    assert set(vllm.stages) == set(config.DEFAULT_STAGES) and vllm.batch_target and vllm.size_arg
    assert "vLLM" in (ROOT / "annotations" / "clef-vllm.toml").read_text()


def test_spec_and_inject_stay_light():
    """The injection loads spec.py in every server process: no pandas, no numpy."""
    code = ("import sys, clef_prof.annotate.spec, clef_prof.annotate.startup, clef_prof.annotate.api\n"
            "heavy = sorted(m for m in ('numpy', 'pandas', 'pyarrow', 'rich') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert p.returncode == 0, p.stderr
