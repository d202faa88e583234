"""Stage specs: TOML files in `annotations/` naming the NVTX domain, the batch range and the
stages, and (for `inject`) the functions that carry them.

Minimal form::

    domain = "clef"                      # optional, "clef" by default
    [batch]
    target = "pkg.server:Pooler.run"     # optional for analyze
    size_arg = "batch"                   # batch size = len() of this parameter
    name = "pooler"                      # optional, "pooler" by default
    [stages]
    parse = "pkg.server:parse_schema"    # or a list of targets
    encode = "../srv/server.py:respond"  # a script by path (relative to the spec's folder)

`size_arg` (and the optional `request_ids_arg`) name a parameter of the batch target, or an
attribute path below one: `"pooling_metadata.prompt_lens"` is `len(pooling_metadata.prompt_lens)`
(an int is taken as is), `"self.input_batch.req_ids"` reads the bound instance.

Several batch targets (a server with two code paths, e.g. vLLM's Model Runner V1 and V2) are an
array of tables, each with its own `target`, `size_arg` and `request_ids_arg`, and an optional
`runner` label (`"vllm-v1"`, `"vllm-v2"`: `inject --check` then says which one the server runs)::

    [[batch]]
    target = "pkg.v1:Runner._pool"
    size_arg = "num_scheduled_tokens_np"
    runner = "vllm-v1"
    [[batch]]
    target = "pkg.v2:PoolingRunner.pool"
    size_arg = "input_batch.num_reqs"
    runner = "vllm-v2"

All of them open the same batch range (`name`, the same in every table).

Per-request journeys (docs/journey.md) need a request range around each HTTP handler and, where
the request joins the batcher, an enqueue mark; a `[request]` table puts both in without edits::

    [request]
    target = "pkg.api:handle"            # or a list: every handler of a request
    id_header = "X-Request-Id"           # the id: a header of the HTTP request object ...
    header_arg = "request"               #   ... held by this parameter (default "request")
    # id_arg = "req.request_id"          # ... and/or a parameter / attribute path holding the id
    enqueue = "pkg.engine:Engine.add"    # optional: mark `enqueued rid=ID` when this is called
    enqueue_id_arg = "request_id"        #   with the id in this parameter / attribute path
    # engine_id_pattern = '^embd-(.+?)-[0-9]+$'   # analyze: an engine's id -> the request's (group 1)

With both `id_header` and `id_arg` the header is read first and the argument when the header is
absent (vLLM's own order). A call whose id cannot be read (absent, None, or a list: several ids)
runs without a range (it could not be joined to its batch). `engine_id_pattern` is for analyze
only: an id in a batch's `rid=` list or an enqueue mark that matches it in full stands for the
request whose id is its one group (a server that renames ids: vLLM's `embd-<id>-<n>-<random>`).

This module is standard library only (TOML through `tomllib`, or `tomli` on Python < 3.11):
the injection hook loads it in every profiled process.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ..base.config import StageConfig, with_overrides
from ..base.defaults import DEFAULT_BATCH, DEFAULT_DOMAIN
from ..base.errors import SpecError

_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
_ARG_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_FILE_TARGET = re.compile(r"^(.+\.py):([A-Za-z_]\w*(\.[A-Za-z_]\w*)*)$")

TOP_KEYS = ("domain", "batch", "stages", "description", "findings", "request")
REQUEST_KEYS = ("target", "id_arg", "id_header", "header_arg", "enqueue", "enqueue_id_arg", "engine_id_pattern")
BATCH_KEYS = ("target", "size_arg", "request_ids_arg", "name", "runner")


@dataclass(frozen=True)
class Target:
    """`package.module:Qualified.name` of a callable to wrap in an NVTX range, or
    `path/to/script.py:Qualified.name` for a script run by path (`path` is then its absolute
    path, relative ones taken from `base`, the spec's folder; `module` is the text as written)."""

    module: str
    qualname: str
    path: str | None = None

    @classmethod
    def parse(cls, text: str, where: str, base: str | None = None) -> "Target":
        m = _FILE_TARGET.match(text.strip()) if isinstance(text, str) else None
        if m:
            return cls(m.group(1), m.group(2), os.path.normpath(os.path.join(base or os.getcwd(), m.group(1))))
        if not isinstance(text, str) or not _TARGET.match(text.strip()):
            raise SpecError(f"{where}: {text!r} is not a target of the form 'package.module:Class.method' "
                            f"or 'path/to/script.py:Class.method'")
        mod, qual = text.strip().split(":", 1)
        if not _MODULE.match(mod):
            raise SpecError(f"{where}: {text!r}: {mod!r} is not a module path")
        return cls(mod, qual)

    def __str__(self) -> str:
        return f"{self.module}:{self.qualname}"


@dataclass(frozen=True)
class BatchTarget:
    """One `[batch]` table: the callable that opens the batch range, and where its size and
    request ids come from."""

    target: Target
    size_arg: str | None = None
    request_ids_arg: str | None = None
    runner: str | None = None          # a label such as "vllm-v1": which code path calls it
    where: str = "[batch].target"


@dataclass(frozen=True)
class Binding:
    """One target of a spec and the range it carries: `role` is "batch" or "stage"."""

    role: str
    name: str          # the stage name, or the batch range name
    target: Target
    where: str         # "[stages].parse", "[batch].target": for messages
    size_arg: str | None = None            # batch targets only
    request_ids_arg: str | None = None
    runner: str | None = None
    id_arg: str | None = None              # request and enqueue targets: where the id comes from
    id_header: str | None = None
    header_arg: str | None = None

    def __str__(self) -> str:
        return f"{self.where} = {self.target}"


@dataclass(frozen=True)
class RequestSpec:
    """The `[request]` table: handler targets and where their id comes from, and the optional
    enqueue target with its id."""

    targets: tuple[Target, ...]
    id_arg: str | None = None
    id_header: str | None = None
    header_arg: str = "request"
    enqueue: Target | None = None
    enqueue_id_arg: str | None = None
    engine_id_pattern: str | None = None     # analyze: engine id -> request id (its one group)


@dataclass(frozen=True)
class Spec:
    path: str
    domain: str = DEFAULT_DOMAIN
    batch_name: str = DEFAULT_BATCH
    batches: tuple[BatchTarget, ...] = ()
    stages: dict[str, tuple[Target, ...]] = field(default_factory=dict)
    description: str | None = None
    findings: tuple[tuple[str, float], ...] = ()     # [findings] threshold overrides
    request: RequestSpec | None = None               # [request]: request ranges and the enqueue mark

    @property
    def batch_target(self) -> Target | None:
        """The first batch target (the only one, in most specs)."""
        return self.batches[0].target if self.batches else None

    @property
    def size_arg(self) -> str | None:
        return self.batches[0].size_arg if self.batches else None

    @property
    def request_ids_arg(self) -> str | None:
        return self.batches[0].request_ids_arg if self.batches else None

    @property
    def config(self) -> StageConfig:
        return StageConfig(domain=self.domain, batch=self.batch_name, stages=tuple(self.stages), findings=self.findings,
                           engine_id_pattern=self.request.engine_id_pattern if self.request else None)

    def bindings(self) -> list[Binding]:
        """Every target to wrap: the batch targets first, then the stages in spec order."""
        out = [Binding("batch", self.batch_name, b.target, b.where, b.size_arg, b.request_ids_arg, b.runner)
               for b in self.batches]
        for name, targets in self.stages.items():
            for i, t in enumerate(targets):
                where = f"[stages].{name}" if len(targets) == 1 else f"[stages].{name}[{i}]"
                out.append(Binding("stage", name, t, where))
        r = self.request
        if r is not None:
            for i, t in enumerate(r.targets):
                where = "[request].target" if len(r.targets) == 1 else f"[request].target[{i}]"
                out.append(Binding("request", "request", t, where, id_arg=r.id_arg, id_header=r.id_header,
                                   header_arg=r.header_arg))
            if r.enqueue is not None:
                out.append(Binding("enqueue", "enqueued", r.enqueue, "[request].enqueue", id_arg=r.enqueue_id_arg))
        return out

    def to_dict(self) -> dict:
        """The spec as plain data, `from_dict(spec.to_dict())` round-trips."""
        d: dict = {"domain": self.domain}
        if self.description is not None:
            d["description"] = self.description
        tables = []
        for b in self.batches or (None,):
            t: dict = {"name": self.batch_name}
            if b is not None:
                t["target"] = str(b.target)
                for key in ("size_arg", "request_ids_arg", "runner"):
                    if getattr(b, key) is not None:
                        t[key] = getattr(b, key)
            tables.append(t)
        d["batch"] = tables[0] if len(tables) == 1 else tables
        d["stages"] = {k: (str(v[0]) if len(v) == 1 else [str(t) for t in v]) for k, v in self.stages.items()}
        if self.findings:
            d["findings"] = dict(self.findings)
        r = self.request
        if r is not None:
            t = {"target": str(r.targets[0]) if len(r.targets) == 1 else [str(x) for x in r.targets]}
            if r.id_arg is not None:
                t["id_arg"] = r.id_arg
            if r.id_header is not None:
                t.update(id_header=r.id_header, header_arg=r.header_arg)
            if r.enqueue is not None:
                t.update(enqueue=str(r.enqueue), enqueue_id_arg=r.enqueue_id_arg)
            if r.engine_id_pattern is not None:
                t["engine_id_pattern"] = r.engine_id_pattern
            d["request"] = t
        return d


def _toml():
    try:
        import tomllib
        return tomllib
    except ImportError:  # Python < 3.11 (a server's interpreter)
        try:
            import tomli
            return tomli
        except ImportError:
            raise SpecError("reading a stage spec needs Python >= 3.11 (tomllib) or the 'tomli' package") from None


def load(path: str) -> Spec:
    toml = _toml()
    if os.path.exists(path) and not os.path.isdir(path):
        from ..base.safeio import check_regular
        check_regular(path, "stage spec")
    try:
        with open(path, "rb") as fh:
            data = toml.load(fh)
    except FileNotFoundError:
        raise SpecError(f"{path}: no such stage spec") from None
    except IsADirectoryError:
        raise SpecError(f"{path}: is a directory, not a stage spec") from None
    except PermissionError:
        raise SpecError(f"{path}: permission denied") from None
    except toml.TOMLDecodeError as exc:
        raise SpecError(f"{path}: TOML syntax error: {exc}") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text: {exc}") from None
    return from_dict(data, path)


def _arg_path(value, key: str, path: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _ARG_PATH.match(value.strip()):
        raise SpecError(f"{path}: {key} must be a parameter name, or a dotted attribute path "
                        f"below one (e.g. 'batch' or 'metadata.prompt_lens'), not {value!r}")
    return value.strip()


def _batch_tables(raw, path: str) -> tuple[list[tuple[str, dict]], str]:
    """([(where-prefix, table)], batch range name) of `[batch]` or `[[batch]]`."""
    if isinstance(raw, dict):
        tables = [("[batch]", raw)]
    elif isinstance(raw, list) and raw and all(isinstance(t, dict) for t in raw):
        tables = [(f"[batch][{i}]", t) for i, t in enumerate(raw)]
    else:
        raise SpecError(f"{path}: [batch] must be a table, or a non-empty array of tables ([[batch]])")
    names = set()
    for where, t in tables:
        extra = set(t) - set(BATCH_KEYS)
        if extra:
            raise SpecError(f"{path}: unknown keys in {where}: {', '.join(sorted(extra))} "
                            f"(expected {', '.join(BATCH_KEYS)})")
        if len(tables) > 1 and "target" not in t:
            raise SpecError(f"{path}: {where}: every table of [[batch]] needs a target")
        if "runner" in t and (not isinstance(t["runner"], str) or not t["runner"].strip()):
            raise SpecError(f"{path}: {where}.runner must be a non-empty string")
        names.add(t.get("name", DEFAULT_BATCH))
    if len(names) > 1:
        raise SpecError(f"{path}: the [[batch]] tables name different ranges ({', '.join(sorted(map(str, names)))}); "
                        "they all open the one batch range")
    return tables, names.pop()


def from_dict(data: dict, path: str = "<spec>") -> Spec:
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a stage spec is a table")
    extra = set(data) - set(TOP_KEYS)
    if extra:
        raise SpecError(f"{path}: unknown keys {', '.join(sorted(extra))} (expected domain, batch, stages, findings, "
                        "request)")
    domain = data.get("domain", DEFAULT_DOMAIN)
    if not isinstance(domain, str):
        raise SpecError(f"{path}: domain must be a string")
    description = data.get("description")
    if description is not None and not isinstance(description, str):
        raise SpecError(f"{path}: description must be a string")
    tables, batch_name = _batch_tables(data.get("batch", {}), path)
    base = os.path.dirname(os.path.abspath(path)) if not str(path).startswith("<") else None
    if not isinstance(batch_name, str) or not batch_name.strip():
        raise SpecError(f"{path}: [batch].name must be a non-empty string")
    batches: list[BatchTarget] = []
    seen: dict[Target, str] = {}
    for where, t in tables:
        size_arg = _arg_path(t.get("size_arg"), f"{where}.size_arg", path)
        rid_arg = _arg_path(t.get("request_ids_arg"), f"{where}.request_ids_arg", path)
        if "target" not in t:
            continue
        target = _claim(t["target"], f"{where}.target", path, base, seen)
        runner = t["runner"].strip() if "runner" in t else None
        batches.append(BatchTarget(target, size_arg, rid_arg, runner, f"{where}.target"))
    stages_raw = data.get("stages", {})
    if not isinstance(stages_raw, dict) or not stages_raw:
        raise SpecError(f"{path}: [stages] must map stage names to targets")
    stages: dict[str, tuple[Target, ...]] = {}
    for name, val in stages_raw.items():
        if not name.strip() or name != name.strip():
            raise SpecError(f"{path}: [stages]: {name!r} is not a usable stage name")
        if name == batch_name:
            raise SpecError(f"{path}: [stages].{name}: a stage cannot share the batch range's name")
        vals = val if isinstance(val, list) else [val]
        if not vals:
            raise SpecError(f"{path}: [stages].{name}: an empty list of targets")
        ts = []
        for v in vals:
            ts.append(_claim(v, f"[stages].{name}", path, base, seen))
        stages[name] = tuple(ts)
    return Spec(path=path, domain=domain, batch_name=batch_name, batches=tuple(batches), stages=stages,
                description=description, findings=_findings(data.get("findings", {}), path),
                request=_request(data.get("request"), path, base, seen))



def _claim(value, where: str, path: str, base: str | None, seen: dict) -> "Target":
    """The target `value` names at `where`, refused when another key of the spec already claimed it."""
    t = Target.parse(value, f"{path} {where}", base)
    if t in seen:
        raise SpecError(f"{path}: {where}: {t} is already the target of {seen[t]}")
    seen[t] = where
    return t

_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")


def _request(raw, path: str, base: str | None, seen: dict) -> RequestSpec | None:
    """The [request] table, checked: targets, an id source (header, argument, or both: header
    first), the enqueue target and its id, and the engine id pattern."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: [request] must be a table")
    extra = set(raw) - set(REQUEST_KEYS)
    if extra:
        raise SpecError(f"{path}: unknown keys in [request]: {', '.join(sorted(extra))} "
                        f"(expected {', '.join(REQUEST_KEYS)})")
    vals = raw.get("target")
    vals = vals if isinstance(vals, list) else [vals] if vals is not None else []
    if not vals:
        raise SpecError(f"{path}: [request].target: name the handler(s) that run one request each")
    targets = []
    for v in vals:
        targets.append(_claim(v, "[request].target", path, base, seen))
    id_arg = _arg_path(raw.get("id_arg"), "[request].id_arg", path)
    header = raw.get("id_header")
    if header is not None and (not isinstance(header, str) or not _HEADER.match(header)):
        raise SpecError(f"{path}: [request].id_header must be an HTTP header name (e.g. 'X-Request-Id'), not {header!r}")
    if id_arg is None and header is None:
        raise SpecError(f"{path}: [request] needs id_arg (a parameter or attribute path holding the id) or "
                        "id_header (a header of the HTTP request object), or both (the header first)")
    header_arg = _arg_path(raw.get("header_arg", "request"), "[request].header_arg", path)
    enqueue = enqueue_id = None
    if "enqueue" in raw:
        enqueue = _claim(raw["enqueue"], "[request].enqueue", path, base, seen)
        enqueue_id = _arg_path(raw.get("enqueue_id_arg"), "[request].enqueue_id_arg", path)
        if enqueue_id is None:
            raise SpecError(f"{path}: [request].enqueue needs enqueue_id_arg: the parameter or attribute path "
                            "holding the request id")
    elif "enqueue_id_arg" in raw:
        raise SpecError(f"{path}: [request].enqueue_id_arg without enqueue")
    return RequestSpec(tuple(targets), id_arg, header, header_arg, enqueue, enqueue_id,
                       _engine_id_pattern(raw.get("engine_id_pattern"), path))


def _engine_id_pattern(value, path: str) -> str | None:
    """`[request].engine_id_pattern`, checked: a regular expression with exactly one group."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise SpecError(f"{path}: [request].engine_id_pattern must be a regular expression (a string), not {value!r}")
    try:
        groups = re.compile(value).groups
    except re.error as exc:
        raise SpecError(f"{path}: [request].engine_id_pattern {value!r} is not a regular expression: {exc}") from None
    if groups != 1:
        raise SpecError(f"{path}: [request].engine_id_pattern {value!r} has {groups} groups; it needs exactly one, "
                        "the request's id (write others as (?:...))")
    return value


def _findings(raw, path: str) -> tuple[tuple[str, float], ...]:
    """The [findings] table: threshold overrides, checked against the rules' thresholds."""
    from ..base.config import ThresholdError, thresholds

    if not isinstance(raw, dict):
        raise SpecError(f"{path}: [findings] must be a table of thresholds (e.g. overlap_max_pct = 30)")
    if any(isinstance(v, bool) for v in raw.values()):
        raise SpecError(f"{path}: [findings]: thresholds are numbers, not true/false")
    try:
        th = thresholds(raw)
    except ThresholdError as exc:
        raise SpecError(f"{path}: [findings]: {exc}") from None
    return tuple((k, th[k]) for k in raw)


def stage_config(spec_path: str | None = None, domain: str | None = None, batch: str | None = None,
                 stages=None, findings=(), base: StageConfig | None = None) -> StageConfig:
    """The stage names to analyze: `base`, else the spec's, else the defaults; then the given
    domain, batch name, stages (a sequence or "a,b,c") and threshold overrides over them."""
    cfg = base if base is not None else load(spec_path).config if spec_path else StageConfig()
    return with_overrides(cfg, domain, batch, stages, findings)
