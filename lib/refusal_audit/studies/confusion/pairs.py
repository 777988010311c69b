"""Token signals of the pairs the metrics may need, computed once and cached by content hash in a table.

Which pairs: ``neighbours.signal_pairs`` (every same-meaning pair, and each prompt with its ``cover``
nearest prompts that may share its meaning), whatever the decisions: every confusion event and every
N_k(r) of any judge is among them, and their number grows as n * (cover + cluster size), not with the
square of the corpus.

The table (Parquet, one row per unordered pair of prompt contents and settings) has ``key_a`` <
``key_b`` (each the sha256 of model name, layer, token ids and user span: ``prompt_key``),
``alignment``, ``shift_method``, ``drift_ab`` (a read as the accepted prompt), ``drift_ba`` and
``shift`` (symmetric). Perplexity contrast is not stored: it comes from each prompt's log-perplexity
(``log_ppl`` on the generation rows), so ``contrast_scale`` can change without recomputing.
A pair already in the table is never recomputed. The table is the generation stage's cache; each
generation row also carries its own rows (``nest``: the pairs whose ``key_a`` is its prompt, about
20 per prompt at the paper's 10,092 prompts, ``benchmarks/confusion_scale.py``), so the statistics
stage reads the signals from the generations table alone (``unnest``), wherever the run folder is.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ... import store
from . import metrics as M

ASYMMETRIC = ("greedy_a_to_r",)  # drift alignments that depend on which prompt is the accepted one
COLUMNS = ["key_a", "key_b", "alignment", "shift_method", "drift_ab", "drift_ba", "shift"]


def prompt_key(model_name: str, layer: int, token_ids: Sequence[int], start: int, stop: int) -> str:
    """sha256 of (model name, layer, token ids, user span [start, stop)): one prompt's content."""
    payload = json.dumps([model_name, int(layer), [int(t) for t in token_ids], int(start), int(stop)])
    return hashlib.sha256(payload.encode()).hexdigest()


def read(path: Path) -> pd.DataFrame:
    return pd.read_parquet(path) if Path(path).is_file() else pd.DataFrame(columns=COLUMNS)


def compute(keys: Sequence[str], signals: Sequence, index_pairs: np.ndarray, alignment: str, shift: str,
            path: Path | None = None) -> tuple[pd.DataFrame, int]:
    """The table rows of ``index_pairs`` (rows of ``keys`` / ``signals``), computing only the pairs
    the table at ``path`` lacks and writing them back. Returns (rows, number newly computed)."""

    old = read(path) if path is not None else pd.DataFrame(columns=COLUMNS)
    wanted = {}
    for i, j in np.asarray(index_pairs, dtype=int).reshape(-1, 2):
        if keys[i] == keys[j]:
            continue
        a, b = (i, j) if keys[i] < keys[j] else (j, i)
        wanted.setdefault((keys[a], keys[b]), (a, b))
    mine = old[(old["alignment"] == alignment) & (old["shift_method"] == shift)]
    have = set(zip(mine["key_a"], mine["key_b"]))
    new = []
    for (ka, kb), (a, b) in wanted.items():
        if (ka, kb) in have:
            continue
        sa, sb = signals[a], signals[b]
        drift = M.token_drift(sa.hidden, sb.hidden, alignment)
        new.append({"key_a": ka, "key_b": kb, "alignment": alignment, "shift_method": shift, "drift_ab": drift,
                    "drift_ba": M.token_drift(sb.hidden, sa.hidden, alignment) if alignment in ASYMMETRIC else drift,
                    "shift": M.next_token_shift(np.exp(np.asarray(sa.next_token_logprobs, dtype=np.float64)),
                                                np.exp(np.asarray(sb.next_token_logprobs, dtype=np.float64)), shift)})
    table = pd.concat([old, pd.DataFrame(new, columns=COLUMNS)], ignore_index=True) if new else old
    if path is not None and new:
        store.write_atomic(table, Path(path))
    keep = pd.Series(list(zip(table["key_a"], table["key_b"]))).isin(set(wanted)).to_numpy()
    rows = table[keep & (table["alignment"] == alignment).to_numpy() & (table["shift_method"] == shift).to_numpy()]
    return rows.reset_index(drop=True), len(new)


NESTED = ["key_b", "drift_ab", "drift_ba", "shift"]


def nest(rows: pd.DataFrame) -> dict[str, list[dict]]:
    """key_a -> that prompt's rows of the table (``NESTED`` fields): what its generation row carries,
    so the statistics stage reads the pair signals from the generations table alone."""
    out: dict[str, list[dict]] = {}
    for r in rows[["key_a", *NESTED]].itertuples(index=False):
        out.setdefault(r.key_a, []).append({f: getattr(r, f) for f in NESTED})
    return out


def unnest(keys, nested, alignment: str, shift: str) -> pd.DataFrame:
    """The pair table back from generation rows (``signal_key``, ``pair_signals``), each pair once."""
    rows = [{"key_a": k, **dict(d)} for k, lst in zip(keys, nested) if isinstance(lst, (list, np.ndarray))
            for d in lst]
    table = pd.DataFrame(rows, columns=["key_a", *NESTED]).drop_duplicates(["key_a", "key_b"])
    return table.assign(alignment=alignment, shift_method=shift)[COLUMNS].reset_index(drop=True)


def lookup(table: pd.DataFrame, keys: dict[str, str], log_ppl: dict[str, float],
           params: M.ConfusionParams) -> dict[tuple[str, str], tuple[float, float, float]]:
    """{(a id, r id): (drift, shift, contrast)} for both readings of every pair of the table whose two
    prompts are in ``keys`` (id -> content key); contrast from the two log-perplexities."""
    t = table[(table["alignment"] == params.alignment) & (table["shift_method"] == params.shift)]
    ids_of: dict[str, list[str]] = {}
    for item, key in keys.items():
        ids_of.setdefault(key, []).append(item)
    out = {}
    for ka, kb, dab, dba, s in zip(t["key_a"], t["key_b"], t["drift_ab"], t["drift_ba"], t["shift"]):
        for a in ids_of.get(ka, ()):
            for b in ids_of.get(kb, ()):
                gap = abs(log_ppl[a] - log_ppl[b])
                contrast = float(1.0 - np.exp(-gap / params.contrast_scale))
                out[(a, b)] = (float(dab), float(s), contrast)
                out[(b, a)] = (float(dba), float(s), contrast)
    return out
