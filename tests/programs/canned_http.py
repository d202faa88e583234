"""An HTTP server with canned answers, for the load generator's tests: it frames every answer by
hand (a server framework picks the framing itself and never answers an HTTP/1.1 request with
an HTTP/1.0 close-delimited body), so the client meets each framing on the wire.

    python canned_http.py [HOST]     prints the port it listens on (HOST, default 127.0.0.1), then
                                     serves until killed

POST /ok (Content-Length), /chunked (two chunks with an extension, then a trailer), /http10
(HTTP/1.0, the body ends when the connection closes), /close (Connection: close), /error (500
with a body), /short (the connection closes 10 bytes before Content-Length), /reset (closed
with no answer), /slow (/ok after 5 s). Hostile answers: /bad-status (a status line without a
code), /bad-chunk-size (a chunk size that is not hex), /bad-gzip (Content-Encoding: gzip on a body
that is not), /redirect (302 to /ok), /no-content (204), /continue (100 Continue, then /ok),
/endless-head (headers that never end), /endless-body (a body that never ends: a byte every
50 ms), /flood (a chunked body that never ends, as fast as it is read), /big (64 MiB of JSON,
the most the load generator keeps), /gzip (/ok's answer gzipped). GET /stats: {"connections": N,
"answered": {path: N}, "request_ids": [the X-Request-Id header of each POST /ids, in order],
"bodies": [the JSON body of each POST /ids, in order]}.
"""
import asyncio
import gzip
import json
import sys

STATS = {"connections": 0, "answered": {}, "request_ids": [], "bodies": []}


def answer(path: str, body: bytes) -> tuple[bytes, bool]:
    """(the bytes on the wire, whether the connection stays open)."""
    doc = json.dumps({"path": path, "got": len(body)}).encode()
    if path in ("/ok", "/slow"):
        return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(doc), doc), True
    if path == "/chunked":
        chunks = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in (doc[:5], doc[5:]))
        return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\nX-Trailer: yes\r\n\r\n", True
    if path == "/http10":
        return b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + doc, False
    if path == "/close":
        return b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(doc), doc), False
    if path == "/error":
        msg = b"model exploded while pooling"
        return b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n\r\n%s" % (len(msg), msg), True
    if path == "/short":
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(doc) + 10, doc), False
    if path == "/reset":
        return b"", False
    if path == "/bad-status":
        return b"HTTP/1.1 OK\r\nContent-Length: 0\r\n\r\n", False
    if path == "/bad-chunk-size":
        return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" + doc + b"\r\n0\r\n\r\n", False
    if path == "/bad-gzip":
        return b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (len(doc), doc), True
    if path == "/big":
        big = b'"' + b"x" * ((64 << 20) - 2) + b'"'
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(big), big), True
    if path == "/gzip":
        z = gzip.compress(answer("/ok", body)[0].split(b"\r\n\r\n", 1)[1])
        return b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (len(z), z), True
    if path == "/redirect":
        return b"HTTP/1.1 302 Found\r\nLocation: /ok\r\nContent-Length: 0\r\n\r\n", True
    if path == "/no-content":
        return b"HTTP/1.1 204 No Content\r\n\r\n", True
    if path == "/continue":
        return b"HTTP/1.1 100 Continue\r\n\r\n" + answer("/ok", body)[0], True
    return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", True


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    STATS["connections"] += 1
    try:
        while True:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            method, path, _ = head[0].split(" ", 2)
            length = next((int(h.partition(":")[2]) for h in head[1:] if h.lower().startswith("content-length:")), 0)
            body = await reader.readexactly(length)
            if path == "/ids":
                STATS["request_ids"].append(next((h.partition(":")[2].strip() for h in head[1:]
                                                  if h.lower().startswith("x-request-id:")), None))
                STATS["bodies"].append(json.loads(body))
                path = "/ok"
            if method == "GET" and path == "/stats":
                doc = json.dumps(STATS).encode()
                wire, keep = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(doc), doc), True
            elif path == "/endless-head":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n")
                await writer.drain()
                await asyncio.sleep(3600)
            elif path == "/flood":
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                while True:
                    writer.write(b"100000\r\n" + b"x" * 0x100000 + b"\r\n")
                    await writer.drain()
            elif path == "/endless-body":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
                while True:
                    writer.write(b"x")
                    await writer.drain()
                    await asyncio.sleep(0.05)
            else:
                if path == "/slow":
                    await asyncio.sleep(5)
                wire, keep = answer(path, body)
                STATS["answered"][path] = STATS["answered"].get(path, 0) + 1
            writer.write(wire)
            await writer.drain()
            if not keep:
                break
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(serve, sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
