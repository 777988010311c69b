"""The safety gate's ensemble: three prompt classifiers that run offline on CPU.

None of the project's judges reads a prompt alone (they read replies), and a model under test
cannot judge its own paraphrases, so the gate uses prompt classifiers fitted, at run time and
deterministically, on the labelled prompt sets already in ``data/``:

* unsafe: XSTest's unsafe contrast prompts, JailbreakBench harmful, HarmBench standard and
  contextual behaviours, AdvBench, StrongREJECT;
* safe: XSTest's safe prompts, JailbreakBench benign, the organisms' benign prompts and tasks
  (``data/organism/benign_prompts.txt``, ``benign_tasks.txt``).

**Leave-out.** Every reference prompt that is the same request as a prompt being gated (equal
after ``contamination.normalise``, or embedding cosine >= ``contamination.NEAR_DUPLICATE`` = 0.85)
is removed before fitting: the seeds come from these very sets, and a classifier that had seen a
seed would read it back rather than judge it. ``n_left_out`` reports how many.

Classifiers (each gives P(unsafe)):

* ``minilm_logistic``: logistic regression (C = 1, balanced class weights) on the shared encoder's
  embeddings (all-MiniLM-L6-v2);
* ``minilm_knn``: the share of unsafe prompts among the ``KNN`` = 10 reference prompts nearest in
  embedding cosine (ties by table order);
* ``tfidf_logistic``: logistic regression (C = 1, balanced) on TF-IDF of word 1-2-grams (lower-cased,
  sublinear tf): a lexical view, so that a paraphrase that only swaps words is judged by other
  evidence than its embedding.

**Ensemble**: P(unsafe) = mean of the three; the verdict is unsafe at or above
``gates.safety_threshold`` (default 0.5). **Gate** (``clusters.apply_gates``): a paraphrase must not
read decisively on the other side of its cluster's intended label; a class whose validated accuracy
(``class_accuracy``) is below ``gates.min_accuracy`` is held to its seed's read instead, because a
classifier that misreads look-alikes (a JailbreakBench benign behaviour is a near twin of a harmful one)
would otherwise drop genuine paraphrases for its own misreading. ``safety_against: seed`` holds every
class to the seed's read.

**Validation** (``validation``; committed as ``assets/safety_validation.csv`` by ``python -m
refusal_audit.studies.confusion.safety``): on sets it never trained on (XSTest's safe prompts vs their
unsafe contrasts, fitted without any XSTest prompt; JailbreakBench benign vs harmful, fitted without
JailbreakBench); the per-prompt held-out scores are committed too (``assets/safety_validation_scores.csv``,
no text), so ``class_accuracy`` gives the gate's accuracy per class at any threshold and margin.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from ... import datasets, organism
from ...contamination import NEAR_DUPLICATE, normalise

KNN = 10
CLASSIFIERS = ("minilm_logistic", "minilm_knn", "tfidf_logistic")


def reference_pool() -> pd.DataFrame:
    """The labelled prompts: columns text, unsafe (bool), source."""
    xs = datasets.read(datasets.XSTEST)
    hb = datasets.read(datasets.HARMBENCH_ALL)
    hb = hb[hb["FunctionalCategory"].isin(["standard", "contextual"])]
    benign = organism.benign_prompts() + organism.benign_prompts(organism.BENIGN_TASKS)
    parts = [
        (xs.loc[xs["label"] == "unsafe", "prompt"], True, "xstest_unsafe"),
        (datasets.read(datasets.JBB_HARMFUL)["Goal"], True, "jailbreakbench_harmful"),
        (hb["Behavior"], True, "harmbench"),
        (datasets.read(datasets.ADVBENCH)["goal"], True, "advbench"),
        (datasets.read(datasets.STRONGREJECT)["forbidden_prompt"], True, "strongreject"),
        (xs.loc[xs["label"] == "safe", "prompt"], False, "xstest_safe"),
        (datasets.read(datasets.JBB_BENIGN)["goal"], False, "jailbreakbench_benign"),
        (pd.Series(benign), False, "organism_benign"),
    ]
    pool = pd.concat([pd.DataFrame({"text": t.astype(str).values, "unsafe": u, "source": s}) for t, u, s in parts],
                     ignore_index=True)
    return pool[pool["text"].str.strip() != ""].drop_duplicates("text").reset_index(drop=True)


@dataclass
class Ensemble:
    """The fitted classifiers and what they were fitted on."""

    pool: pd.DataFrame  # the reference prompts kept after the leave-out
    n_left_out: int
    embeddings: np.ndarray
    logistic: object
    tfidf: object
    tfidf_logistic: object

    def scores(self, texts: list[str], embeddings: np.ndarray) -> pd.DataFrame:
        """P(unsafe) per classifier and their mean (``ensemble``), one row per text."""
        unsafe = self.pool["unsafe"].to_numpy(dtype=float)
        sim = np.asarray(embeddings) @ self.embeddings.T
        nearest = np.argsort(-sim, axis=1, kind="stable")[:, :KNN]
        out = pd.DataFrame({
            "minilm_logistic": self.logistic.predict_proba(embeddings)[:, 1],
            "minilm_knn": unsafe[nearest].mean(axis=1),
            "tfidf_logistic": self.tfidf_logistic.predict_proba(self.tfidf.transform(texts))[:, 1],
        })
        out["ensemble"] = out[list(CLASSIFIERS)].mean(axis=1)
        return out


def fit(gated_texts: list[str], gated_embeddings: np.ndarray, embed) -> Ensemble:
    """The ensemble fitted on the reference pool minus every prompt that is the same request as one of
    ``gated_texts`` (exact after normalisation, or embedding cosine >= 0.85). Deterministic."""

    pool = reference_pool()
    emb = embed(pool["text"].tolist())
    near = (emb @ np.asarray(gated_embeddings).T).max(axis=1) >= NEAR_DUPLICATE if len(gated_texts) else False
    same = pool["text"].map(normalise).isin({normalise(t) for t in gated_texts}).to_numpy()
    keep = ~(near | same)
    return _fitted(pool[keep].reset_index(drop=True), emb[keep], int((~keep).sum()))


def _fitted(pool: pd.DataFrame, emb: np.ndarray, n_left_out: int) -> Ensemble:

    y = pool["unsafe"].to_numpy(dtype=int)
    logistic = LogisticRegression(C=1.0, class_weight="balanced", max_iter=5000).fit(emb, y)
    tfidf = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, lowercase=True)
    tfidf_logistic = LogisticRegression(C=1.0, class_weight="balanced", max_iter=5000).fit(
        tfidf.fit_transform(pool["text"]), y)
    return Ensemble(pool, n_left_out, emb, logistic, tfidf, tfidf_logistic)


# each held-out set: the sources it is made of; the ensemble that reads it is fitted without any of them
HELD_OUT = {"xstest": ("xstest_safe", "xstest_unsafe"),
            "jailbreakbench": ("jailbreakbench_benign", "jailbreakbench_harmful")}
VALIDATION = Path(__file__).resolve().parents[2] / "assets" / "safety_validation.csv"
VALIDATION_SCORES = VALIDATION.with_name("safety_validation_scores.csv")  # per held-out prompt, no text


def validation_scores(embed) -> pd.DataFrame:
    """Every held-out prompt's P(unsafe) per classifier and ensemble (no text): XSTest's safe prompts and
    their unsafe contrasts read by the ensemble fitted on the pool without any XSTest prompt, and
    JailbreakBench's benign behaviours and their harmful twins, fitted without JailbreakBench. Columns
    held_out, unsafe, the classifiers, ensemble."""
    pool = reference_pool()
    emb = embed(pool["text"].tolist())
    parts = []
    for name, sources in HELD_OUT.items():
        held = pool["source"].isin(sources).to_numpy()
        ensemble = _fitted(pool[~held].reset_index(drop=True), emb[~held], int(held.sum()))
        test = pool[held]
        scores = ensemble.scores(test["text"].tolist(), emb[held])
        parts.append(scores.assign(held_out=name, unsafe=test["unsafe"].to_numpy(dtype=bool)))
    out = pd.concat(parts, ignore_index=True)
    return out[["held_out", "unsafe", *CLASSIFIERS, "ensemble"]]


def summarise(scores: pd.DataFrame, threshold: float = 0.5) -> pd.DataFrame:
    """Per held-out set and classifier: accuracy at ``threshold``, the share of safe prompts read safe and
    of unsafe ones read unsafe, and the AUC (threshold-free)."""

    rows = []
    for name, d in scores.groupby("held_out", sort=False):
        y = d["unsafe"].to_numpy(dtype=bool)
        for c in (*CLASSIFIERS, "ensemble"):
            read = d[c].to_numpy() >= threshold
            rows.append({"held_out": name, "classifier": c, "n_safe": int((~y).sum()), "n_unsafe": int(y.sum()),
                         "accuracy": float((read == y).mean()), "safe_read_safe": float((~read[~y]).mean()),
                         "unsafe_read_unsafe": float(read[y].mean()), "auc": float(roc_auc_score(y, d[c]))})
    return pd.DataFrame(rows)


def validation(embed, threshold: float = 0.5) -> pd.DataFrame:
    """Each classifier and the ensemble on labelled prompts it never trained on (``validation_scores``),
    summarised at ``threshold`` (``summarise``)."""
    return summarise(validation_scores(embed), threshold)


def class_accuracy(scores: pd.DataFrame, threshold: float, margin: float) -> pd.DataFrame:
    """The gate's validated accuracy per class, from held-out ensemble scores (``validation_scores``).

    A paraphrase held to side c passes unless read decisively on the other side: safe side while
    P(unsafe) < t + m, unsafe side while P(unsafe) >= t - m. Per held-out set and class c:
    ``accuracy`` = share of the set's class-c prompts that the side-c gate passes; ``label_error`` =
    share of the prompts the side-c gate passes that belong to the other class (1 - its precision on
    that set). Rows ``held_out`` = ``worst``: the lowest accuracy and the highest label_error over the
    sets (what the gate uses: a class must be carried on every set it was validated on)."""
    rows = []
    for name, d in scores.groupby("held_out", sort=False):
        y, p = d["unsafe"].to_numpy(dtype=bool), d["ensemble"].to_numpy(dtype=float)
        for cls, truth, passes in (("safe", ~y, p < threshold + margin), ("unsafe", y, p >= threshold - margin)):
            rows.append({"class": cls, "held_out": name, "n": int(truth.sum()),
                         "accuracy": float(passes[truth].mean()),
                         "label_error": float((passes & ~truth).sum() / max(int(passes.sum()), 1))})
    out = pd.DataFrame(rows)
    worst = out.groupby("class", sort=False).agg(n=("n", "sum"), accuracy=("accuracy", "min"),
                                                 label_error=("label_error", "max")).reset_index()
    return pd.concat([out, worst.assign(held_out="worst")], ignore_index=True)


def validated_accuracy(threshold: float, margin: float) -> pd.DataFrame:
    """``class_accuracy`` of the committed held-out scores (``assets/safety_validation_scores.csv``)."""
    return class_accuracy(pd.read_csv(VALIDATION_SCORES), threshold, margin)


if __name__ == "__main__":  # python -m refusal_audit.studies.confusion.safety: rewrite the committed validation
    from ...encoder import embed

    held = validation_scores(embed)
    held.to_csv(VALIDATION_SCORES, index=False, float_format="%.6f")
    table = summarise(held)
    table.to_csv(VALIDATION, index=False, float_format="%.4f")
    print(table.round(3).to_string(index=False))
