"""Contamination audit: does a training pool contain an evaluation prompt, exactly or nearly?

Every study's report prints this check (the policy paper's first reporting item: "run the overlap
check and print it"). Three methods, each a lower bound on contamination (none sees translations
or a prompt embedded in a long document):

* **Exact** (``exact``): the texts are equal after normalisation: Unicode NFKC, invisible format
  characters (zero-width spaces, ...) removed, case folded, apostrophes removed, every other
  punctuation or symbol character replaced by a space (``step-by-step`` = ``step by step``),
  whitespace collapsed (``normalise``). A text's fingerprint is the sha256 of
  its normal form; the pool is indexed by fingerprint.
* **Near-duplicate** (``near_duplicate``): Jaccard similarity of the shingle sets of the two normal
  forms at or above a threshold (``JACCARD_THRESHOLD`` = 0.7), found with MinHash locality-sensitive
  hashing (``datasketch.MinHash`` / ``MinHashLSH``; Broder 1997, Leskovec et al., *Mining of Massive
  Datasets* ch. 3). LSH only proposes candidates; every candidate pair is then checked with the
  exact Jaccard of its shingle sets, so a reported pair is a true above-threshold pair. The LSH
  banding is chosen so that a pair exactly at the threshold becomes a candidate with probability
  >= 0.99 (higher above it). Shingles are character 3-grams of the normal form by default (word
  n-grams on request): on the prompt sets in ``data/``, 3-grams keep 95 % of one-word edits and 73 %
  of two-word edits of a ~15-word prompt above 0.7.
* **Semantic near-duplicate** (optional, ``semantic=True``): cosine similarity of all-MiniLM-L6-v2
  embeddings (``refusal_audit.encoder.embed``) at or above ``NEAR_DUPLICATE`` = 0.85: paraphrases of
  one request score above it, different requests on one topic below it. It catches rewordings that
  share few characters; it costs an encoder pass over both sets.

``audit_pool`` gives one row per evaluation prompt, ``overlap_rates`` the rates per (benchmark,
pool), ``decontaminate`` the clean evaluation subset, and ``audit_files`` does all three for two
CSV files (``make audit``). ``exact_overlap``, ``near_duplicates`` and ``audit`` are the older
list-based calls (organism, judges) and keep their behaviour.
"""
from __future__ import annotations

import hashlib
import json
import re
import unicodedata
import warnings
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pandas as pd

from . import encoder

NEAR_DUPLICATE = 0.85   # embedding cosine (semantic near-duplicate)
JACCARD_THRESHOLD = 0.7  # shingle Jaccard (MinHash near-duplicate)
SHINGLE = "char"
SHINGLE_K = 3
NUM_PERM = 128
MINHASH_SEED = 1
LSH_RECALL = 0.99  # P(a pair exactly at the threshold becomes an LSH candidate)

_FORMAT = re.compile(r"[\u00ad\u200b-\u200f\u2060-\u2064\ufeff]")
_APOSTROPHE = re.compile(r"['\u2018\u2019\u02bc`]")
_PUNCT = re.compile(r"[^\w\s]|_")
_SPACE = re.compile(r"\s+")


class InputError(ValueError):
    """A prompt table that cannot be audited (missing column, empty prompt, duplicate id, ...)."""


# --- normal form and fingerprint -----------------------------------------------------------------

def normalise(text: str) -> str:
    """NFKC, format characters dropped, case folded, apostrophes dropped (``neighbour's`` ->
    ``neighbours``), every other punctuation or symbol character -> space, whitespace collapsed."""
    text = _FORMAT.sub("", unicodedata.normalize("NFKC", text)).casefold()
    text = _PUNCT.sub(" ", _APOSTROPHE.sub("", text))
    return _SPACE.sub(" ", text).strip()


def fingerprint(text: str) -> str:
    """sha256 (hex) of the normal form: equal fingerprints <=> exact match."""
    return hashlib.sha256(normalise(text).encode("utf-8")).hexdigest()


def shingles(text: str, kind: str = SHINGLE, k: int = SHINGLE_K) -> set[str]:
    """The shingle set of ``normalise(text)``: character or word ``k``-grams (a text shorter than
    ``k`` is one shingle)."""
    return _shingles(normalise(text), kind, k)


def _shingles(normal: str, kind: str, k: int) -> set[str]:
    if kind == "char":
        units = normal
        return {units[i:i + k] for i in range(max(1, len(units) - k + 1))}
    if kind == "word":
        units = normal.split()
        return {" ".join(units[i:i + k]) for i in range(max(1, len(units) - k + 1))}
    raise ValueError(f"shingle kind must be 'char' or 'word', got {kind!r}")


def jaccard(a: str, b: str, kind: str = SHINGLE, k: int = SHINGLE_K) -> float:
    """Exact Jaccard similarity of the two texts' shingle sets."""
    sa, sb = shingles(a, kind, k), shingles(b, kind, k)
    return len(sa & sb) / len(sa | sb)


# --- the older list-based calls (organism, judges) -----------------------------------------------

def exact_overlap(train: list[str], evaluation: list[str]) -> list[tuple[int, int]]:
    """(train index, evaluation index) pairs that are equal after normalisation."""
    where: dict[str, list[int]] = {}
    for j, t in enumerate(evaluation):
        where.setdefault(normalise(t), []).append(j)
    return [(i, j) for i, t in enumerate(train) for j in where.get(normalise(t), [])]


def near_duplicates(train: list[str], evaluation: list[str], threshold: float = NEAR_DUPLICATE,
                    embed=None) -> pd.DataFrame:
    """Pairs with embedding cosine >= ``threshold``: columns train_index, eval_index, similarity."""
    embed = embed or encoder.embed
    a, b = embed(train), embed(evaluation)
    sim = np.asarray(a) @ np.asarray(b).T
    i, j = np.nonzero(sim >= threshold)
    return pd.DataFrame({"train_index": i, "eval_index": j, "similarity": sim[i, j]})


def audit(train: list[str], evaluations: dict[str, list[str]], threshold: float = NEAR_DUPLICATE,
          embed=None) -> pd.DataFrame:
    """One row per evaluation set: exact and (embedding) near-duplicate overlaps with the pool."""
    rows = []
    for name, texts in evaluations.items():
        near = near_duplicates(train, texts, threshold, embed)
        rows.append({"evaluation": name, "n_eval": len(texts), "n_train": len(train),
                     "exact": len(exact_overlap(train, texts)), "near_duplicate": len(near),
                     "max_similarity": float(near["similarity"].max()) if len(near) else None})
    return pd.DataFrame(rows)


# --- input checks --------------------------------------------------------------------------------

def check_prompts(table: pd.DataFrame, where: str, *, line_offset: int | None = None) -> pd.DataFrame:
    """A prompt table checked before any work: a ``prompt`` column, non-empty prompts (also after
    normalisation), non-empty unique ids (``id`` column; ``row-00000``... when absent). Returns a
    copy with ``id`` and ``prompt`` as str. Raises ``InputError`` naming ``where`` and the first bad
    row (``line_offset``: add it to a row's position to name its line in a file)."""
    if "prompt" not in table.columns:
        raise InputError(f"{where}: missing column 'prompt'; expected columns prompt[, id], "
                         f"got {list(table.columns)}")
    if len(table) == 0:
        raise InputError(f"{where}: no rows; expected at least one prompt")
    out = table.copy()
    out.index = range(len(out))

    def at(i: int) -> str:
        line = f" (line {i + line_offset})" if line_offset is not None else ""
        return f"{where}: row {i}{line}"

    if "id" in out.columns:
        ids = out["id"]
        missing = ids.isna() | (ids.astype(str).str.strip() == "")
        if missing.any():
            i = int(np.flatnonzero(missing.to_numpy())[0])
            raise InputError(f"{at(i)}: empty id; expected a non-empty id on every row")
        out["id"] = ids.astype(str)
    else:
        out["id"] = [f"row-{i:05d}" for i in range(len(out))]
    prompts = out["prompt"]
    not_text = ~prompts.map(lambda p: isinstance(p, str))
    if not_text.any():
        i = int(np.flatnonzero(not_text.to_numpy())[0])
        raise InputError(f"{at(i)} (id {out['id'].iat[i]!r}): prompt is not text ({prompts.iat[i]!r})")
    for i, p in enumerate(prompts):
        if not p.strip():
            raise InputError(f"{at(i)} (id {out['id'].iat[i]!r}): empty prompt; expected non-empty text")
        if not normalise(p):
            raise InputError(f"{at(i)} (id {out['id'].iat[i]!r}): prompt {p!r} is empty after "
                             "normalisation (only punctuation or symbols); expected words")
    dup = out["id"].duplicated()
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        first = int(np.flatnonzero((out["id"] == out["id"].iat[i]).to_numpy())[0])
        raise InputError(f"{at(i)}: duplicate id {out['id'].iat[i]!r} (first at row {first}); "
                         "expected unique ids")
    return out


def read_prompt_csv(path: str | Path) -> pd.DataFrame:
    """A prompt CSV (``prompt``, optional ``id``, optional ``benchmark``), checked before any work."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file not found; expected a CSV with a 'prompt' column")
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text ({e})") from None
    except pd.errors.EmptyDataError:
        raise InputError(f"{path}: empty file; expected a header line with a 'prompt' column") from None
    except pd.errors.ParserError as e:
        raise InputError(f"{path}: not a readable CSV ({e})") from None
    return check_prompts(table, str(path), line_offset=2)  # line 1 is the header


# --- MinHash LSH near-duplicates ------------------------------------------------------------------

def lsh_bands(threshold: float, num_perm: int = NUM_PERM, recall: float = LSH_RECALL) -> tuple[int, int]:
    """(bands b, rows per band r), b * r <= num_perm: the largest r (fewest spurious candidates)
    with P(candidate | Jaccard = threshold) = 1 - (1 - t^r)^b >= ``recall``."""
    for r in range(num_perm, 0, -1):
        b = num_perm // r
        if b >= 2 and 1 - (1 - threshold ** r) ** b >= recall:
            return b, r
    raise ValueError(f"no LSH banding of {num_perm} permutations reaches recall {recall} at "
                     f"Jaccard {threshold}; raise num_perm")


class _Shingler:
    """Shingle sets as rows of a sparse 0/1 matrix over one shared shingle vocabulary, and each
    shingle's 32-bit SHA1 hash (datasketch's default hash), computed once per distinct shingle."""

    def __init__(self, kind: str, k: int):
        from datasketch.hashfunc import sha1_hash32  # lazy: datasketch, only for a near-duplicate pass

        self.kind, self.k, self._sha1 = kind, k, sha1_hash32
        self.vocab: dict[str, int] = {}
        self.hashes: list[int] = []

    def encode(self, normals: list[str]):
        indptr, indices = [0], []
        vocab, hashes = self.vocab, self.hashes
        for text in normals:
            for s in _shingles(text, self.kind, self.k):
                j = vocab.get(s)
                if j is None:
                    j = vocab[s] = len(hashes)
                    hashes.append(self._sha1(s.encode("utf-8")))
                indices.append(j)
            indptr.append(len(indices))
        return indptr, indices

    def matrix(self, indptr, indices):
        import scipy.sparse as sp  # lazy: scipy, only for a near-duplicate pass

        data = np.ones(len(indices), dtype=np.int32)
        return sp.csr_matrix((data, np.asarray(indices, dtype=np.int64), np.asarray(indptr)),
                             shape=(len(indptr) - 1, len(self.hashes)))

    def minhashes(self, indptr, indices, num_perm: int, seed: int):
        from datasketch import MinHash  # lazy: datasketch, only for a near-duplicate pass

        hashes = np.asarray(self.hashes, dtype=np.uint32)
        idx = np.asarray(indices, dtype=np.int64)
        batches = (hashes[idx[indptr[i]:indptr[i + 1]]].tolist() for i in range(len(indptr) - 1))
        # the shingles' SHA1 hashes are precomputed, so the MinHash's hash function is the identity
        return MinHash.generator(batches, num_perm=num_perm, seed=seed, hashfunc=_identity)


def _identity(x: int) -> int:
    return x


def _jaccard_of_pairs(a, b, ia: np.ndarray, ib: np.ndarray, chunk: int = 200_000) -> np.ndarray:
    """Exact Jaccard of rows ``a[ia[n]]`` and ``b[ib[n]]`` of two 0/1 CSR matrices."""
    size_a = np.diff(a.indptr)
    size_b = np.diff(b.indptr)
    out = np.empty(len(ia), dtype=np.float64)
    for s in range(0, len(ia), chunk):
        x, y = ia[s:s + chunk], ib[s:s + chunk]
        inter = np.asarray(a[x].multiply(b[y]).sum(axis=1)).ravel()
        out[s:s + chunk] = inter / (size_a[x] + size_b[y] - inter)
    return out


def jaccard_neighbours(pool: list[str], evaluation: list[str], threshold: float = JACCARD_THRESHOLD,
                       *, shingle: str = SHINGLE, k: int = SHINGLE_K, num_perm: int = NUM_PERM,
                       seed: int = MINHASH_SEED, recall: float = LSH_RECALL,
                       block: int = 5000) -> pd.DataFrame:
    """For each evaluation text, its nearest pool text among the MinHash-LSH candidates.

    Returns one row per evaluation index: ``eval_index``, ``pool_index`` (-1 when LSH proposed no
    candidate), ``jaccard`` (exact Jaccard of the shingle sets; NaN when no candidate) and
    ``n_near`` (pool texts whose exact Jaccard is >= ``threshold``). Texts are compared in normal
    form; duplicate normal forms are sketched once."""
    from datasketch import MinHashLSH  # lazy: datasketch, only for a near-duplicate pass

    if not 0 < threshold <= 1:
        raise ValueError(f"Jaccard threshold must be in (0, 1], got {threshold}")
    pool_norm = [normalise(t) for t in pool]
    eval_norm = [normalise(t) for t in evaluation]
    first: dict[str, int] = {}
    count: dict[str, int] = {}
    for i, t in enumerate(pool_norm):
        first.setdefault(t, i)
        count[t] = count.get(t, 0) + 1
    pool_u_list = list(first)  # distinct normal forms, first-seen order
    pool_rep = np.fromiter(first.values(), dtype=np.int64, count=len(first))  # -> first pool index
    pool_count = np.fromiter((count[t] for t in pool_u_list), dtype=np.int64, count=len(first))
    eval_u_list = list(dict.fromkeys(eval_norm))

    sh = _Shingler(shingle, k)
    p_ptr, p_idx = sh.encode(pool_u_list)
    e_ptr, e_idx = sh.encode(eval_u_list)
    b, r = lsh_bands(threshold, num_perm, recall)
    lsh = MinHashLSH(num_perm=num_perm, params=(b, r))
    with lsh.insertion_session() as session:
        for u, m in enumerate(sh.minhashes(p_ptr, p_idx, num_perm, seed)):
            session.insert(u, m, check_duplication=False)
    P, E = sh.matrix(p_ptr, p_idx), sh.matrix(e_ptr, e_idx)
    n_eval_u = len(eval_u_list)
    best_pool = np.full(n_eval_u, -1, dtype=np.int64)
    best_j = np.full(n_eval_u, np.nan)
    n_near = np.zeros(n_eval_u, dtype=np.int64)
    queries = sh.minhashes(e_ptr, e_idx, num_perm, seed)
    for start in range(0, n_eval_u, block):  # candidates are checked a block of queries at a time
        qa: list[int] = []
        qb: list[int] = []
        for q in range(start, min(start + block, n_eval_u)):
            cand = lsh.query(next(queries))
            qa.extend([q] * len(cand))
            qb.extend(cand)
        if not qa:
            continue
        qa_, qb_ = np.asarray(qa, dtype=np.int64), np.asarray(qb, dtype=np.int64)
        jac = _jaccard_of_pairs(E, P, qa_, qb_)
        # nearest: highest Jaccard, ties to the lowest pool index
        order = np.lexsort((qb_, -jac, qa_))
        qa_s, qb_s, j_s = qa_[order], qb_[order], jac[order]
        lead = np.r_[True, qa_s[1:] != qa_s[:-1]]
        best_pool[qa_s[lead]] = pool_rep[qb_s[lead]]
        best_j[qa_s[lead]] = j_s[lead]
        np.add.at(n_near, qa_, np.where(jac >= threshold - 1e-12, pool_count[qb_], 0))
    pos = {t: i for i, t in enumerate(eval_u_list)}
    rows = np.array([pos[t] for t in eval_norm], dtype=np.int64)
    return pd.DataFrame({"eval_index": np.arange(len(evaluation)), "pool_index": best_pool[rows],
                         "jaccard": best_j[rows], "n_near": n_near[rows]})


def _semantic_neighbours(pool: list[str], evaluation: list[str], embed=None,
                         chunk: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """(nearest pool index, cosine) per evaluation text, blockwise (no n_eval x n_pool matrix)."""
    embed = embed or encoder.embed
    a = np.asarray(embed(list(pool)), dtype=np.float32)
    best_i = np.empty(len(evaluation), dtype=np.int64)
    best_s = np.empty(len(evaluation), dtype=np.float64)
    for s in range(0, len(evaluation), chunk):
        sim = np.asarray(embed(list(evaluation[s:s + chunk])), dtype=np.float32) @ a.T
        best_i[s:s + chunk] = sim.argmax(axis=1)
        best_s[s:s + chunk] = sim[np.arange(len(sim)), best_i[s:s + chunk]]
    return best_i, best_s


# --- the audit -----------------------------------------------------------------------------------

AUDIT_COLUMNS = ["id", "benchmark", "pool", "exact", "exact_pool_id", "n_exact", "near_duplicate",
                 "nearest_pool_id", "jaccard", "n_near", "contaminated"]


def audit_pool(pool: pd.DataFrame, evaluation: pd.DataFrame, *, pool_name: str = "pool",
               benchmark: str = "evaluation", threshold: float = JACCARD_THRESHOLD,
               shingle: str = SHINGLE, k: int = SHINGLE_K, num_perm: int = NUM_PERM,
               seed: int = MINHASH_SEED, semantic: bool = False,
               semantic_threshold: float = NEAR_DUPLICATE, embed=None) -> pd.DataFrame:
    """One row per evaluation prompt: is it in the pool, exactly or nearly?

    ``pool`` and ``evaluation``: columns ``id``, ``prompt`` (``evaluation`` may carry ``benchmark``;
    without it every row belongs to ``benchmark``). Both are checked first (``check_prompts``).
    Columns (``AUDIT_COLUMNS``): ``exact`` (normal forms equal; ``exact_pool_id`` the first such pool
    id, ``n_exact`` how many pool rows), ``near_duplicate`` (shingle Jaccard >= ``threshold``;
    includes exact matches), ``nearest_pool_id`` / ``jaccard`` (the nearest LSH candidate and its
    exact Jaccard; empty / NaN when LSH proposed none, i.e. almost surely Jaccard < ``threshold``),
    ``n_near`` (pool rows at or above the threshold), ``contaminated`` (exact or near-duplicate, or
    semantic duplicate when ``semantic``). With ``semantic``: ``nearest_semantic_pool_id``,
    ``cosine``, ``semantic_duplicate`` (cosine >= ``semantic_threshold``)."""
    pool = check_prompts(pool, f"pool {pool_name!r}")
    evaluation = check_prompts(evaluation, "evaluation")
    pool_ids = pool["id"].to_numpy(dtype=object)
    pool_fp = [fingerprint(t) for t in pool["prompt"]]
    first_id: dict[str, str] = {}
    n_same: dict[str, int] = {}
    for fp, pid in zip(pool_fp, pool_ids):
        first_id.setdefault(fp, pid)
        n_same[fp] = n_same.get(fp, 0) + 1
    eval_fp = [fingerprint(t) for t in evaluation["prompt"]]

    near = jaccard_neighbours(pool["prompt"].tolist(), evaluation["prompt"].tolist(), threshold,
                              shingle=shingle, k=k, num_perm=num_perm, seed=seed)
    out = pd.DataFrame({
        "id": evaluation["id"].to_numpy(),
        "benchmark": (evaluation["benchmark"].astype(str).to_numpy() if "benchmark" in evaluation
                      else benchmark),
        "pool": pool_name,
        "exact": [fp in first_id for fp in eval_fp],
        "exact_pool_id": [first_id.get(fp, "") for fp in eval_fp],
        "n_exact": [n_same.get(fp, 0) for fp in eval_fp],
    })
    has = near["pool_index"].to_numpy() >= 0
    out["near_duplicate"] = near["jaccard"].fillna(0).to_numpy() >= threshold - 1e-12
    out["nearest_pool_id"] = np.where(has, pool_ids[np.where(has, near["pool_index"], 0)], "")
    out["jaccard"] = near["jaccard"].to_numpy()
    out["n_near"] = near["n_near"].to_numpy()
    # an exact match is its own nearest neighbour (Jaccard 1), whichever pool copy LSH returned
    out.loc[out["exact"], "nearest_pool_id"] = out.loc[out["exact"], "exact_pool_id"]
    out.loc[out["exact"], ["jaccard", "near_duplicate"]] = [1.0, True]
    out["contaminated"] = out["exact"] | out["near_duplicate"]
    if semantic:
        i, cos = _semantic_neighbours(pool["prompt"].tolist(), evaluation["prompt"].tolist(), embed)
        out["nearest_semantic_pool_id"] = pool_ids[i]
        out["cosine"] = cos
        out["semantic_duplicate"] = cos >= semantic_threshold
        out["contaminated"] |= out["semantic_duplicate"]
    return out


def audit_pools(pools: dict[str, pd.DataFrame], evaluation: pd.DataFrame, **kwargs) -> pd.DataFrame:
    """``audit_pool`` against every named pool, stacked (one row per evaluation prompt and pool)."""
    if not pools:
        raise InputError("no training pool to audit against")
    return pd.concat([audit_pool(p, evaluation, pool_name=name, **kwargs) for name, p in pools.items()],
                     ignore_index=True)


def overlap_rates(audit: pd.DataFrame) -> pd.DataFrame:
    """Overlap per (benchmark, pool): counts, rates and the clean remainder.

    Columns: benchmark, pool, n, exact, near_duplicate, contaminated (counts), exact_rate,
    near_duplicate_rate, contaminated_rate (count / n), n_clean, status (``clean``, ``partly
    contaminated`` or ``excluded: entirely contaminated``). With several pools a ``pool == "(any)"``
    row per benchmark counts a prompt found in any of them (what ``decontaminate`` removes). A
    benchmark with no clean prompt is reported and marked excluded: nothing downstream divides by
    its zero clean rows."""
    parts = [audit]
    if audit["pool"].nunique() > 1:
        keys = ["benchmark", "id"]
        cols = ["exact", "near_duplicate", "contaminated"]
        parts.append(audit.groupby(keys, sort=False)[cols].any().reset_index().assign(pool="(any)"))
    a = pd.concat(parts, ignore_index=True)
    g = a.groupby(["benchmark", "pool"], sort=False)
    out = g.agg(n=("id", "size"), exact=("exact", "sum"), near_duplicate=("near_duplicate", "sum"),
                contaminated=("contaminated", "sum")).reset_index()
    for c in ("exact", "near_duplicate", "contaminated"):
        out[c] = out[c].astype(int)
        out[f"{c}_rate"] = out[c] / out["n"]  # n >= 1: a benchmark exists only through its rows
    out["n_clean"] = out["n"] - out["contaminated"]
    out["status"] = np.select([out["contaminated"] == 0, out["n_clean"] == 0],
                              ["clean", "excluded: entirely contaminated"], "partly contaminated")
    return out[["benchmark", "pool", "n", "exact", "near_duplicate", "contaminated", "exact_rate",
                "near_duplicate_rate", "contaminated_rate", "n_clean", "status"]]


def decontaminate(evaluation: pd.DataFrame, audit: pd.DataFrame) -> pd.DataFrame:
    """The evaluation rows that no pool contains (exactly, nearly, or semantically when audited so).

    Rows are matched by ``id``; every evaluation id must be in ``audit`` (else ``InputError``: an
    unaudited prompt is never passed as clean). A benchmark left with no clean prompt is excluded
    (it has no rows in the result), named in a warning and in ``result.attrs["excluded"]``."""
    ids = evaluation["id"].astype(str) if "id" in evaluation else pd.Series(
        [f"row-{i:05d}" for i in range(len(evaluation))], index=evaluation.index)
    audited = set(audit["id"].astype(str))
    missing = ~ids.isin(audited)
    if missing.any():
        raise InputError(f"evaluation row {missing.to_numpy().nonzero()[0][0]} (id "
                         f"{ids[missing].iloc[0]!r}) is not in the audit; audit every row first")
    dirty = set(audit.loc[audit["contaminated"].astype(bool), "id"].astype(str))
    clean = evaluation[~ids.isin(dirty)].copy()
    rates = overlap_rates(audit)
    excluded = sorted(rates.loc[rates["n_clean"] == 0, "benchmark"].unique().tolist())
    if excluded:
        warnings.warn(f"entirely contaminated, excluded from every clean score: {', '.join(excluded)}",
                      stacklevel=2)
    clean.attrs["excluded"] = excluded
    return clean


def audit_files(pool_csv: str | Path, eval_csv: str | Path, out_dir: str | Path, *,
                threshold: float = JACCARD_THRESHOLD, shingle: str = SHINGLE, k: int = SHINGLE_K,
                num_perm: int = NUM_PERM, seed: int = MINHASH_SEED, semantic: bool = False,
                semantic_threshold: float = NEAR_DUPLICATE) -> dict[str, Path]:
    """``make audit POOL=train.csv EVAL=eval.csv RUN=name``: audit one CSV against another.

    Both files: a ``prompt`` column, optional ``id``; the evaluation file may carry ``benchmark``
    (else its file stem is the benchmark name); the pool is named by its file stem. Both files are
    checked in full before any work (missing file, missing column, empty prompt, empty or duplicate
    id stop with one message naming the file and row). Writes into ``out_dir``: ``audit.csv`` (one
    row per evaluation prompt, ``audit_pool``), ``overlap.csv`` (``overlap_rates``),
    ``evaluation_clean.csv`` (``decontaminate``) and ``audit_params.json`` (settings, sha256 of both
    inputs); returns their paths by name."""
    pool_csv, eval_csv, out_dir = Path(pool_csv), Path(eval_csv), Path(out_dir)
    pool = read_prompt_csv(pool_csv)
    evaluation = read_prompt_csv(eval_csv)
    result = audit_pool(pool, evaluation, pool_name=pool_csv.stem, benchmark=eval_csv.stem,
                        threshold=threshold, shingle=shingle, k=k, num_perm=num_perm, seed=seed,
                        semantic=semantic, semantic_threshold=semantic_threshold)
    rates = overlap_rates(result)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exclusion is in overlap.csv's status column
        clean = decontaminate(evaluation, result)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {name: out_dir / name for name in ("audit.csv", "overlap.csv", "evaluation_clean.csv",
                                               "audit_params.json")}
    result.to_csv(paths["audit.csv"], index=False)
    rates.to_csv(paths["overlap.csv"], index=False)
    clean.to_csv(paths["evaluation_clean.csv"], index=False)
    b, r = lsh_bands(threshold, num_perm)
    params = {"pool": str(pool_csv), "evaluation": str(eval_csv),
              "sha256": {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in (pool_csv, eval_csv)},
              "normalisation": "NFKC, format characters removed, casefold, apostrophes removed, "
                               "other punctuation/symbols -> space, "
                               "whitespace collapsed; exact = equal sha256 of the normal form",
              "jaccard_threshold": threshold, "shingle": shingle, "k": k, "num_perm": num_perm,
              "minhash_seed": seed, "lsh_bands": b, "lsh_rows": r, "lsh_recall_at_threshold": LSH_RECALL,
              "semantic": semantic, "semantic_threshold": semantic_threshold if semantic else None,
              "datasketch": version("datasketch"), "excluded": clean.attrs["excluded"]}
    paths["audit_params.json"].write_text(json.dumps(params, indent=2) + "\n")
    return paths
