"""The pooler with no annotation: `clef-prof inject --spec tests/programs/pooler.toml` adds them.

Covers each kind of target: a function (parse_schema), a staticmethod (Pooler._indices), a
classmethod (Pooler.transfer), a method (Pooler.head, Pooler.run) and a coroutine
(frontend.encode), all on the worker's thread.
"""
import asyncio
import json

from .frontend import encode


def parse_schema(requests):
    return [json.loads(r) for r in requests]


class Pooler:
    def __init__(self):
        self.loop = asyncio.new_event_loop()

    def run(self, batch):
        schema = parse_schema(batch)
        idx = Pooler._indices(schema)
        moved = self.transfer(idx)
        out = self.head(moved)
        return self.loop.run_until_complete(encode(out))

    @staticmethod
    def _indices(schema):
        return [i for i, r in enumerate(schema) for _ in range(r["tokens"])]

    @classmethod
    def transfer(cls, idx):
        return bytes(bytearray(i % 256 for i in idx))

    def head(self, moved):
        return [sum(moved[i:i + 8]) for i in range(0, len(moved), 8)]

    def close(self):
        self.loop.close()
