"""Exact nearest-neighbour search over a prompt corpus, in blocks of rows (numpy only).

Similarities are cosines of unit-normalised embeddings, computed one block of query rows at a time
(``block`` x n), so the n x n matrix is never held: at n = 10,000 and block 512 a block is 20 MB
of float32. Exact search is fast enough at the paper's scale (``benchmarks/confusion_scale.py``
measures it), so no approximate index (faiss, hnswlib) is used.

Ties: among equally similar candidates the earlier row of the table ranks first (stable order).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

BLOCK = 512


class Similarity:
    """Rows of a similarity matrix on demand: from embeddings (normalised here; blocked products)
    or from a given n x n matrix (hand-built cases in tests)."""

    def __init__(self, matrix: np.ndarray | None = None, embeddings: np.ndarray | None = None):
        if (matrix is None) == (embeddings is None):
            raise ValueError("give a similarity matrix or embeddings, not both or neither")
        if embeddings is not None:
            e = np.asarray(embeddings, dtype=np.float32)
            norms = np.linalg.norm(e, axis=1, keepdims=True)
            if e.ndim != 2 or np.any(norms == 0) or not np.all(np.isfinite(e)):
                raise ValueError("embeddings must be a finite 2-D array with no all-zero row")
            self.unit, self.matrix, self.n = e / norms, None, len(e)
        else:
            m = np.asarray(matrix, dtype=np.float64)
            if m.ndim != 2 or m.shape[0] != m.shape[1]:
                raise ValueError(f"a similarity matrix must be square, got shape {m.shape}")
            self.unit, self.matrix, self.n = None, m, len(m)

    def rows(self, index: np.ndarray) -> np.ndarray:
        """sim[index, :] as float64, clipped to [-1, 1]."""
        if self.matrix is not None:
            return np.clip(self.matrix[index], -1.0, 1.0)
        return np.clip((self.unit[index] @ self.unit.T).astype(np.float64), -1.0, 1.0)

    def pair(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """sim[i, j] elementwise."""
        if self.matrix is not None:
            return np.clip(self.matrix[i, j], -1.0, 1.0)
        return np.clip(np.einsum("ij,ij->i", self.unit[i], self.unit[j]).astype(np.float64), -1.0, 1.0)


def as_similarity(sim) -> Similarity:
    return sim if isinstance(sim, Similarity) else Similarity(matrix=sim)


def top(values: np.ndarray, allowed: np.ndarray, k: int) -> np.ndarray:
    """Indices of the (at most) k largest ``values`` where ``allowed``, largest first, ties in index order."""
    idx = np.flatnonzero(allowed)
    if len(idx) > k:  # keep every candidate tied with the k-th value, then order them exactly
        v = values[idx]
        kth = np.partition(v, len(v) - k)[len(v) - k]
        idx = idx[v >= kth]
    return idx[np.argsort(-values[idx], kind="stable")[:k]]


def blocks(rows: np.ndarray, sim: Similarity, block: int = BLOCK) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(row indices, their similarity rows) in blocks."""
    for start in range(0, len(rows), block):
        chunk = rows[start:start + block]
        yield chunk, sim.rows(chunk)


def scope_mask(i: int, clusters: np.ndarray, scope: str) -> np.ndarray:
    """The prompts that may be row i's neighbours: its cluster ("cluster") or the whole corpus ("corpus"); never i."""
    mask = clusters == clusters[i] if scope == "cluster" else np.ones(len(clusters), dtype=bool)
    mask[i] = False
    return mask


LABELS = ("safe", "unsafe")


def may_share(i: int, clusters: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
    """Prompts that may carry row i's meaning (DEFINITIONS.md, "same meaning never crosses the label"):
    its own cluster, or another cluster of the same intended label (safe | unsafe). An unlabelled row
    (no label, or ``labels`` None) shares meaning with its own cluster only; a dataset's benign /
    harmful twins carry opposite labels, so they never share one."""
    mask = clusters == clusters[i]
    if labels is not None and labels[i] in LABELS:
        mask = mask | (labels == labels[i])
    return mask


Known = tuple  # ((cluster a, cluster b, same: bool), ...): intents labelled by hand (DEFINITIONS.md, "known labels")


@lru_cache(maxsize=64)
def _known_index(known: Known) -> dict[str, tuple[list[str], list[str]]]:
    """cluster -> (clusters labelled the same intent, clusters labelled a different intent)."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    for a, b, same in known:
        for x, y in ((a, b), (b, a)):
            out.setdefault(x, ([], []))[0 if same else 1].append(y)
    return out


def known_for(cluster: str, known: Known = ()) -> tuple[list[str], list[str]]:
    """(clusters labelled the same intent as ``cluster``, clusters labelled a different one)."""
    return _known_index(tuple(known)).get(cluster, ([], [])) if known else ([], [])


def same_meaning(i: int, row: np.ndarray, clusters: np.ndarray, theta: float,
                 labels: np.ndarray | None = None, known: Known = ()) -> np.ndarray:
    """Prompts of the same meaning as row i: its own cluster (every member passed the gate against
    the same seed); a cluster whose intent is labelled the same as row i's (``known``), whatever the
    cosine; never a cluster labelled a different intent; elsewhere, in another cluster of the same
    intended label, cosine > theta (the paper's strict inequality; theta = the gate's tau)."""
    other = (row > theta) & may_share(i, clusters, labels)
    if known:
        same, different = known_for(clusters[i], known)
        if different:
            other &= ~np.isin(clusters, different)
        if same:
            other |= np.isin(clusters, same)
    return (clusters == clusters[i]) | other


def known_masks(clusters: np.ndarray, known: Known = ()) -> tuple[np.ndarray, np.ndarray]:
    """(n x n) bool: pairs of prompts whose clusters are labelled the same intent, and a different one."""
    clusters = np.asarray(clusters)
    same = np.zeros((len(clusters), len(clusters)), dtype=bool)
    different = same.copy()
    for a, b, s in known:
        ia, ib = clusters == a, clusters == b
        m = (ia[:, None] & ib[None, :]) | (ib[:, None] & ia[None, :])
        (same if s else different)[m] = True
    return same, different


@dataclass
class Neighbourhood:
    """What the metrics need of one rejected prompt (indices into the table)."""

    nearest_accepted: np.ndarray  # N_k(r): the k most similar accepted prompts in scope
    events: np.ndarray  # E_k(r): the k most similar accepted prompts in scope of the same meaning
    n_events: int  # accepted prompts in scope of the same meaning (all of them, not only k)
    depth_neighbours: np.ndarray  # the depth_k most similar prompts in scope that may share r's meaning, any decision
    nearest_accepted_sim: float  # max sim to an accepted prompt in scope (NaN if none)
    nearest_rejected_sim: float  # max sim to another rejected prompt in scope (-1 if none)
    neighbours_removed: int = 0  # members of N_k(r) without the label rule that the rule takes out
    events_removed: int = 0  # accepted prompts above theta in other clusters that the label rule takes out
    cross_events: int = 0  # accepted prompts of the same meaning from other clusters (after the rule)
    known_events: int = 0  # of them, from a cluster labelled the same intent (a known twin)
    known_removed: int = 0  # accepted, same label, above theta, in a cluster labelled a different intent


def neighbourhoods(sim, accepted: np.ndarray, clusters: np.ndarray, *, k: int, depth_k: int, theta: float,
                   scope: str, labels: np.ndarray | None = None, known: Known = (),
                   block: int = BLOCK) -> dict[int, Neighbourhood]:
    """Row index -> Neighbourhood for every rejected row, by blocked exact search. N_k(r) ranges over
    the accepted prompts in scope that may share r's meaning (``may_share``); depth over every prompt
    in scope."""
    sim = as_similarity(sim)
    accepted = np.asarray(accepted, dtype=bool)
    clusters = np.asarray(clusters)
    labels = None if labels is None else np.asarray(labels, dtype=object)
    out = {}
    for chunk, rows in blocks(np.flatnonzero(~accepted), sim, block):
        for i, row in zip(chunk, rows):
            share = may_share(i, clusters, labels)
            in_scope = scope_mask(i, clusters, scope)
            acc, rej = in_scope & accepted, in_scope & ~accepted
            kin = in_scope & share  # depth's neighbours keep the label rule (a harmful twin is no neighbour)
            event = acc & same_meaning(i, row, clusters, theta, labels, known)
            other = acc & (clusters != clusters[i])
            twins, lookalikes = known_for(clusters[i], known)
            nearest = top(row, acc & share, k)
            out[int(i)] = Neighbourhood(
                nearest_accepted=nearest, events=top(row, event, k), n_events=int(event.sum()),
                depth_neighbours=top(row, kin, depth_k),
                nearest_accepted_sim=float(row[acc & share].max()) if (acc & share).any() else float("nan"),
                nearest_rejected_sim=float(row[rej & share].max()) if (rej & share).any() else -1.0,
                neighbours_removed=int(len(set(top(row, acc, k).tolist()) - set(nearest.tolist()))),
                events_removed=int((other & (row > theta) & ~share).sum()),
                cross_events=int((event & other).sum()),
                known_events=int((event & other & np.isin(clusters, twins)).sum()) if twins else 0,
                known_removed=int((other & share & (row > theta) & np.isin(clusters, lookalikes)).sum())
                if lookalikes else 0)
    return out


def _pairs(sim, clusters: np.ndarray, labels: np.ndarray | None, block: int, partners) -> np.ndarray:
    """Every unordered pair (i, j), i < j, with j among ``partners(i, row, clusters, labels)`` (``row``: i's
    similarities), one block of similarity rows at a time. Shape (n_pairs, 2), sorted, unique."""
    sim = as_similarity(sim)
    clusters = np.asarray(clusters)
    labels = None if labels is None else np.asarray(labels, dtype=object)
    found = []
    for chunk, rows in blocks(np.arange(sim.n), sim, block):
        for i, row in zip(chunk, rows):
            j = partners(i, row, clusters, labels)
            found.append(np.stack([np.minimum(i, j), np.maximum(i, j)], axis=1))
    if not found:
        return np.zeros((0, 2), dtype=int)
    return np.unique(np.concatenate(found).astype(int), axis=0)


def signal_pairs(sim, clusters: np.ndarray, theta: float, cover: int, labels: np.ndarray | None = None,
                 block: int = BLOCK, known: Known = ()) -> np.ndarray:
    """Every unordered pair (i, j), i < j, whose token signals the metrics may need, whatever the
    decisions: the pairs of the same meaning (every possible confusion event, at either scope) and
    each prompt with its ``cover`` most similar prompts that may share its meaning (``may_share``),
    so that N_k(r) of any decision set is covered whenever r has k accepted prompts among them.
    Shape (n_pairs, 2), sorted, unique. Their number grows as n * (cover + cluster size), not n^2."""
    def partners(i, row, clusters, labels):
        others = scope_mask(i, clusters, "corpus")
        return np.union1d(np.flatnonzero(others & same_meaning(i, row, clusters, theta, labels, known)),
                          top(row, others & may_share(i, clusters, labels), cover))

    return _pairs(sim, clusters, labels, block, partners)


def same_meaning_pairs(sim, clusters: np.ndarray, theta: float, scope: str, labels: np.ndarray | None = None,
                       block: int = BLOCK, known: Known = ()) -> np.ndarray:
    """Every unordered pair (i, j), i < j, in scope and of the same meaning, whatever the decisions:
    the pairs that can be confusion events under any judge. Shape (n_pairs, 2), sorted."""
    return _pairs(sim, clusters, labels, block, lambda i, row, clusters, labels: np.flatnonzero(
        scope_mask(i, clusters, scope) & same_meaning(i, row, clusters, theta, labels, known)))
