"""Talking to the server under record: HTTP calls to its endpoints, and whether its port is
already taken. Standard library only."""
from __future__ import annotations

import socket
import urllib.error
import urllib.parse
import urllib.request


def http(method: str, url: str, body: str | None = None, timeout: float = 10.0) -> tuple[int | None, str]:
    """(status, text); status None when nothing answered (text says why)."""
    data = body.encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(url, data=data, method=method)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(65536).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        try:
            text = exc.read(4096).decode("utf-8", "replace")
        except Exception:
            text = ""
        return exc.code, text
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return None, f"{type(reason).__name__}: {reason}" if not isinstance(reason, str) else reason


def port_in_use(url: str) -> tuple[str, int] | None:
    u = urllib.parse.urlsplit(url)
    host, port = u.hostname, u.port or 80
    if host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "[::1]"):
        return None
    try:
        with socket.create_connection(("127.0.0.1" if host == "0.0.0.0" else host, port), timeout=0.5):
            return host, port
    except OSError:
        return None
