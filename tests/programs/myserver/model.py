"""The model side: one batch = tokenize, to_device, forward, to_host (pure Python stand-ins)."""
from __future__ import annotations

import hashlib


class Embedder:
    dim = 16

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        return [[int.from_bytes(hashlib.blake2s(w.encode(), digest_size=2).digest(), "little") for w in t.split()]
                for t in texts]

    def to_device(self, ids: list[list[int]]) -> list[bytes]:
        return [bytes(memoryview(bytearray(b"".join(i.to_bytes(2, "little") for i in row)))) for row in ids]

    def forward(self, dev: list[bytes]) -> list[list[float]]:
        out = []
        for buf in dev:
            v = [0.0] * self.dim
            for k in range(0, len(buf), 2):
                tok = buf[k] | buf[k + 1] << 8
                for j in range(self.dim):
                    v[j] += ((tok * (j + 7)) % 101) / 101.0
            out.append(v)
        return out

    def to_host(self, vectors: list[list[float]]) -> list[list[float]]:
        return [list(v) for v in vectors]

    def run(self, texts: list[str]) -> list[list[float]]:
        """One batch: every stage once."""
        return self.to_host(self.forward(self.to_device(self.tokenize(texts))))
