"""The encoder that plainpy/server.py imports and then redefines under the same name."""
CALLS = {"base_encode": 0}


class Encoder:
    def encode(self, batch):
        CALLS["base_encode"] += 1
        return [len(t) for t in batch]
