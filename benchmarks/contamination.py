"""Contamination-audit benchmark (a benchmark, not a test): how long ``audit_files`` takes at scale.

Builds a synthetic training pool and a synthetic evaluation set (``--rows`` each, 100k by default)
from the prompt sets in ``data/`` (HarmBench, XSTest, JailbreakBench harmful + benign, StrongREJECT,
AdvBench: ~1.8k distinct prompts): every row is a base prompt with 0-4 random word edits (replace,
delete or insert a word drawn from the same prompts) and a random case / whitespace / punctuation
variant, so both sets hold many exact and near-duplicates of each other, in families of ~50 (a hard
case for LSH: many candidates per query). Writes both as CSV to a temporary folder and times

  (a) ``audit_files`` end to end (read + check both files, fingerprints, MinHash LSH, exact Jaccard of
      every candidate pair, write audit.csv / overlap.csv / evaluation_clean.csv), and
  (b) within that same call, ``audit_pool`` on the in-memory tables,

then checks the LSH result against a brute-force exact Jaccard on a random sample of evaluation
rows (``--check`` rows; every reported near-duplicate must be a true one, and the brute-force
nearest Jaccard must not exceed the reported one by more than rounding when it is above the
threshold). The last line reads ``rows <n> audit_files <s> audit_pool <s> recall <x> precision 1``.

    .venv/bin/python benchmarks/contamination.py                 # 100k vs 100k (~2 min on 2 cores)
    .venv/bin/python benchmarks/contamination.py --rows 10000   # a quick look
"""
from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from refusal_audit import contamination as C
from refusal_audit.paths import DATA_DIR

SOURCES = [("harmbench/harmbench_behaviors_text_all.csv", "Behavior"), ("xstest/xstest_prompts.csv", "prompt"),
           ("jailbreakbench/behaviors.csv", "Goal"), ("jailbreakbench/benign-behaviors_thirdparty.csv", "goal"),
           ("strongreject/strongreject_dataset.csv", "forbidden_prompt"), ("advbench/harmful_behaviors.csv", "goal")]


def base_prompts() -> list[str]:
    texts = []
    for f, col in SOURCES:
        texts += pd.read_csv(DATA_DIR / f, keep_default_na=False)[col].tolist()
    return list(dict.fromkeys(texts))


def synthetic(base: list[str], n: int, rng: random.Random, prefix: str) -> pd.DataFrame:
    vocab = [w for t in base for w in t.split()]
    rows = []
    for i in range(n):
        words = rng.choice(base).split()
        for _ in range(rng.choice((0, 0, 1, 2, 3, 4))):
            j, op = rng.randrange(len(words)), rng.random()
            if op < 0.5:
                words[j] = rng.choice(vocab)
            elif op < 0.75 and len(words) > 3:
                del words[j]
            else:
                words.insert(j, rng.choice(vocab))
        text = " ".join(words)
        style = rng.random()
        if style < 0.2:
            text = text.upper()
        elif style < 0.4:
            text = "  " + text.replace(" ", "   ") + " "
        elif style < 0.6:
            text = text.rstrip(".?!") + "?!"
        rows.append((f"{prefix}{i:06d}", text))
    return pd.DataFrame(rows, columns=["id", "prompt"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000, help="rows in the pool and in the evaluation set")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", type=int, default=200, help="evaluation rows checked by brute force")
    ap.add_argument("--shingle", default=C.SHINGLE)
    ap.add_argument("--k", type=int, default=C.SHINGLE_K)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    t0 = time.perf_counter()
    base = base_prompts()
    pool = synthetic(base, args.rows, rng, "p")
    evaluation = synthetic(base, args.rows, rng, "e")
    print(f"built pool {len(pool)} + evaluation {len(evaluation)} rows from {len(base)} base prompts "
          f"in {time.perf_counter() - t0:.1f} s")

    timed: dict[str, object] = {}
    audit_pool = C.audit_pool

    def timed_audit_pool(*a, **kw):  # time audit_pool inside audit_files (no second run)
        t = time.perf_counter()
        timed["result"] = audit_pool(*a, **kw)
        timed["seconds"] = time.perf_counter() - t
        return timed["result"]

    C.audit_pool = timed_audit_pool
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        pool.to_csv(tmp / "train.csv", index=False)
        evaluation.to_csv(tmp / "eval.csv", index=False)
        t0 = time.perf_counter()
        paths = C.audit_files(tmp / "train.csv", tmp / "eval.csv", tmp / "out", shingle=args.shingle, k=args.k)
        t_files = time.perf_counter() - t0
        overlap = pd.read_csv(paths["overlap.csv"])
    C.audit_pool = audit_pool
    result, t_pool = timed["result"], timed["seconds"]
    print(f"audit_files: {t_files:.1f} s, of which audit_pool {t_pool:.1f} s")
    print(overlap.to_string(index=False))

    # brute force on a sample: exact Jaccard of each sampled evaluation row against the whole pool
    t0 = time.perf_counter()
    sample = np.random.default_rng(args.seed).choice(len(evaluation), size=min(args.check, len(evaluation)),
                                                      replace=False)
    sh = C._Shingler(args.shingle, args.k)
    p_enc = sh.encode([C.normalise(t) for t in pool["prompt"]])
    s_enc = sh.encode([C.normalise(evaluation["prompt"].iat[i]) for i in sample])
    P, S = sh.matrix(*p_enc), sh.matrix(*s_enc)
    size_p, size_s = np.diff(P.indptr), np.diff(S.indptr)
    found = missed = 0
    for n, i in enumerate(sample):
        inter = (S[n] @ P.T).toarray().ravel()
        best = (inter / (size_s[n] + size_p - inter)).max()
        row = result.iloc[i]
        if row["near_duplicate"]:
            assert row["jaccard"] >= C.JACCARD_THRESHOLD - 1e-12  # every reported pair is a true one
        if best >= C.JACCARD_THRESHOLD:
            if row["near_duplicate"] and abs(row["jaccard"] - best) < 1e-9:
                found += 1
            else:
                missed += 1
    recall = found / max(1, found + missed)
    print(f"brute-force check of {len(sample)} rows in {time.perf_counter() - t0:.1f} s: "
          f"{found} near-duplicates found with the true nearest Jaccard, {missed} missed")
    print(f"rows {args.rows} audit_files {t_files:.1f} audit_pool {t_pool:.1f} recall {recall:.3f} precision 1")


if __name__ == "__main__":
    main()
