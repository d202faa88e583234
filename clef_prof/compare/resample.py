"""The within-capture bootstrap of ratio-of-sums metrics, vectorised with NumPy.

One replicate of an arm: every capture of the arm once, its n batch instances drawn with
replacement. The replicate's sums of every per-batch column come out at once as an integer
weights matrix times the columns (`W @ X`); a per-request metric is then sum(numerator) /
sum(denominator) over the replicate, e.g. sum(transfer_ns) / sum(size).

The captures themselves are not resampled: this interval covers batch-to-batch noise within the
recorded runs, not run-to-run variation, and is labelled so. The verdict between runs comes
from the per-capture values (`welch`): resampling a few captures understates their variance.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

# at most this many weights (replicates x batches) are held at once, shared by the arms' threads
_CHUNK_CELLS = 4_000_000
# each arm's replicates come from this many independent streams, in fixed parts (whatever the
# CPUs): the parts run on threads, and one seed gives the same sums on every machine
STREAMS = 8
# replicates drawn and counted at once: the draws and their counts (rows x batches) stay in the
# CPU's cache, where one bincount over a whole chunk scatters across 32 MB (half the bootstrap's
# time at 17,766 batches); NumPy's generator gives the same stream however its draws are split
_COUNT_ROWS = 16


def arm_rngs(seed: int, n_arms: int) -> list[list[np.random.Generator]]:
    """`STREAMS` independent, reproducible streams per arm (by the arm's position): the i-th
    draws the i-th part of the arm's replicates (`parts`)."""
    return [[np.random.default_rng(s) for s in arm.spawn(STREAMS)]
            for arm in np.random.SeedSequence(seed).spawn(n_arms)]


def parts(n_boot: int) -> list[int]:
    """Replicates drawn from each of an arm's `STREAMS` streams: n_boot split as evenly as can be."""
    q, r = divmod(n_boot, STREAMS)
    return [q + (i < r) for i in range(STREAMS)]


def resampled_sums(rng: np.random.Generator, blocks: list[np.ndarray], n_boot: int,
                   cells: int = _CHUNK_CELLS) -> np.ndarray:
    """(n_boot, K) column sums of within-capture bootstrap replicates.

    blocks: one (n_c, K) float array per capture (rows: batch instances, columns: per-batch values).
    The replicate sums are `W @ X` with W the draw counts, in float64 (BLAS), at most `cells`
    counts at a time. The per-batch columns are whole numbers (counts, bytes, ns), so the sums are
    exact below 2**53 whatever the order of summation: the same on every machine for one seed.
    """
    k = blocks[0].shape[1]
    sums = np.zeros((n_boot, k), dtype=np.float64)
    for x in blocks:
        n = len(x)
        if n == 0:
            continue
        step = max(1, cells // n)
        rows = min(step, _COUNT_ROWS)
        offsets = (np.arange(rows) * n)[:, None]
        w = np.empty((min(step, n_boot), n), dtype=np.float64)
        for lo in range(0, n_boot, step):
            hi = min(n_boot, lo + step)
            for a in range(lo, hi, rows):
                b = min(hi, a + rows)
                idx = rng.integers(0, n, size=(b - a, n))
                idx += offsets[:b - a]
                w[a - lo:b - lo] = np.bincount(idx.reshape(-1), minlength=(b - a) * n).reshape(b - a, n)
            sums[lo:hi] += w[:hi - lo] @ x
    return sums


def resampled_sums_of_arms(rngs: list[list[np.random.Generator]], arms: list[list[np.ndarray]],
                           n_boot: int) -> list[np.ndarray]:
    """`resampled_sums` of each arm (its captures' blocks), its replicates in `parts`, each part from
    its own stream (`arm_rngs`), the parts of all arms on threads: NumPy draws, counts and multiplies
    without the GIL, and each part has its own stream, so the sums are the same on any number of
    threads. The threads share `_CHUNK_CELLS` between them."""
    from ..analyze.read.export import usable_cpus
    sizes = [k for k in parts(n_boot) if k]       # the first streams' parts: parts never grow
    jobs = [(rng, blocks, k) for streams, blocks in zip(rngs, arms) for rng, k in zip(streams, sizes)]
    workers = max(1, min(len(jobs), usable_cpus()))
    cells = max(1, _CHUNK_CELLS // workers)

    def one(job):
        rng, blocks, k = job
        return resampled_sums(rng, blocks, k, cells)

    if workers == 1:
        done = [one(job) for job in jobs]
    else:
        with ThreadPoolExecutor(workers) as pool:
            done = list(pool.map(one, jobs))
    n = len(sizes)
    cols = arms[0][0].shape[1] if arms and arms[0] else 0
    return [np.concatenate(done[i * n:(i + 1) * n]) if n else np.zeros((0, cols)) for i in range(len(arms))]


def ratio(sums: np.ndarray, num: int, den: int, scale: float = 1.0) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return sums[:, num] / sums[:, den] * scale


def percentile_interval(values: np.ndarray, confidence: float) -> tuple[float, float] | None:
    """The central `confidence` percentile interval of the finite values (None if there are none)."""
    v = values[np.isfinite(values)]
    if len(v) == 0:
        return None
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(v, [a, 1.0 - a])
    return float(lo), float(hi)
