"""A server with no clef_prof in it, for the spec's [request] table (tests/programs/journey.toml):
handler threads get an HTTP-like request object (`.headers` with X-Request-Id), submit it to a
batcher thread (`Batcher.submit(request_id, body)`), wait, then encode their answer.
Usage: python -m journey_app.server [REQUESTS]"""
import queue
import sys
import threading
import time


class Request:
    def __init__(self, rid: str, body: str):
        self.headers = {"X-Request-Id": rid, "Content-Type": "application/json"}
        self.body = body


def parse(bodies):
    time.sleep(0.0005)
    return [b.upper() for b in bodies]


def head(parsed):
    time.sleep(0.0015)
    return [len(p) for p in parsed]


def encode(answer):
    time.sleep(0.0002)
    return str(answer).encode()


class Batcher:
    def __init__(self):
        self.q = queue.Queue()

    def submit(self, request_id, body):
        done, box = threading.Event(), []
        self.q.put((request_id, body, done, box))
        return done, box

    def run_batch(self, ids, bodies):
        return head(parse(bodies))

    def loop(self, n):
        served = 0
        while served < n:
            items = [self.q.get()]
            while len(items) < 4:
                try:
                    items.append(self.q.get_nowait())
                except queue.Empty:
                    break
            out = self.run_batch([i[0] for i in items], [i[1] for i in items])
            for (_, _, done, box), a in zip(items, out):
                box.append(a)
                done.set()
            served += len(items)


BATCHER = Batcher()


def handle(request):
    done, box = BATCHER.submit(request.headers["X-Request-Id"], request.body)
    done.wait()
    return encode(box[0])


def main(n):
    t = threading.Thread(target=BATCHER.loop, args=(n,))
    t.start()
    hs = []
    for i in range(n):
        h = threading.Thread(target=handle, args=(Request(f"q{i}", "x" * (i % 7)),))
        h.start()
        hs.append(h)
        if i % 5 == 4:
            time.sleep(0.003)
    for h in hs:
        h.join()
    t.join()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 60)
