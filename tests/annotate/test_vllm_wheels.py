"""The shipped vLLM spec and the vllm/sglang presets, held against the released wheels.

Each wheel is downloaded once without its dependencies (`pip download --no-deps`, into the
git-ignored `.cache/wheels/`; vLLM's are 260-340 MB) and its Python files unpacked beside it;
the modules are read with `ast`, never imported (no torch here). Without network the tests
skip, except under CI=true, where they fail.
"""
from __future__ import annotations

import ast
import os
import re
import types
import uuid
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from clef_prof.annotate import vllm_runner
from clef_prof.annotate.spec import load

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "wheels"
SPEC = ROOT / "annotations" / "clef-vllm.toml"
VLLM = ("0.22.1", "0.33.0")        # the oldest the spec claims, the newest release
SGLANG = "0.5.23"

pytestmark = pytest.mark.vllm


def unpacked(name: str, version: str) -> Path:
    """The wheel's Python files under .cache/wheels/x/NAME-VERSION/ (downloaded when missing)."""
    dest = CACHE / "x" / f"{name}-{version}"
    if (dest / ".done").exists() and list(dest.glob("*.dist-info/METADATA")):
        return dest
    wheels = list(CACHE.glob(f"{name}-{version}-*.whl"))
    if not wheels:
        p = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                            f"{name}=={version}", "-d", str(CACHE)], capture_output=True, text=True)
        wheels = list(CACHE.glob(f"{name}-{version}-*.whl"))
        if p.returncode != 0 or not wheels:
            why = f"cannot download {name}=={version}: {(p.stderr.strip().splitlines() or ['?'])[-1]}"
            if os.environ.get("CI", "").lower() in ("1", "true"):
                pytest.fail(why)
            pytest.skip(why)
    with zipfile.ZipFile(wheels[0]) as z:
        z.extractall(dest, [n for n in z.namelist() if n.endswith(".py") or n.endswith(".dist-info/METADATA")])
    (dest / ".done").touch()
    return dest


def module_file(root: Path, module: str) -> Path:
    base = root.joinpath(*module.split("."))
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.exists():
            return f
    raise AssertionError(f"no module {module} in {root.name}")


def tree(root: Path, module: str) -> ast.Module:
    return ast.parse(module_file(root, module).read_text(encoding="utf-8"))


def class_def(mod: ast.Module, name: str) -> ast.ClassDef:
    for node in mod.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise AssertionError(f"no class {name}")


def method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    raise AssertionError(f"no method {cls.name}.{name}")


def inherited(root: Path, module: str, cls_name: str, name: str) -> ast.FunctionDef:
    """The method `name` of the class, or of the first of its bases (followed through the module's
    `from ... import` lines, relative ones included) that defines it: what `getattr` finds."""
    mod = tree(root, module)
    cls = class_def(mod, cls_name)
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    return from_bases(root, module, cls_name, name)


def from_bases(root: Path, module: str, cls_name: str, name: str) -> ast.FunctionDef:
    """The method `name` of the first base of the class that has it (what `super().name` calls)."""
    mod = tree(root, module)
    cls = class_def(mod, cls_name)
    local = {n.name for n in mod.body if isinstance(n, ast.ClassDef)}
    for base in (ast.unparse(b) for b in cls.bases):
        where = module if base in local else None
        for imp in (n for n in mod.body if isinstance(n, ast.ImportFrom)):
            if where is None and base in [a.asname or a.name for a in imp.names]:
                pkg = module.split(".")[:-imp.level] if imp.level else []
                where = ".".join([*pkg, *([imp.module] if imp.module else [])])
        if where is not None and where.split(".")[0] == module.split(".")[0]:
            try:
                return inherited(root, where, base, name)
            except AssertionError:
                continue
    raise AssertionError(f"no method {cls_name}.{name} in {module} or its bases")


def params(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    return [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]


def fields(cls: ast.ClassDef) -> set[str]:
    """Annotated class attributes and `self.X = ...` assignments in its methods."""
    out = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    for node in ast.walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                out.add(t.attr)
    return out


@pytest.fixture(scope="module", params=VLLM)
def vllm(request) -> tuple[str, Path]:
    return request.param, unpacked("vllm", request.param)


def test_every_vllm_target_of_the_spec_exists(vllm):
    version, root = vllm
    assert _assert_targets_exist(SPEC, root, "vllm.", version) == 2 + 5 + 4 + 1   # batches, encoders, handlers, enqueue


def test_batch_size_and_id_attributes(vllm):
    version, root = vllm
    # V2: PoolingRunner.pool(hidden_states, input_batch: InputBatch, req_states)
    fn = method(class_def(tree(root, "vllm.v1.worker.gpu.pool.pooling_runner"), "PoolingRunner"), "pool")
    assert params(fn)[:4] == ["self", "hidden_states", "input_batch", "req_states"]
    assert {"req_ids", "num_reqs"} <= fields(class_def(tree(root, "vllm.v1.worker.gpu.input_batch"), "InputBatch"))
    # V1: GPUModelRunner._pool(..., num_scheduled_tokens_np, ...), ids in self.input_batch.req_ids
    runner = class_def(tree(root, "vllm.v1.worker.gpu_model_runner"), "GPUModelRunner")
    assert "input_batch" in fields(runner)
    v1_batch = tree(root, "vllm.v1.worker.gpu_input_batch")
    assert "req_ids" in fields(class_def(v1_batch, "InputBatch")) | {
        f.name for f in class_def(v1_batch, "InputBatch").body if isinstance(f, ast.FunctionDef)}


def test_build_pooling_cursor_gets_query_start_loc_in_both_runners(vllm):
    """Why the spec says not to add build_pooling_cursor to `transfer`: serving never lets it copy."""
    version, root = vllm
    for module, cls, meth in (("vllm.v1.worker.gpu_model_runner", "GPUModelRunner", "_pool"),
                              ("vllm.v1.worker.gpu.pool.pooling_runner", "PoolingRunner", "pool")):
        fn = method(class_def(tree(root, module), cls), meth)
        calls = [c for c in ast.walk(fn) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                 and c.func.attr == "build_pooling_cursor"]
        if module.endswith("pooling_runner") and not calls:
            continue                       # 0.22.1's V2 pool builds no cursor at all
        assert calls and all("query_start_loc_gpu" in [k.arg for k in c.keywords] for c in calls), (version, module)


def test_v2_pooling_calls_the_pooler_only_in_newer_vllm(vllm):
    version, root = vllm
    src = module_file(root, vllm_runner.V2_POOL_MODULE).read_text(encoding="utf-8")
    assert vllm_runner.calls_pooler(src) is (version != "0.22.1")


def test_runner_selection_reads_the_environment_variable(vllm):
    version, root = vllm
    text = module_file(root, "vllm.config.vllm").read_text(encoding="utf-8")
    prop = method(class_def(ast.parse(text), "VllmConfig"), "use_v2_model_runner")
    assert vllm_runner.ENV in ast.unparse(prop)
    envs = module_file(root, "vllm.envs").read_text(encoding="utf-8")
    assert f'"{vllm_runner.ENV}": lambda: maybe_convert_bool(' in envs
    assert "return bool(int(value))" in ast.unparse(ast.parse(envs))
    assert vllm_runner.decide({vllm_runner.ENV: "1"})[0] == "vllm-v2"
    assert vllm_runner.decide({vllm_runner.ENV: "0"})[0] == "vllm-v1"
    assert vllm_runner.decide({})[0] is None


def test_the_vllm_preset_flags_exist(vllm):
    version, root = vllm
    router = module_file(root, "vllm.entrypoints.serve.profile.api_router").read_text(encoding="utf-8")
    assert '"/start_profile"' in router and '"/stop_profile"' in router and "profiler_config.profiler is not None" in router
    assert '"--profiler-config"' in module_file(root, "vllm.engine.arg_utils").read_text(encoding="utf-8")
    prof = module_file(root, "vllm.config.profiler").read_text(encoding="utf-8")
    assert '"cuda"' in [ln for ln in prof.splitlines() if ln.startswith("ProfilerKind")][0]
    envs = module_file(root, "vllm.envs").read_text(encoding="utf-8")
    assert '"VLLM_WORKER_MULTIPROC_METHOD", "fork", ["spawn", "fork"]' in envs
    req = [c for c in tree(root, "vllm.entrypoints.serve.profile.api_router").body
           if isinstance(c, ast.ClassDef) and c.name == "StartProfileRequest"]
    if version == "0.33.0":                # the start body: max_iterations, extra fields ignored
        assert "max_iterations" in fields(req[0]) and "extra='ignore'" in ast.unparse(req[0])
    else:
        assert not req                     # 0.22.1 takes no body (one sent is ignored)


def test_sglang_endpoints_and_port():
    root = unpacked("sglang", SGLANG)
    http = module_file(root, "sglang.srt.entrypoints.http_server").read_text(encoding="utf-8")
    routes = {ast.literal_eval(d.args[0]) for n in ast.walk(ast.parse(http)) if isinstance(n, ast.AsyncFunctionDef)
              for d in n.decorator_list if isinstance(d, ast.Call) and d.args and isinstance(d.args[0], ast.Constant)}
    assert {"/start_profile", "/stop_profile", "/server_info", "/health"} <= routes
    assert "deprecated - use /server_info" in http
    serving = module_file(root, "sglang.srt.arg_groups.fields.serving").read_text(encoding="utf-8")
    assert 'port: A[int, "The port of the HTTP server."] = 30000' in serving
    io = class_def(tree(root, "sglang.srt.managers.io_struct"), "ProfileReq")
    assert {"activities", "num_steps"} <= fields(io)
    prof = module_file(root, "sglang.srt.utils.profile_utils").read_text(encoding="utf-8")
    assert '"CUDA_PROFILER" in activities' in prof


def test_inject_check_says_which_runner_runs(tmp_path):
    """`inject --check` in an interpreter where the 0.22.1 wheel is installed (its files and
    metadata on the path): the environment variable decides, the other batch target is never called."""
    root = unpacked("vllm", "0.22.1")
    pkg = tmp_path / "clefpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "runners.py").write_text("class A:\n    def _pool(self, rows): pass\n"
                                    "class B:\n    def pool(self, input_batch): pass\n"
                                    "def parse(x): pass\n")
    spec = tmp_path / "s.toml"
    spec.write_text('[[batch]]\ntarget = "clefpkg.runners:A._pool"\nsize_arg = "rows"\nrunner = "vllm-v1"\n'
                    '[[batch]]\ntarget = "clefpkg.runners:B.pool"\nsize_arg = "input_batch.num_reqs"\n'
                    'runner = "vllm-v2"\n[stages]\nparse = "clefpkg.runners:parse"\n')

    def check(value):
        env = {k: v for k, v in os.environ.items() if k != vllm_runner.ENV}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(tmp_path), str(root)])
        if value is not None:
            env[vllm_runner.ENV] = value
        return subprocess.run([sys.executable, "-m", "clef_prof", "inject", "--spec", str(spec), "--check"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    p = check("0")
    assert p.returncode == 0, p.stderr
    assert "vLLM 0.22.1 will run Model Runner V1 (VLLM_USE_V2_MODEL_RUNNER=0)" in p.stderr
    assert "[batch][1].target clefpkg.runners:B.pool (vllm-v2) will never be called" in p.stderr
    assert "3 of 3 targets import and wrap" in p.stderr and "2 of them will be called" in p.stderr
    p = check("1")
    assert "Model Runner V2" in p.stderr and "[batch][0].target" in p.stderr
    assert "PoolingRunner.pool never calls the model's pooler" in p.stderr      # 0.22.1's V2
    p = check(None)
    assert p.returncode == 0 and "cannot tell which vLLM model runner" in p.stderr
    assert "will be called" not in p.stderr


def _assert_targets_exist(spec_path: Path, root: Path, prefix: str, version: str) -> int:
    """Every target of the spec under `prefix` is a method of its class (or of a base it inherits
    it from) in the unpacked wheel, and the batch's size and id arguments, the request handler's
    header and id arguments and the enqueue id argument are its parameters (dotted: the first part)."""
    checked = 0
    for b in load(str(spec_path)).bindings():
        if not b.target.module.startswith(prefix):
            continue
        cls_name, meth_name = b.target.qualname.split(".")
        fn = inherited(root, b.target.module, cls_name, meth_name)
        if fn.args.vararg is not None:      # `m(self, *args, **kwargs)` forwarding to super().m: read by the base's
            assert f"super().{meth_name}(*args, **kwargs)" in ast.unparse(fn), (version, b.where)
            fn = from_bases(root, b.target.module, cls_name, meth_name)
        for arg in (b.size_arg, b.request_ids_arg, b.id_arg, b.header_arg if b.id_header else None):
            if arg:
                assert arg.split(".")[0] in params(fn), (version, b.where, arg, params(fn))
        checked += 1
    return checked


def test_every_target_of_the_generic_vllm_pooling_spec_exists():
    """annotations/vllm-pooling.toml against 0.33.0, and its one documented change for 0.22.1."""
    spec = ROOT / "annotations" / "vllm-pooling.toml"
    root = unpacked("vllm", "0.33.0")
    assert _assert_targets_exist(spec, root, "vllm.", "0.33.0") == 2 + 1 + 1 + 2 + 5 + 4 + 1
    old = unpacked("vllm", "0.22.1")
    base = tree(old, "vllm.entrypoints.pooling.base.serving")
    method(class_def(base, "PoolingServingBase"), "_preprocessing")
    for b in load(str(spec)).bindings():
        if b.target.qualname != "PoolingBaseServing._preprocessing":
            cls_name, meth_name = b.target.qualname.split(".")
            inherited(old, b.target.module, cls_name, meth_name)


def test_the_vllm_pooling_spec_counts_nothing_twice():
    """The listed poolers are leaves: neither calls the other, and the embedding server's own
    _preprocessing (not listed) calls the base one (listed): no stage nests in itself."""
    root = unpacked("vllm", "0.33.0")
    for module, cls in (("vllm.model_executor.layers.pooler.seqwise.poolers", "SequencePooler"),
                        ("vllm.model_executor.layers.pooler.tokwise.poolers", "TokenPooler")):
        calls = [ast.unparse(c.func) for c in ast.walk(method(class_def(tree(root, module), cls), "forward"))
                 if isinstance(c, ast.Call)]
        assert calls and not [c for c in calls if "Pooler" in c or "pooler" in c], calls
    embed = ast.unparse(method(class_def(tree(root, "vllm.entrypoints.pooling.embed.serving"), "ServingEmbedding"),
                               "_preprocessing"))
    assert "super()._preprocessing(" in embed


def test_every_target_of_the_sglang_spec_exists():
    root = unpacked("sglang", SGLANG)
    spec = ROOT / "annotations" / "sglang-embedding.toml"
    assert _assert_targets_exist(spec, root, "sglang.", SGLANG) == 4 + 2    # and the handler, the enqueue
    fb = class_def(tree(root, "sglang.srt.model_executor.forward_batch_info"), "ForwardBatch")
    assert "batch_size" in fields(fb)
    # both tokenizer paths (one request, a batch) go through _tokenize_texts
    tm = class_def(tree(root, "sglang.srt.managers.tokenizer_manager"), "TokenizerManager")
    for caller in ("_tokenize_one_request", "_batch_tokenize_and_process"):
        assert "self._tokenize_texts(" in ast.unparse(method(tm, caller))


# ------------------------------------------------------------------------------------------
# request ids: the spec's [request] tables against how each release forms and renames them

def fstrings(fn: ast.AST, having: str) -> list[ast.JoinedStr]:
    return [n for n in ast.walk(fn) if isinstance(n, ast.JoinedStr) and having in ast.unparse(n)]


def render(node: ast.JoinedStr, **names) -> str:
    """The wheel's own f-string, evaluated with `names` standing for what it reads."""
    return eval(compile(ast.Expression(node), "<wheel f-string>", "eval"), {"__builtins__": {}}, names)


def _function(root: Path, module: str, name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(tree(root, module)) if isinstance(n, ast.FunctionDef) and n.name == name)


BASES = ("3f2a9c0d1e2b4a5f", "123e4567-e89b-12d3-a456-426614174000", "client-7", "a-0", "x-deadbeef")


def test_vllm_request_ids_map_back_by_the_spec_pattern(vllm):
    """Both vLLM specs carry one [request] table; the ids each release builds (its own f-strings,
    evaluated) at the handler, at `add_request` and in the worker's batch map back to the handler's
    id through `engine_id_pattern`, for every handler's prefix, prompt index and chunked embedding."""
    version, root = vllm
    r = load(str(SPEC)).request
    assert load(str(ROOT / "annotations" / "vllm-pooling.toml")).request == r
    pat = re.compile(r.engine_id_pattern)
    emb = "vllm.entrypoints.pooling.embed.serving"
    init = inherited(root, emb, "ServingEmbedding", "_init_ctx")
    [api_fmt] = fstrings(init, "request_id_prefix")
    # the handler's id: the X-Request-Id header, else (0.33) the body's request_id, else random
    assert f"raw_request.headers.get('{r.id_header}')" in ast.unparse(inherited(root, emb, "ServingEmbedding",
                                                                                "_base_request_id"))
    call = next(c for c in ast.walk(init) if isinstance(c, ast.Call) and ast.unparse(c.func) == "self._base_request_id")
    assert [ast.unparse(a) for a in call.args] == (
        ["raw_request", "getattr(request, 'request_id', None)"] if version == "0.33.0" else ["raw_request"])
    assert r.id_arg == "request.request_id" and r.header_arg == "raw_request"
    gen = inherited(root, emb, "ServingEmbedding", "_prepare_generators")
    [prompt_fmt] = fstrings(gen, "ctx.request_id")
    assert "request_id=prompt_request_id" in ast.unparse(gen) or "prompt_request_id," in ast.unparse(gen)
    [chunk_fmt] = fstrings(tree(root, "vllm.entrypoints.pooling.embed.io_processor"), "-chunk-")
    assign = method(class_def(tree(root, "vllm.v1.engine.input_processor"), "InputProcessor"), "assign_request_id")
    [suffix_fmt] = fstrings(assign, "external_req_id")
    [uuid_fmt] = fstrings(_function(root, "vllm.utils", "random_uuid"), "uuid4")
    mask = eval(ast.unparse(next(n.value for n in tree(root, "vllm.utils").body if isinstance(n, ast.Assign)
                                 and ast.unparse(n.targets[0]) == "MASK_64_BITS")), {"__builtins__": {}})

    def random_uuid():
        return render(uuid_fmt, uuid=uuid, MASK_64_BITS=mask)

    # the enqueue target sees the prompt's id before the engine appends its suffix
    llm = class_def(tree(root, "vllm.v1.engine.async_llm"), "AsyncLLM")
    assert "self.input_processor.assign_request_id(request)" in ast.unparse(method(llm, "add_request"))
    assert "await self.add_request(request_id," in ast.unparse(method(llm, "encode"))
    assert r.enqueue_id_arg == "request_id"
    # the engine core's request (the worker's input_batch.req_ids) keeps the suffixed id
    assert "request_id=request.request_id" in ast.unparse(_function(root, "vllm.v1.request",
                                                                      "from_engine_core_request"))
    checked = lates = 0
    for t in r.targets:
        cls = class_def(tree(root, t.module), t.qualname.split(".")[0])
        [prefix] = [ast.literal_eval(n.value) for n in cls.body if isinstance(n, ast.Assign)
                    and ast.unparse(n.targets[0]) == "request_id_prefix"]
        for base in BASES:
            api = render(api_fmt, self=types.SimpleNamespace(request_id_prefix=prefix,
                                                             _base_request_id=lambda *a: base),
                         base_request_id=base, raw_request=None, request=None)
            assert api == f"{prefix}-{base}"
            ctx = types.SimpleNamespace(request_id=api)
            prompts = [render(prompt_fmt, ctx=ctx, i=i) for i in (0, 1, 12)]
            prompts += [render(chunk_fmt, request_id=api, prompt_idx=p, chunk_idx=c) for p, c in ((0, 0), (3, 11))]
            # /score's late-interaction keys where they carry the request id (0.22.1: `-query-i`, `-doc-i`)
            late = [f for f in fstrings(cls, "ctx.request_id") if re.search(r"-(query|doc)-", ast.unparse(f))]
            prompts += [render(f, ctx=ctx, i=i) for f in late for i in (0, 7)]
            lates += len(late) * 2
            for pid in prompts:
                engine = render(suffix_fmt, request=types.SimpleNamespace(external_req_id=pid), random_uuid=random_uuid)
                assert re.fullmatch(r"-[0-9a-f]{8}", engine[len(pid):]), engine
                for seen in (pid, engine):     # at add_request (the enqueue mark), in the batch
                    assert pat.fullmatch(seen).group(1) == base, (version, seen)
                    checked += 1
    assert checked == (len(r.targets) * len(BASES) * 5 + lates) * 2 and len(r.targets) == 4
    assert (lates > 0) == (version == "0.22.1")      # 0.33's late-interaction keys hold no request id
    # every handler is awaited as `handler(request, raw_request)`: the type's __call__ is looked up
    router = module_file(root, "vllm.entrypoints.pooling.embed.api_router").read_text(encoding="utf-8")
    assert "await handler(request, raw_request)" in router


def test_sglang_request_ids_reach_the_batch_unchanged():
    """SGLang keeps the body's rid from the handler to the scheduler's batch: no pattern; the
    batch's ids are `forward_batch.rids`; a rid is drawn only when the body has none."""
    root = unpacked("sglang", SGLANG)
    spec = load(str(ROOT / "annotations" / "sglang-embedding.toml"))
    r = spec.request
    assert r.engine_id_pattern is None and r.id_arg == "request.rid" and r.enqueue_id_arg == "tokenized_obj.rid"
    assert spec.batches[0].request_ids_arg == "forward_batch.rids"
    conv = method(class_def(tree(root, "sglang.srt.entrypoints.openai.serving_embedding"), "OpenAIServingEmbedding"),
                  "_convert_to_internal_request")
    assert "rid=request.rid" in ast.unparse(conv)
    assert "rid" in fields(class_def(tree(root, "sglang.srt.entrypoints.openai.protocol"), "EmbeddingRequest"))
    norm = method(class_def(tree(root, "sglang.srt.managers.io_struct"), "EmbeddingReqInput"),
                  "normalize_batch_and_arguments")
    sets = [n for n in ast.walk(norm) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "self.rid"]
    guarded = [a for i in ast.walk(norm) if isinstance(i, ast.If) and ast.unparse(i.test) == "self.rid is None"
               for a in i.body if isinstance(a, ast.Assign)]
    assert sets and all(a in guarded for a in sets)          # drawn only when the body has none
    sched = method(class_def(tree(root, "sglang.srt.managers.scheduler"), "Scheduler"), "_handle_embedding_request")
    req = next(c for c in ast.walk(sched) if isinstance(c, ast.Call) and ast.unparse(c.func) == "Req")
    assert ast.unparse(req.args[0]) == "recv_req.rid"
    init = method(class_def(tree(root, "sglang.srt.model_executor.forward_batch_info"), "ForwardBatch"), "init_new")
    kw = [k for c in ast.walk(init) if isinstance(c, ast.Call) and ast.unparse(c.func) in ("cls", "ForwardBatch")
          for k in c.keywords if k.arg == "rids"]
    assert [ast.unparse(k.value) for k in kw] == ["[req.rid for req in batch.reqs]"]
    assert "rids" in fields(class_def(tree(root, "sglang.srt.model_executor.forward_batch_info"), "ForwardBatch"))
    http = module_file(root, "sglang.srt.entrypoints.http_server").read_text(encoding="utf-8")
    assert "app.state.openai_serving_embedding.handle_request(" in http
