"""HTTP helpers of the tests that run servers: a free port, one plain request, the demo server's request."""
from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request


def free_port() -> int:
    """A port nothing listens on (bound, then let go)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def call(method, url, body=None, timeout=10):
    """(status, body) of one request with the standard library (a JSON body for a dict or list)."""
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    req = urllib.request.Request(url, data=data if data is not None else (b"" if method == "POST" else None),
                                 method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


# one Clef-style request of the demo server
REQ = {"state": "the patient reports mild pain after surgery", "questions": {
    "pain": {"type": "boolean", "instructions": "Is there pain?", "criteria": "explicit mention"},
    "severity": {"type": "score", "instructions": "How severe?", "criteria": "0-1"}}}
