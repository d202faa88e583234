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
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field

from .errors import SpecError
from .stage import DEFAULT_BATCH, DEFAULT_DOMAIN, StageConfig

_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


@dataclass(frozen=True)
class Target:
    """`package.module:Qualified.name` of a callable to wrap in an NVTX range."""

    module: str
    qualname: str

    @classmethod
    def parse(cls, text: str, where: str) -> "Target":
        if not isinstance(text, str) or not _TARGET.match(text.strip()):
            raise SpecError(f"{where}: {text!r} is not a target of the form 'package.module:Class.method'")
        mod, qual = text.strip().split(":", 1)
        return cls(mod, qual)

    def __str__(self) -> str:
        return f"{self.module}:{self.qualname}"


@dataclass(frozen=True)
class Spec:
    path: str
    domain: str = DEFAULT_DOMAIN
    batch_name: str = DEFAULT_BATCH
    batch_target: Target | None = None
    size_arg: str | None = None
    stages: dict[str, tuple[Target, ...]] = field(default_factory=dict)

    @property
    def config(self) -> StageConfig:
        return StageConfig(domain=self.domain, batch=self.batch_name, stages=tuple(self.stages))


def load(path: str) -> Spec:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise SpecError(f"{path}: no such stage spec") from None
    except IsADirectoryError:
        raise SpecError(f"{path}: is a directory, not a stage spec") from None
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: TOML syntax error: {exc}") from None
    return from_dict(data, path)


def from_dict(data: dict, path: str = "<spec>") -> Spec:
    known = {"domain", "batch", "stages", "description"}
    extra = set(data) - known
    if extra:
        raise SpecError(f"{path}: unknown keys {', '.join(sorted(extra))} (expected domain, batch, stages)")
    domain = data.get("domain", DEFAULT_DOMAIN)
    if not isinstance(domain, str):
        raise SpecError(f"{path}: domain must be a string")
    batch = data.get("batch", {})
    if not isinstance(batch, dict):
        raise SpecError(f"{path}: [batch] must be a table")
    target = Target.parse(batch["target"], f"{path} [batch].target") if "target" in batch else None
    size_arg = batch.get("size_arg")
    if size_arg is not None and not isinstance(size_arg, str):
        raise SpecError(f"{path}: [batch].size_arg must be a parameter name")
    stages_raw = data.get("stages", {})
    if not isinstance(stages_raw, dict) or not stages_raw:
        raise SpecError(f"{path}: [stages] must map stage names to targets")
    stages = {}
    for name, val in stages_raw.items():
        vals = val if isinstance(val, list) else [val]
        stages[name] = tuple(Target.parse(v, f"{path} [stages].{name}") for v in vals)
    return Spec(path=path, domain=domain, batch_name=batch.get("name", DEFAULT_BATCH),
                batch_target=target, size_arg=size_arg, stages=stages)
