"""The policy study's stages 01-05: the dual-labelled pool split and audited (items), every row as the guards
see it (prompts), the arms trained and every held-out row scored, and the released guards of params run
(generate), every verdict under every mode of its convention (judge), the statistics (analyse)."""
from __future__ import annotations

import hashlib
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from ... import paths, store
from ...config import ParamsError
from ...encoder import embed, encoder
from . import analysis, arms, conventions, design, rules
from .params import NAME


def pool(p) -> pd.DataFrame:
    """The dual-labelled pool of the section's datasets, split per stratum (``role``: train, validation,
    benchmark) under the run's seed."""
    s = p.studies[NAME]
    labelled = design.labelled_pool(s.datasets)
    return design.split_pool(labelled, s.split.train, s.split.validation, p.seed, s.split.max_per_dataset)


def preflight(p, models) -> None:
    """Every prompt file with its provenance (``design.check_provenance``: a SOURCE.md that names it,
    states its licence and records its sha256); data present and labelled in full under both
    policies (a row no rule labels, or a rule that matches no field or value, stops here); a
    training pool and held-out rows exist; guard models known (their weights are checked when
    loaded)."""
    s = p.studies[NAME]
    try:
        design.check_provenance(s.datasets)
        split = pool(p)
    except (rules.RuleError, design.ProvenanceError) as e:
        raise ParamsError(f"{p.source_file}: policy.datasets: {e}") from None
    counts = split["role"].value_counts()
    for role in ("train", "benchmark"):
        if not counts.get(role):
            raise ParamsError(f"{p.source_file}: policy.split: no {role} rows (got {counts.to_dict()})")
    for g in s.guards:
        models.context_window(g.model)


# --- 01 items ----------------------------------------------------------------------------------------------
def _audited(p) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the split with its prompts as ``text``, the audit of every held-out row against the training rows)."""
    s = p.studies[NAME]
    split = pool(p).rename(columns={"prompt": "text"})
    return split, design.audit(split, semantic=s.semantic_audit, embed=embed if s.semantic_audit else None)


def items(p) -> pd.DataFrame:
    """The dual-labelled pool, split into training / validation / benchmark rows (``role``), every
    held-out row audited against the training rows (``contaminated``, ``clean``). The full audit is
    also written to the study folder's ``audit.parquet``."""
    split, audited = _audited(p)
    store.write_atomic(audited, paths.study_dir(p.run_name, NAME) / "audit.parquet")
    return design.build_items(split.rename(columns={"text": "prompt"}), audited, NAME)


def split_items(p) -> pd.DataFrame:
    """The study's items (``items``) without writing anything: the split and its audit."""
    split, audited = _audited(p)
    return design.build_items(split.rename(columns={"text": "prompt"}), audited, NAME)


# --- 02 prompts ----------------------------------------------------------------------------------------------
def prompts(p, items: pd.DataFrame, models) -> pd.DataFrame:
    """Every pool row as the guards see it: the prompt text alone (no template: the arms embed it; a
    released guard wraps it in its own chat template at generation), its length in encoder tokens
    and whether the encoder truncates it."""
    items = design.own(items)
    enc = encoder()
    lengths = np.array([len(ids) for ids in enc.tokenizer(items["text"].tolist(), add_special_tokens=True,
                                                          truncation=False, verbose=False)["input_ids"]])
    keep = ["item_id", "study", "role", "dataset", "benchmark", "direction", "label_a", "label_b", "unsafe_a",
            "unsafe_b", "disputed", "clean"]
    out = items[keep].copy()
    out.insert(0, "prompt_id", items["item_id"].to_numpy())
    out["query"] = items["text"].to_numpy()
    out["prompt_tokens"] = np.minimum(lengths, enc.max_seq_length)
    out["truncated"] = lengths > enc.max_seq_length
    return out


# --- 03 generation: train the arms, score every held-out row; run released guards ---------------------------------
def _fingerprint(df: pd.DataFrame, cols: list[str]) -> str:
    h = hashlib.sha256()
    for row in df[cols].astype(str).itertuples(index=False):
        h.update("\x1f".join(row).encode("utf-8"))
        h.update(b"\x1e")
    return h.hexdigest()[:24]


def jobs(s, seed: int) -> list[tuple[str, int]]:
    """(arm, seed) for every model the run trains: each arm at the run's seed, each seed recipe at the
    next ``n_seeds - 1`` seeds."""
    return [(a.name, seed) for a in s.arms] + [(r, seed + i) for r in s.seed_recipes for i in range(1, s.n_seeds)]


TABLES = {"generate": "scores", "judge": "verdicts"}  # a classifier scores; its verdicts are judged, not replies
PROMPT_COLUMNS = ["prompt_id", "item_id", "role", "benchmark", "clean", "query", "label_a", "label_b", "prompt_tokens"]
SCORE_COLUMNS = ["score_id", "prompt_id", "item_id", "role", "model", "seed", "kind", "convention", "verdict",
                 "p_unsafe", *(f"p_{c}" for c in arms.CLASSES)]  # the scores table; per model: models.parquet


def _arm_rows(s, name: str, seed: int, fitted: arms.Fitted, probs: np.ndarray, held: pd.DataFrame,
              score_s: float, n_train: int) -> pd.DataFrame:
    arm = {a.name: a for a in s.arms}[name]
    out = pd.DataFrame({
        "score_id": [f"policy|{name}|s{seed}|{i}" for i in held["item_id"]],
        "prompt_id": held["prompt_id"].to_numpy(), "item_id": held["item_id"].to_numpy(),
        "role": held["role"].to_numpy(), "model": name, "seed": seed,
        "verdict": np.asarray(arms.CLASSES)[probs.argmax(1)], "kind": "arm", "convention": "arm4",
        "arm_route": arms.route(arm), "last_signal": arms.last_signal(arm),
        "hard_a": arm.hard_a, "teacher": arm.teacher, "recalibrate": arm.recalibrate,
        "calibration": arm.calibration if arm.recalibrate != "none" else np.nan,
        "n_calibration": fitted.n_calibration if arm.recalibrate != "none" else np.nan,
        "trained_params": fitted.trained_params, "total_params": fitted.total_params, "train_s": fitted.seconds,
        "score_s": score_s, "n_train": n_train, "p_unsafe": probs[:, arms.UNSAFE_INDEX].sum(1),
    })
    for j, c in enumerate(arms.CLASSES):
        out[f"p_{c}"] = probs[:, j]
    return out


def generate(p, prompts: pd.DataFrame, models, shards: store.ShardStore) -> pd.DataFrame:
    """Train every arm (frozen-encoder arms on embeddings computed once per text) and score every held-out
    row; one shard per model (a rerun skips finished models). Then each released guard of params on the
    clean benchmark rows, under its own chat template (one shard per guard). Returns the scores
    (``SCORE_COLUMNS``) and writes the study folder's ``models.parquet`` (one row per model and seed: route,
    trained parameters, seconds)."""
    s = p.studies[NAME]
    prompts = prompts[PROMPT_COLUMNS]  # the shared table also carries other studies' columns
    train = prompts[prompts["role"] == "train"].reset_index(drop=True)
    held = prompts[prompts["role"] != "train"].reset_index(drop=True)
    data = _fingerprint(train, ["item_id", "query", "label_a", "label_b"]) + _fingerprint(held, ["item_id", "query"])
    settings = {k: asdict(getattr(s, k)) for k in ("student", "teacher", "head", "kd", "lora")}
    by_name = {a.name: a for a in s.arms}
    trainer = None
    embed_s = 0.0
    parts = []
    for name, seed in jobs(s, p.seed):
        arm = by_name[name]
        chain = [asdict(arm)] + ([asdict(by_name[arm.base])] if arm.base else [])
        key = store.shard_key(study=NAME, kind="arm", chain=chain, seed=seed, settings=settings, data=data)
        if not shards.has(key):
            if trainer is None:  # every distinct text embedded once, shared by every frozen-encoder arm
                start = time.perf_counter()
                embed(train["query"].tolist() + held["query"].tolist())
                embed_s = time.perf_counter() - start
                trainer = arms.Trainer(s, train.rename(columns={"query": "text"}), embed)
            fitted = trainer.fit(name, seed)
            start = time.perf_counter()
            probs = trainer.predict(fitted, held["query"].tolist())
            rows = _arm_rows(s, name, seed, fitted, probs, held, time.perf_counter() - start, len(train))
            shards.put(key, rows.assign(embed_s=embed_s))
        parts.append(shards.collect([key]))
    for g in s.guards:
        parts.append(_guard_rows(p, g, held, models, shards))
    out = pd.concat(parts, ignore_index=True)
    store.write_atomic(analysis.models_table(out), models_path(p))
    return out[SCORE_COLUMNS]


def models_path(p) -> Path:
    return paths.study_dir(p.run_name, NAME) / "models.parquet"


def with_models(p, scores: pd.DataFrame) -> pd.DataFrame:
    """The scores with their model's columns (kind, route, last signal, ...) from ``models.parquet``."""
    m = pd.read_parquet(models_path(p)).drop(columns=["kind", "convention", "trained_share"])
    return scores.merge(m, on=["model", "seed"], how="left", validate="many_to_one")


def guard_prompts(held: pd.DataFrame, per_benchmark: int, seed: int) -> pd.DataFrame:
    """The clean benchmark rows a released guard scores (at most ``per_benchmark`` per benchmark)."""
    rows = held[(held["role"] == "benchmark") & held["clean"].astype(bool)]
    if per_benchmark:
        rows = (rows.groupby("benchmark", sort=True, group_keys=False)
                .apply(lambda g: g.sample(min(per_benchmark, len(g)), random_state=seed)))
    return rows.reset_index(drop=True)


def _guard_rows(p, g, held: pd.DataFrame, models, shards: store.ShardStore) -> pd.DataFrame:
    rows = guard_prompts(held, g.per_benchmark, p.seed)
    spec = models.spec(g.model)
    key = store.shard_key(study=NAME, kind="guard", guard=asdict(g), spec=asdict(spec),
                          data=_fingerprint(rows, ["item_id", "query"]))
    if shards.has(key):
        return shards.collect([key])
    model, tokenizer = models.load(g.model)
    start = time.perf_counter()
    texts, probs, *_ = conventions.run_guard(  # the verdict and its probability (tokens and finish unused)
        model, tokenizer, g.convention, rows["query"].tolist(), max_new_tokens=g.max_new_tokens, system=g.system,
        risk_name=g.risk_name, batch_size=g.batch_size)
    seconds = time.perf_counter() - start
    out = pd.DataFrame({
        "score_id": [f"policy|{g.model}|s{p.seed}|{i}" for i in rows["item_id"]],
        "prompt_id": rows["prompt_id"].to_numpy(), "item_id": rows["item_id"].to_numpy(),
        "role": rows["role"].to_numpy(), "model": g.model, "seed": p.seed,
        "verdict": texts, "kind": "guard", "convention": g.convention,
        "arm_route": f"guard model {spec.source} read under the {g.convention} convention"
                     + (" (prompted with a system text)" if g.system else ""),
        "last_signal": "unknown", "trained_params": np.nan, "total_params": np.nan, "train_s": 0.0,
        "score_s": seconds, "n_train": 0, "embed_s": 0.0, "p_unsafe": probs,
    })
    shards.put(key, out)
    return out


# --- 04 judging ------------------------------------------------------------------------------------------------
def judge(p, scores: pd.DataFrame, models, folder: Path) -> pd.DataFrame:
    """Every guard verdict under every mode of its convention (``conventions.judge``): loose and strict,
    and each probability threshold where the guard has a probability. An output no parser reads is
    ``unparseable`` (counted in ``stats/policy/unparseable.csv``)."""
    return conventions.judge(scores, p.studies[NAME].thresholds)


# --- 05 statistics ---------------------------------------------------------------------------------------------
def analyse(p, items: pd.DataFrame, scores: pd.DataFrame, verdicts: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Scores on clean rows (Wilson), Delta_b, Phi_b, Delta_b / Phi_b, the rank test, validation accuracy vs
    policy agreement and capability (Spearman), the BOUNDARY_SAFE mapping, the convention sweep."""
    return analysis.analyse(p.studies[NAME], p.seed, p.stats.alpha, items, with_models(p, scores), verdicts)
