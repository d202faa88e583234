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
attribute path below one: `"pooling_metadata.prompt_lens"` is `len(pooling_metadata.prompt_lens)`,
`"self.input_batch.req_ids"` reads the bound instance.

This module is standard library only (TOML through `tomllib`, or `tomli` on Python < 3.11):
the injection hook loads it in every profiled process.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from .config import DEFAULT_BATCH, DEFAULT_DOMAIN, StageConfig
from .errors import SpecError

_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
_ARG_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_FILE_TARGET = re.compile(r"^(.+\.py):([A-Za-z_]\w*(\.[A-Za-z_]\w*)*)$")

TOP_KEYS = ("domain", "batch", "stages", "description")
BATCH_KEYS = ("target", "size_arg", "request_ids_arg", "name")


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
class Binding:
    """One target of a spec and the range it carries: `role` is "batch" or "stage"."""

    role: str
    name: str          # the stage name, or the batch range name
    target: Target
    where: str         # "[stages].parse", "[batch].target": for messages

    def __str__(self) -> str:
        return f"{self.where} = {self.target}"


@dataclass(frozen=True)
class Spec:
    path: str
    domain: str = DEFAULT_DOMAIN
    batch_name: str = DEFAULT_BATCH
    batch_target: Target | None = None
    size_arg: str | None = None
    stages: dict[str, tuple[Target, ...]] = field(default_factory=dict)
    request_ids_arg: str | None = None
    description: str | None = None

    @property
    def config(self) -> StageConfig:
        return StageConfig(domain=self.domain, batch=self.batch_name, stages=tuple(self.stages))

    def bindings(self) -> list[Binding]:
        """Every target to wrap: the batch target first, then the stages in spec order."""
        out = []
        if self.batch_target is not None:
            out.append(Binding("batch", self.batch_name, self.batch_target, "[batch].target"))
        for name, targets in self.stages.items():
            for i, t in enumerate(targets):
                where = f"[stages].{name}" if len(targets) == 1 else f"[stages].{name}[{i}]"
                out.append(Binding("stage", name, t, where))
        return out

    def to_dict(self) -> dict:
        """The spec as plain data, `from_dict(spec.to_dict())` round-trips."""
        d: dict = {"domain": self.domain}
        if self.description is not None:
            d["description"] = self.description
        batch: dict = {"name": self.batch_name}
        if self.batch_target is not None:
            batch["target"] = str(self.batch_target)
        if self.size_arg is not None:
            batch["size_arg"] = self.size_arg
        if self.request_ids_arg is not None:
            batch["request_ids_arg"] = self.request_ids_arg
        d["batch"] = batch
        d["stages"] = {k: (str(v[0]) if len(v) == 1 else [str(t) for t in v]) for k, v in self.stages.items()}
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
        raise SpecError(f"{path}: [batch].{key} must be a parameter name, or a dotted attribute path "
                        f"below one (e.g. 'batch' or 'metadata.prompt_lens'), not {value!r}")
    return value.strip()


def from_dict(data: dict, path: str = "<spec>") -> Spec:
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a stage spec is a table")
    extra = set(data) - set(TOP_KEYS)
    if extra:
        raise SpecError(f"{path}: unknown keys {', '.join(sorted(extra))} (expected domain, batch, stages)")
    domain = data.get("domain", DEFAULT_DOMAIN)
    if not isinstance(domain, str):
        raise SpecError(f"{path}: domain must be a string")
    description = data.get("description")
    if description is not None and not isinstance(description, str):
        raise SpecError(f"{path}: description must be a string")
    batch = data.get("batch", {})
    if not isinstance(batch, dict):
        raise SpecError(f"{path}: [batch] must be a table")
    extra = set(batch) - set(BATCH_KEYS)
    if extra:
        raise SpecError(f"{path}: unknown keys in [batch]: {', '.join(sorted(extra))} "
                        f"(expected {', '.join(BATCH_KEYS)})")
    base = os.path.dirname(os.path.abspath(path)) if not str(path).startswith("<") else None
    target = Target.parse(batch["target"], f"{path} [batch].target", base) if "target" in batch else None
    size_arg = _arg_path(batch.get("size_arg"), "size_arg", path)
    rid_arg = _arg_path(batch.get("request_ids_arg"), "request_ids_arg", path)
    batch_name = batch.get("name", DEFAULT_BATCH)
    if not isinstance(batch_name, str) or not batch_name.strip():
        raise SpecError(f"{path}: [batch].name must be a non-empty string")
    stages_raw = data.get("stages", {})
    if not isinstance(stages_raw, dict) or not stages_raw:
        raise SpecError(f"{path}: [stages] must map stage names to targets")
    stages: dict[str, tuple[Target, ...]] = {}
    seen: dict[Target, str] = {target: "[batch].target"} if target is not None else {}
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
            t = Target.parse(v, f"{path} [stages].{name}", base)
            if t in seen:
                raise SpecError(f"{path}: [stages].{name}: {t} is already the target of {seen[t]}")
            seen[t] = f"[stages].{name}"
            ts.append(t)
        stages[name] = tuple(ts)
    return Spec(path=path, domain=domain, batch_name=batch_name, batch_target=target, size_arg=size_arg,
                stages=stages, request_ids_arg=rid_arg, description=description)
