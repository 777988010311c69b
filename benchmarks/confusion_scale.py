"""Confusion study at corpus scale: neighbourhood search and pair signals for 1,000 / 3,000 / 10,000
prompts, synthetic (no model): embeddings of paraphrase clusters (6 phrasings of each intent,
within-cluster cosine about 0.8, 384 dims like MiniLM), 20 % of prompts rejected, and per-prompt
token signals standing in for the cached ones (16 tokens x 576 hidden, a 8,192-token next-token
distribution). Prints, per size: wall time and peak traced memory of (1) scoring every rejected
prompt at corpus scope by blocked exact search (N_k, events, Depth) and (2) finding the same-meaning
pairs and computing their signals (``pairs.compute``), with the number of pairs against the n(n-1)/2
of every pair. Run: ``nice -n 10 .venv/bin/python benchmarks/confusion_scale.py [sizes...]``.
"""
from __future__ import annotations

import sys
import time
import tracemalloc
from types import SimpleNamespace

import numpy as np
import pandas as pd

from refusal_audit.studies.confusion import metrics as M
from refusal_audit.studies.confusion import neighbours as N
from refusal_audit.studies.confusion import pairs as P

DIM, TOKENS, HIDDEN, VOCAB, PER_CLUSTER = 384, 16, 576, 8192, 6


def corpus(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n // PER_CLUSTER + 1, DIM))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    clusters = np.arange(n) // PER_CLUSTER
    noise = rng.normal(size=(n, DIM)) * (0.5 / np.sqrt(DIM))
    e = centres[clusters] + noise
    accepted = rng.random(n) >= 0.2
    return e, clusters, accepted, rng


def measure(fn):
    tracemalloc.start()
    start = time.perf_counter()
    out = fn()
    wall = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return out, wall, peak


def run(n: int) -> dict:
    e, clusters, accepted, rng = corpus(n)
    table = pd.DataFrame({"prompt_id": [f"p{i}" for i in range(n)], "cluster": clusters, "accepted": accepted})
    sim = N.Similarity(embeddings=e)
    cp = M.ConfusionParams()  # corpus scope, theta 0.70, k 5
    scored, t_nb, m_nb = measure(lambda: M.score(table, sim, params=cp))
    sigs = [SimpleNamespace(hidden=rng.normal(size=(TOKENS, HIDDEN)).astype(np.float32),
                            next_token_logprobs=np.log(rng.dirichlet(np.ones(VOCAB))).astype(np.float32),
                            token_logprobs=-rng.exponential(size=TOKENS - 1)) for _ in range(n)]
    keys = [P.prompt_key("synthetic", -1, [i], 0, 1) for i in range(n)]

    def signals():
        same = N.same_meaning_pairs(sim, clusters, cp.theta, "corpus")
        rows, new = P.compute(keys, sigs, same, cp.alignment, cp.shift)
        return same, new

    (same, new), t_sig, m_sig = measure(signals)
    return {"prompts": n, "rejected": int((~accepted).sum()), "confused": int(scored["confused"].sum()),
            "neighbours_s": round(t_nb, 2), "neighbours_peak_MiB": round(m_nb, 1),
            "pairs": len(same), "all_pairs": n * (n - 1) // 2, "signals_s": round(t_sig, 2),
            "ms_per_pair": round(1000 * t_sig / max(new, 1), 3), "signals_peak_MiB": round(m_sig, 1)}


def main(sizes: list[int]) -> None:
    rows = [run(n) for n in sizes]
    print(pd.DataFrame(rows).to_string(index=False))


if __name__ == "__main__":
    main([int(x) for x in sys.argv[1:]] or [1000, 3000, 10000])
