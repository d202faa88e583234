"""Read NVTX ranges of one domain from an export, with names resolved and filtering in SQL."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from .export import NAME_CHARS, Export

RANGE_TYPES = (59, 60, 70, 71)          # push/pop, start/end, and their NVTXT twins
PUSH_POP = (59, 70)                     # ranges that nest per thread (a call inside a call)
MARK_TYPES = (34,)                      # NvtxMark (nsys 2022.4 to 2025.3), end NULL
DOMAIN_CREATE = 75
# domains that hold no user annotation: nsys' own Python sampling, clef-prof's sampler and clock marks
TOOL_DOMAINS = ("Python Backtrace", "Python Periodic Sampling", "clef-prof samples", "clef-prof clock")
PAYLOAD_COLUMNS = ("int64Value", "uint64Value", "int32Value", "uint32Value")


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _glob_escape(s: str) -> str:
    return "".join(f"[{c}]" if c in "*?[]" else c for c in s)


def _name_expr(cap: Export, alias: str, chars: int = NAME_CHARS) -> tuple[str, str]:
    """SQL for a row's message, cut to `chars`: a registered string (textId) wins over ASCII text;
    a string stored as a BLOB is read as text (a BLOB equals no text in SQL: its range would match
    no stage name)."""
    if cap.has("StringIds") and "textId" in cap.columns("NVTX_EVENTS"):
        return (f"substr(CAST(COALESCE(s_{alias}.value, {alias}.text, '') AS TEXT), 1, {int(chars)})",
                f"LEFT JOIN StringIds s_{alias} ON s_{alias}.id = {alias}.textId")
    return f"substr(CAST(COALESCE({alias}.text, '') AS TEXT), 1, {int(chars)})", ""


def domains(cap: Export) -> list[tuple[int | None, int | None, str]]:
    """(domainId, process key, name) of each distinct domain-create row; one scan, kept."""
    memo = cap.memo
    if "nvtx_domains" not in memo:
        dname, djoin = _name_expr(cap, "d")
        memo["nvtx_domains"] = [tuple(r) for r in cap.rows(
            f"SELECT DISTINCT d.domainId, (d.globalTid >> 24), {dname} FROM NVTX_EVENTS d {djoin} "
            f"WHERE d.eventType = {DOMAIN_CREATE}")]
    return memo["nvtx_domains"]


def _domain_filter(cap: Export, domain: str) -> tuple[str, str]:
    """A WITH clause and join condition that keep rows of `domain` (per process)."""
    if cap.export_meta.get("CLEF_SOURCE") == "kineto":
        return "", "1"          # a PyTorch profiler trace: user_annotation ranges have no domain
    if domain == "":
        return "", "COALESCE(e.domainId, 0) = 0"
    pairs = sorted({(did, pk) for did, pk, name in domains(cap) if name == domain and did is not None
                    and pk is not None})
    if len(pairs) <= 64:        # the usual case: a constant condition instead of a subquery per row
        cond = " OR ".join(f"(e.domainId = {int(d)} AND (e.globalTid >> 24) = {int(p)})" for d, p in pairs)
        return "", f"({cond or '0'})"
    dname, djoin = _name_expr(cap, "d")
    cte = (f"WITH dom AS (SELECT DISTINCT d.domainId AS did, (d.globalTid >> 24) AS pk "
           f"FROM NVTX_EVENTS d {djoin} WHERE d.eventType = {DOMAIN_CREATE} AND {dname} = {_lit(domain)}) ")
    return cte, "e.domainId IN (SELECT did FROM dom WHERE dom.pk = (e.globalTid >> 24))"


@dataclass
class Ranges:
    """Closed-form NVTX ranges: parallel arrays, one entry per range."""

    start: np.ndarray
    end: np.ndarray
    gtid: np.ndarray
    cross_thread: np.ndarray   # ended on another thread (start/end ranges)
    name: np.ndarray           # object array of str
    payload: np.ndarray        # first integer payload, 0 when none
    push_pop: np.ndarray       # bool: a push/pop range (nests per thread); else start/end

    def __len__(self) -> int:
        return len(self.start)

    def take(self, idx) -> "Ranges":
        return Ranges(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))


def read_ranges(cap: Export, domain: str, exact: list[str], prefixes: list[str], chars: int = NAME_CHARS,
                types: tuple[int, ...] = RANGE_TYPES, probe: bool = False) -> Ranges:
    """Ranges of `domain` whose message equals one of `exact` or starts with `prefix + ' '`, messages
    cut to `chars`; `types` (MARK_TYPES) reads marks instead, with end -1. `probe`: whether there is
    one at all (a small query that stops at the first; the result has one zeroed row or none)."""
    cols = cap.columns("NVTX_EVENTS")
    name, njoin = _name_expr(cap, "e", chars)
    cte, dcond = _domain_filter(cap, domain)
    payload = [c for c in PAYLOAD_COLUMNS if c in cols]
    pexpr = f"COALESCE({', '.join('e.' + c for c in payload)}, 0)" if payload else "0"
    xt = "COALESCE(e.endGlobalTid, 0)" if "endGlobalTid" in cols else "0"
    conds = []
    if exact:
        conds.append(f"nm IN ({', '.join(_lit(n) for n in exact)})")
    for p in prefixes:
        conds.append(f"nm GLOB {_lit(_glob_escape(p) + ' *')}")
    where = " OR ".join(conds) or "1"
    sql = (f"{cte}SELECT start, en, gtid, xt, nm, pl, pp FROM ("
           f"SELECT e.start AS start, COALESCE(e.\"end\", -1) AS en, e.globalTid AS gtid, {xt} AS xt, "
           f"{name} AS nm, {pexpr} AS pl, e.eventType IN {PUSH_POP} AS pp FROM NVTX_EVENTS e {njoin} "
           f"WHERE e.eventType IN ({', '.join(str(int(t)) for t in types)}) AND {dcond}) WHERE {where}")
    if probe:
        n = len(cap.rows(sql + " LIMIT 1"))
        return Ranges(*(np.zeros(n, np.int64) for _ in range(6)), np.zeros(n, bool))
    r = cap.read(sql, ["start", "end", "gtid", "xt", "name", "payload", "pp"], {"name": "str"})
    gtid = r["gtid"]
    return Ranges(r["start"], r["end"], gtid, (r["xt"] != 0) & (r["xt"] != gtid), r["name"], r["payload"],
                  r["pp"] != 0)


def read_marks(cap: Export, domain: str, prefixes: list[str]) -> Ranges:
    """Marks of `domain` whose message starts with `prefix + ' '` (start is the mark's time)."""
    return read_ranges(cap, domain, [], prefixes, types=MARK_TYPES)


# what ends an id in a message (redact.RID): whitespace (a str pattern's \s is str.isspace(): the
# same characters, without listing them at import, 60 ms), ';' and ')'
_ID_STOP = re.compile(r"[\s;)]")


def read_ids(cap: Export, domain: str, prefix: str, types: tuple[int, ...] = RANGE_TYPES) -> tuple[dict, np.ndarray]:
    """Ranges (or marks, with `types`) of `domain` named `prefix ...`, with the request id of each
    cut out in SQL where the message is `prefix rid=ID` and ID holds nothing that ends an id (what
    clef_prof.request and enqueued write): one id string per row, no message string and no regex
    per row. Returns the columns start, end (-1 when open), gtid, id ("" where not cut out) and
    the messages of the other rows (`raw`, "" on the rows cut out) for redact.RID."""
    name, njoin = _name_expr(cap, "e")
    cte, dcond = _domain_filter(cap, domain)
    head = f"{prefix} rid="
    sql = (f"{cte}SELECT start, en, gtid, ok, CASE WHEN ok THEN substr(nm, {len(head) + 1}) ELSE nm END FROM ("
           f"SELECT e.start AS start, COALESCE(e.\"end\", -1) AS en, e.globalTid AS gtid, {name} AS nm, "
           f"{name} GLOB {_lit(_glob_escape(head) + '?*')} AS ok "
           f"FROM NVTX_EVENTS e {njoin} WHERE e.eventType IN ({', '.join(str(int(t)) for t in types)}) AND {dcond}) "
           f"WHERE nm GLOB {_lit(_glob_escape(prefix) + ' *')}")
    r = cap.read(sql, ["start", "end", "gtid", "ok", "text"], {"text": "str"})
    ok, text = r["ok"] != 0, r["text"]
    if _ID_STOP.search("\x00".join(text[ok])):          # some id has more after it: those rows by the regex
        ok &= np.fromiter(map(_ID_STOP.search, text), dtype=object, count=len(text)) == None  # noqa: E711
    ids = np.where(ok, text, "").astype(object)
    raw = np.where(ok, "", text).astype(object)
    raw[~ok & (r["ok"] != 0)] = head + text[~ok & (r["ok"] != 0)]
    return {"start": r["start"], "end": r["end"], "gtid": r["gtid"], "id": ids}, raw


@dataclass
class NvtxCensus:
    """What NVTX the capture holds at all, for validation messages."""

    ranges: int                 # range rows in any domain
    user_domains: list[str]     # domain names created, tool domains (TOOL_DOMAINS) excluded
    marks: int                  # user marks (tool domains excluded)
    orphans: dict[int, int] = field(default_factory=dict)   # pid -> ranges in a domain it never created


def census(cap: Export) -> NvtxCensus:
    doms = domains(cap)
    user = sorted({name for _, _, name in doms} - set(TOOL_DOMAINS))
    tool_ids = sorted({int(did) for did, _, name in doms if name in TOOL_DOMAINS and did is not None})
    user_mark = "eventType = 34"
    if tool_ids:
        user_mark += f" AND COALESCE(domainId, 0) NOT IN ({','.join(str(i) for i in tool_ids)})"
    # both counts in one scan (count(*) WHERE c == sum(c): NULL and false rows add nothing)
    n_ranges, marks = cap.rows(f"SELECT sum(eventType IN {RANGE_TYPES}), sum({user_mark}) FROM NVTX_EVENTS")[0]
    return NvtxCensus(int(n_ranges or 0), user, int(marks or 0), _orphans(cap, doms) if n_ranges else {})


def _orphans(cap: Export, doms) -> dict[int, int]:
    """pid -> range rows in a named domain whose id that process never created: a domain is known
    per process (its create row), and a child forked after its parent created a domain, which nsys
    traces afresh, sends ranges under the parent's handle. Such rows belong to no domain (a
    PyTorch profiler trace converted by analyze.read.kineto has domain 0 throughout: none)."""
    created = {(int(did), int(pk)) for did, pk, _ in doms if did is not None and pk is not None}
    used = cap.rows(f"SELECT DISTINCT domainId, globalTid >> 24 FROM NVTX_EVENTS "
                    f"WHERE eventType IN {RANGE_TYPES} AND COALESCE(domainId, 0) != 0")
    lost = sorted({(int(d), int(p)) for d, p in used if d is not None and p is not None} - created)
    if not lost:
        return {}
    values = ", ".join(f"({d}, {p})" for d, p in lost)
    rows = cap.rows(f"WITH lost(did, pk) AS (VALUES {values}) SELECT e.globalTid >> 24, count(*) FROM NVTX_EVENTS e "
                    f"JOIN lost ON e.domainId = lost.did AND (e.globalTid >> 24) = lost.pk "
                    f"WHERE e.eventType IN {RANGE_TYPES} GROUP BY 1")
    return {int(pk) & 0xFFFFFF: int(n) for pk, n in rows}


def names_seen(cap: Export, limit: int = 12) -> list[tuple[str, str, int]]:
    """(domain, name, count) of the most frequent range names, for 'nothing matched' hints."""
    name, njoin = _name_expr(cap, "e")
    dname, djoin = _name_expr(cap, "d")
    sql = (f"SELECT COALESCE(dn.dname, ''), r.nm, count(*) FROM "
           f"(SELECT {name} AS nm, e.domainId AS did, (e.globalTid >> 24) AS pk FROM NVTX_EVENTS e {njoin} "
           f"WHERE e.eventType IN {RANGE_TYPES}) r LEFT JOIN "
           f"(SELECT DISTINCT d.domainId AS did, (d.globalTid >> 24) AS pk, {dname} AS dname FROM NVTX_EVENTS d {djoin} "
           f"WHERE d.eventType = {DOMAIN_CREATE}) dn ON dn.did = r.did AND dn.pk = r.pk "
           f"GROUP BY 1, 2 ORDER BY 3 DESC LIMIT {int(limit)}")
    return [(d, n, int(c)) for d, n, c in cap.rows(sql)]
