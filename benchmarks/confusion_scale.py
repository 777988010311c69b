"""Confusion study at the paper's shape (``params/paper/confusion_paraguard.yaml``): neighbourhoods,
signal pairs, Parquet I/O and the statistics stage at 1,000 / 3,000 / 10,000 prompts, on this machine.

Corpus: the paper file's 841 seeds (XSTest safe and unsafe, JailbreakBench benign and harmful,
HarmBench), embedded by the shipped encoder (``refusal_audit.encoder.embed``, MiniLM), so the
cross-cluster structure is real (XSTest's safe prompts and their unsafe contrasts are topic-matched).
Each size keeps round(n / 12) seeds (all 841 at the paper's 10,092 prompts) and gives each 11 perturbed
"paraphrases": p = c s + sqrt(1 - c^2) u, with cos(p, s) = c resampled from the cosines of the default
corpus's 240 hand-written paraphrases to their seeds (mean 0.94, 5 % quantile 0.83; all pass the
gate's tau 0.70) and u a random direction of the seeds' own covariance, orthogonal to s. Across
clusters, paraphrase-paraphrase cosines then keep about c^2 ~ 0.87 of their seeds' (the hand-written
clusters: 0.89). Clusters of
12; each cluster's label is its seed set's (safe | unsafe); rejection rate per cluster ~ Beta(1, 4)
for safe clusters (mean 0.2), Beta(4, 1) for unsafe ones (mean 0.8). Metrics at the paper file's
settings (corpus scope, theta 0.70, k 5, cover 30, greedy alignment, JSD).

Per size (each in a fresh interpreter, so ``peak_rss_MiB`` is that size's own; tracemalloc peaks
per stage): (1) ``search``: ``metrics.score`` without signals (N_k, events, Depth); (2) ``signal
pairs``: ``neighbours.signal_pairs`` (what the generation stage computes signals for, before any
decision); (3) Parquet: the pair table (``pair_signals.parquet``) and the generation rows carrying
their nested pairs (``pairs.nest``), written with ``store.write_atomic`` and read back; drift /
shift values are random (I/O does not depend on them); (4) ``stats``: the statistics stage's path,
``pairs.unnest`` -> ``pairs.lookup`` -> ``metrics.score`` with pairs (CI over N_k), timed per N_k
pair and per event; ``uncovered``: N_k pairs the cover missed (CI NaN there); ``cover_50/95/100``: the
cover each rejected prompt's N_k needs (the rank of its k-th accepted neighbour among the prompts that
may share its meaning), at the median, 95 % and all rejections.

Per vocabulary (49,152 SmolLM2, hidden 576; 128,256 Llama 3, hidden 4,096; 256,000 Gemma 2, hidden
3,584; 24 user-span tokens): the cost of one pair's signals (drift + next-token JSD, ``pairs.compute``)
is measured on ``--sample`` pairs, the least of 5 repeats (it does not depend on n); the signal-pair
CPU time at each size is
that cost x the pairs (extrapolated, marked so), beside the cost of the N_k pairs alone, and the RAM
the generation stage holds for one model's signals (n x (vocab + tokens x hidden) float32). Much of
the cost at 128k-256k is page faults: every pair allocates fresh float64 temporaries of the vocabulary's
size, which glibc may map and unmap each time; ``ms_per_pair_heap`` is the same code with glibc told to keep freed
blocks (``MALLOC_MMAP_THRESHOLD_``), each in a fresh interpreter.

Run: ``nice -n 10 .venv/bin/python benchmarks/confusion_scale.py [--sizes 1000 3000 10092] [--sample 100]``
(about 1.5 minutes of CPU at the defaults).
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "params" / "paper" / "confusion_paraguard.yaml"
PER_CLUSTER, TOKENS, COVER = 12, 24, 30
VOCABS = {"SmolLM2 49k": (49152, 576), "Llama-3 128k": (128256, 4096), "Gemma-2 256k": (256000, 3584)}


def seeds(path: Path) -> Path:
    """The paper file's seeds, embedded once, and the cosines of the default corpus's hand-written
    paraphrases to their seeds (``data/confusion/clusters.csv``): saved to ``path``."""
    from refusal_audit import config
    from refusal_audit.encoder import embed
    from refusal_audit.paths import DATA_DIR
    from refusal_audit.studies import confusion
    from refusal_audit.studies.confusion import clusters as cl

    rows = confusion.seed_rows(config.load(PAPER))
    own = cl.read_file(DATA_DIR / "confusion" / "clusters.csv").reset_index(drop=True)
    e = embed(own["prompt"].astype(str).tolist())
    first = {c: i for i, (c, m) in enumerate(zip(own["cluster_id"], own["member"])) if m == 0}
    seed_of = own["cluster_id"].map(first).to_numpy()
    para = own["member"].to_numpy() > 0
    cos = np.sum(e[para] * e[seed_of[para]], axis=1)
    np.savez(path, e=embed(rows["prompt"].astype(str).tolist()), label=rows["label"].to_numpy(dtype=str), cos=cos)
    return path


def corpus(e: np.ndarray, labels: np.ndarray, cos: np.ndarray, n: int, seed: int = 0) -> pd.DataFrame:
    """round(n / 12) seeds (all when n >= 12 x seeds), each with 11 perturbed paraphrases; see the module doc."""
    rng = np.random.default_rng(seed)
    m = min(len(e), max(2, round(n / PER_CLUSTER)))
    pick = np.sort(rng.choice(len(e), m, replace=False))
    centred = e - e.mean(axis=0)
    s = np.repeat(e[pick], PER_CLUSTER, axis=0)
    u = rng.normal(size=(len(s), len(e))) @ centred  # directions of the seeds' own covariance
    u -= np.sum(u * s, axis=1, keepdims=True) * s
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    c = rng.choice(cos, size=(len(s), 1))  # real paraphrases' cosines to their seeds
    c[::PER_CLUSTER] = 1.0  # member 0: the seed itself
    cluster = np.repeat(np.arange(m), PER_CLUSTER)
    label = labels[pick][cluster]
    rate = np.where(labels[pick] == "safe", rng.beta(1, 4, m), rng.beta(4, 1, m))[cluster]
    return pd.DataFrame({"prompt_id": [f"p{i}" for i in range(len(s))], "cluster": cluster, "label": label,
                         "accepted": rng.random(len(s)) >= rate, "embedding": list(c * s + np.sqrt(1 - c**2) * u)})


def measure(fn):
    tracemalloc.start()
    start = time.perf_counter()
    out = fn()
    wall = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return out, round(wall, 2), round(peak, 1)


def cover_needed(sim, prompts: pd.DataFrame, k: int) -> np.ndarray:
    """Per rejected prompt: the cover (``neighbours.signal_pairs``) that reaches its k-th nearest accepted
    prompt among those that may share its meaning, i.e. that prompt's rank among them all."""
    from refusal_audit.studies.confusion import neighbours as N

    clusters, labels = prompts["cluster"].to_numpy(), prompts["label"].to_numpy(dtype=object)
    accepted = prompts["accepted"].to_numpy(dtype=bool)
    out = []
    for chunk, rows in N.blocks(np.flatnonzero(~accepted), sim):
        for i, row in zip(chunk, rows):
            cand = N.may_share(i, clusters, labels) & N.scope_mask(i, clusters, "corpus")
            near = N.top(row, cand & accepted, k)
            out.append(int(np.sum(cand & (row >= row[near[-1]]))) if len(near) else 0)
    return np.array(out)


def one_size(seeds_file: Path, n: int) -> dict:
    """Stages (1)-(4) of the module doc at one size; a dict of counts, seconds and MiB."""
    from refusal_audit import store
    from refusal_audit.studies.confusion import metrics as M
    from refusal_audit.studies.confusion import neighbours as N
    from refusal_audit.studies.confusion import pairs as P

    z = np.load(seeds_file)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    table = corpus(z["e"], z["label"], z["cos"], n)
    sim = N.Similarity(embeddings=np.stack(table["embedding"].to_numpy()))
    prompts = table.drop(columns=["embedding"])
    cp = M.ConfusionParams()  # the paper file's metrics: corpus scope, theta 0.70, k 5, greedy, jsd
    labels = prompts["label"].to_numpy(dtype=object)
    scored, search_s, search_mib = measure(lambda: M.score(prompts, sim, params=cp))
    same, pairs_s, pairs_mib = measure(lambda: N.signal_pairs(sim, prompts["cluster"].to_numpy(), cp.theta, COVER,
                                                              labels))
    rng = np.random.default_rng(1)
    keys = np.array([P.prompt_key("bench", -1, [i], 0, 1) for i in range(len(prompts))])
    a, b = keys[same[:, 0]], keys[same[:, 1]]
    lo, hi = np.where(a < b, a, b), np.where(a < b, b, a)
    drift = rng.random(len(same))
    pair_table = pd.DataFrame({"key_a": lo, "key_b": hi, "alignment": cp.alignment, "shift_method": cp.shift,
                               "drift_ab": drift, "drift_ba": drift, "shift": rng.random(len(same))})
    log_ppl = rng.gamma(4.0, 0.75, len(prompts))
    gen = pd.DataFrame({"item_id": prompts["prompt_id"], "model": "bench", "signal_key": keys, "log_ppl": log_ppl})
    out = Path(tempfile.mkdtemp(prefix="confusion_scale_"))

    def write():
        store.write_atomic(pair_table, out / "pair_signals.parquet")
        nested = P.nest(pair_table)
        store.write_atomic(gen.assign(pair_signals=[nested.get(k, []) for k in keys]), out / "generations.parquet")

    _, write_s, write_mib = measure(write)
    (_, back), read_s, read_mib = measure(lambda: (P.read(out / "pair_signals.parquet"),
                                                   pd.read_parquet(out / "generations.parquet")))
    mb = sum(f.stat().st_size for f in out.glob("*.parquet")) / 2**20

    def stats():
        t = P.unnest(back["signal_key"], back["pair_signals"], cp.alignment, cp.shift)
        looked = P.lookup(t, dict(zip(back["item_id"], back["signal_key"])),
                          dict(zip(back["item_id"], back["log_ppl"].astype(float))), cp)
        return M.score(prompts, sim, params=cp, pairs=looked)

    full, stats_s, stats_mib = measure(stats)
    for f in out.glob("*.parquet"):
        f.unlink()
    out.rmdir()
    rej = full[~full["accepted"]]
    need = cover_needed(sim, prompts, cp.k)
    nk, events = int(rej["n_neighbours"].sum()), int(rej["n_events"].sum())
    return {"prompts": len(prompts), "clusters": int(prompts["cluster"].nunique()), "rejected": len(rej),
            "nk_pairs": nk, "events": events, "cross_events": int(rej["n_cross_events"].sum()),
            "events_removed": int(rej["n_events_removed"].sum()), "confused": int(rej["confused"].sum()),
            "signal_pairs": len(same), "uncovered": int(rej["n_uncovered"].sum()),
            "ci_nan": int(rej["ci"].isna().sum()),
            **{f"cover_{q}": int(np.quantile(need, q / 100, method="higher")) for q in (50, 95, 100)},
            "same_as_search": bool((full["n_events"] == scored["n_events"]).all()),
            "search_s": search_s, "signal_pairs_s": pairs_s, "parquet_write_s": write_s, "parquet_read_s": read_s,
            "parquet_MiB": round(mb, 1), "stats_s": stats_s,
            "stats_us_per_nk_pair": round(1e6 * stats_s / max(nk, 1), 1),
            "stats_us_per_event": round(1e6 * stats_s / max(events, 1), 1),
            "traced_peak_MiB": max(search_mib, pairs_mib, write_mib, read_mib, stats_mib),
            "rss_after_imports_MiB": round(rss0, 1),
            "peak_rss_MiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def pair_cost(vocab: int, hidden: int, sample: int, pool: int = 32, repeats: int = 5) -> float:
    """Milliseconds per pair of ``pairs.compute`` (drift + JSD; the table's dedupe) on ``sample`` pairs
    of ``pool`` synthetic signals objects of this vocabulary and hidden size: the least of ``repeats`` (the
    cost itself; other processes on the machine only add to it, up to twice at 256k on this machine)."""
    from types import SimpleNamespace

    from refusal_audit.studies.confusion import pairs as P

    rng = np.random.default_rng(2)
    sigs = [SimpleNamespace(hidden=rng.normal(size=(TOKENS, hidden)).astype(np.float32),
                            next_token_logprobs=np.log(rng.dirichlet(np.full(vocab, 0.1)) + 1e-30).astype(np.float32),
                            token_logprobs=-rng.exponential(size=TOKENS - 1)) for _ in range(pool)]
    every = np.array([(i, j) for i in range(pool) for j in range(i + 1, pool)])
    keys = [P.prompt_key("bench", -1, [i], 0, 1) for i in range(pool)]
    times = []
    for _ in range(repeats):
        chosen = every[rng.choice(len(every), min(sample, len(every)), replace=False)]
        start = time.perf_counter()
        _, new = P.compute(keys, sigs, chosen, "greedy", "jsd")
        times.append(1000 * (time.perf_counter() - start) / new)
    return float(np.min(times))


HEAP = {"MALLOC_MMAP_THRESHOLD_": "4000000000", "MALLOC_TRIM_THRESHOLD_": "4000000000"}  # glibc: freed blocks reused


def child(*args: str, env: dict | None = None) -> dict:
    """This script's hidden mode in a fresh interpreter: its last stdout line, as JSON."""
    import os

    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if done.returncode:
        sys.exit(f"{' '.join(args)} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(sizes: list[int], sample: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = seeds(Path(tmp) / "seeds.npz")
        rows = [child("--one", str(n), "--seeds-file", str(path)) for n in sizes]  # each its own peak RSS
    sizes_t = pd.DataFrame(rows)
    costs = child("--pair-cost", str(sample))
    heap = child("--pair-cost", str(sample), env=HEAP)
    vocab_rows = []
    for r in rows:
        for name, (v, h) in VOCABS.items():
            ms = costs[name]
            vocab_rows.append({"prompts": r["prompts"], "model": name, "ms_per_pair": round(ms, 2),
                               "ms_per_pair_heap": round(heap[name], 2),
                               "signal_pairs_cpu_s*": round(ms * r["signal_pairs"] / 1000, 1),
                               "nk_pairs_only_cpu_s*": round(ms * r["nk_pairs"] / 1000, 1),
                               "events_only_cpu_s*": round(ms * r["events"] / 1000, 1),
                               "signals_held_GiB": round(r["prompts"] * (v + TOKENS * h + TOKENS) * 4 / 2**30, 2)})
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        print("per size (measured; one fresh process each):")
        print(sizes_t.to_string(index=False))
        print(f"\nper vocabulary (ms_per_pair: the least of 5 x {sample} pairs, in a fresh process; _heap: the "
              "same with "
              "glibc keeping freed blocks, MALLOC_MMAP_THRESHOLD_; * = ms_per_pair x pairs, one model, one core):")
        print(pd.DataFrame(vocab_rows).to_string(index=False))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000, 10092])
    ap.add_argument("--sample", type=int, default=100, help="pairs timed per repeat and vocabulary")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--seeds-file", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--pair-cost", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one_size(a.seeds_file, a.one)))
    elif a.pair_cost:
        print(json.dumps({name: pair_cost(v, h, a.pair_cost) for name, (v, h) in VOCABS.items()}))
    else:
        main(a.sizes, a.sample)
