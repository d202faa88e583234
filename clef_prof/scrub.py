"""Remove secrets from an export before it is shared: the profiled process's environment,
its stdout/stderr streams, host and user names. Works in place on a copy, never on an input."""
from __future__ import annotations

import re
import sqlite3

_ENVISH = re.compile(r"(^|:)(ENV|ENVIRONMENT|ENV_VARS?)(:|$)|ENVIRONMENT", re.I)
_ASSIGN = re.compile(r"(^|[\s;\n])[A-Za-z_][A-Za-z0-9_]*=")
REMOVED = "[removed]"


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def scrub(conn: sqlite3.Connection) -> dict[str, int]:
    """Scrub an open, writable export; returns how many values were removed per table."""
    tables = _tables(conn)
    done: dict[str, int] = {}
    if "META_DATA_CAPTURE" in tables:
        rows = conn.execute("SELECT rowid, name, value FROM META_DATA_CAPTURE").fetchall()
        bad = [r[0] for r in rows if _ENVISH.search(r[1] or "") or (r[1] or "").endswith(("USER_NAME", "HOST"))
               or _looks_like_env(r[2])]
        conn.executemany("UPDATE META_DATA_CAPTURE SET value = ? WHERE rowid = ?", [(REMOVED, i) for i in bad])
        done["META_DATA_CAPTURE"] = len(bad)
    if "TARGET_INFO_SYSTEM_ENV" in tables:
        rows = conn.execute("SELECT rowid, name, value FROM TARGET_INFO_SYSTEM_ENV").fetchall()
        bad = [r[0] for r in rows if _ENVISH.search(r[1] or "") or r[1] in ("Hostname", "UserName")
               or (r[1] or "").isupper() or _looks_like_env(r[2])]
        conn.executemany("UPDATE TARGET_INFO_SYSTEM_ENV SET value = ? WHERE rowid = ?", [(REMOVED, i) for i in bad])
        done["TARGET_INFO_SYSTEM_ENV"] = len(bad)
    if "ProcessStreams" in tables and "StringIds" in tables:
        n = conn.execute("UPDATE StringIds SET value = ? WHERE id IN (SELECT contentId FROM ProcessStreams)",
                         (REMOVED,)).rowcount
        done["ProcessStreams"] = n
    if "META_DATA_EXPORT" in tables:
        n = conn.execute("UPDATE META_DATA_EXPORT SET value = '' WHERE name IN ('EXPORT_HOST', 'EXPORT_USER')").rowcount
        done["META_DATA_EXPORT"] = n
    if "StringIds" in tables:
        rows = conn.execute("SELECT id, value FROM StringIds").fetchall()
        bad = [i for i, v in rows if _looks_like_env(v)]
        conn.executemany("UPDATE StringIds SET value = ? WHERE id = ?", [(REMOVED, i) for i in bad])
        done["StringIds"] = len(bad)
    return done


def _looks_like_env(value) -> bool:
    """Several VAR=value assignments in one string: an environment block or a command line with secrets."""
    if not isinstance(value, str) or len(value) < 8:
        return False
    return len(_ASSIGN.findall(value)) >= 3
