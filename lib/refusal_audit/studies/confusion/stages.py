"""The confusion study's stages 01-05: preflight, items (paraphrase clusters from a file, or seeds from
the sets paraphrased by a model and gated), prompts and each prompt's user span, generation with the token
signals of every pair that may share a meaning, judging and the analysis; and the user-turn check ``make check``
runs under each model's tokenizer."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd

from ... import chat, datasets, judge_sanity, judges, store
from ...chat import render, turn
from ...config import ParamsError
from ...encoder import embed
from ...paths import DATA_DIR, study_dir
from ...prompts import build_prompts, prompt_id
from . import analysis, arm_verdict, controls, gates, meaning, neighbours, pairs, paraphrase, signals
from . import clusters as cl
from . import defenses as D
from .params import NAME, REFUSING, USER_SENTINEL, arms, confusion_params, decision_judges


def _model_config(models, name: str):
    """The model's config (no weights; a GGUF file's from its converted folder, read once), or None when
    the pool may lack it (checking for another machine)."""
    from ... import models as model_lib  # lazy: keeps torch, transformers off this module

    try:
        return model_lib.load_config(models.spec(name))
    except (OSError, ValueError) as e:  # FileNotFoundError is an OSError
        if getattr(models, "missing_ok", False):
            return None
        raise FileNotFoundError(f"model {name!r}: cannot read its config offline ({e})") from None


def preflight(p, models) -> None:
    """Clusters readable and valid (file, columns, >= 2 members per cluster, enough of each set);
    every audited model a causal LM that can return hidden states (read from its config)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # lazy: transformers

    c = p.studies[NAME]
    seed_rows(p)
    for i, name in enumerate(c.models):
        cfg = _model_config(models, name)
        if cfg is not None and cfg.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            raise ParamsError(f"{p.source_file}: confusion.models[{i}]: {name!r} is a {cfg.model_type!r} model, not a "
                              "causal language model; the confusion signals need one that returns hidden states")


# --- 01 items ------------------------------------------------------------------------------------------
def known_labels(p, clusters) -> tuple:
    """The run's known labels (DEFINITIONS.md, "Known labels"): on the repository's cluster file, the labelled
    pairs of ``data/confusion/same_meaning_pairs.csv`` (source ``clusters``) and ``known_pairs.csv`` between the
    ``clusters`` drawn, as (cluster a, cluster b, same); none for another file or seeds from the sets."""

    c = p.studies[NAME]
    if c.data.source != "file" or (DATA_DIR / c.data.file).resolve() != meaning.CORPUS.resolve():
        return ()
    return meaning.corpus_known(cl.read_file(DATA_DIR / c.data.file), set(clusters))


def seed_rows(p) -> pd.DataFrame:
    """The clusters before the gates (file source) or the seeds to paraphrase (sets source)."""
    c = p.studies[NAME]
    if c.data.source == "sets":
        return cl.seeds_from_sets(c.data.clusters, p.seed)
    rows = cl.read_file(DATA_DIR / c.data.file)
    return cl.select(rows, c.data.clusters, c.data.k, p.seed, p.source_file)


def llm_paraphrases(p, rows: pd.DataFrame, pool=None) -> pd.DataFrame:
    """The seeds of ``rows`` and k paraphrases of each from ``confusion.paraphraser.model``."""
    from ... import models as model_lib  # lazy: keeps torch, transformers off this module

    c = p.studies[NAME]
    pp = c.paraphraser
    pool = pool or model_lib.Pool({pp.model: p.models[pp.model]})
    model, tok = pool.load(pp.model)
    seeds = rows[rows["member"] == 0].reset_index(drop=True)
    shards = store.ShardStore(study_dir(p.run_name, NAME) / "shards" / "paraphrases")
    new = paraphrase.paraphrase(model, tok, pp.model, seeds, c.data.k, pp.temperature, pp.max_new_tokens, p.seed,
                                shards, p.generation.batch_rows)
    out = pd.concat([seeds.assign(paraphraser_note=""), new], ignore_index=True)
    return out.sort_values(["cluster_id", "member"], kind="stable").reset_index(drop=True)


def build_items(p, rows: pd.DataFrame) -> pd.DataFrame:
    """Gate every paraphrase and give each row its item columns and embedding. (The contamination
    check of the items against every training pool is the run's shared audit, ``Run.audit``.)"""
    from . import safety  # lazy: keeps torch off this module

    c = p.studies[NAME]
    rows = rows.reset_index(drop=True)
    texts = rows["prompt"].tolist()
    e = embed(texts)
    ensemble = safety.fit(texts, e, embed)
    scores = ensemble.scores(texts, e)
    accuracy = safety.validated_accuracy(c.gates.safety_threshold, c.gates.safety_margin)
    worst = accuracy[accuracy["held_out"] == "worst"].set_index("class")["accuracy"].to_dict()
    gated = cl.apply_gates(rows, e, scores["ensemble"].to_numpy(), c.gates, worst)
    ids = gated["id"] if "id" in gated else gated["cluster_id"] + "-" + gated["member"].astype(str)
    out = pd.DataFrame({
        "item_id": ids.values, "study": NAME,
        "role": np.where(gated["label"].isin(cl.LABELS), gated["label"], "user"),
        "dataset": gated["dataset"].values, "source_file": gated["source_file"].values,
        "source_row": gated["source_row"].astype(int).values, "licence": gated["licence"].values,
        "category": gated["source_type"].values, "text": gated["prompt"].values}).reindex(columns=datasets.ITEM_COLUMNS)
    out = out.assign(cluster=gated["cluster_id"].values, member=gated["member"].astype(int).values,
                     rule=gated["rule"].values, paraphrase=gated["rule"].values, label=gated["label"].values)
    for col in ("cos_to_seed", "jaccard_to_seed", "safety_score", "seed_safety_score", "gate_side", "gate_class",
                "gate_cosine", "gate_jaccard", "gate_safety", "gate_near_duplicate", "included", "gate_reason"):
        out[col] = gated[col].values
    for name in safety.CLASSIFIERS:
        out[f"safety_{name}"] = scores[name].values
    out["safety_left_out"] = ensemble.n_left_out
    out["embedding"] = [v.astype(np.float32) for v in e]
    datasets.validate_items(out, f"{p.source_file}: confusion items")
    return out


def items(p) -> pd.DataFrame:
    """The clusters, gated: every row kept, ``included`` False with ``gate_reason`` where a gate failed."""
    c = p.studies[NAME]
    rows = seed_rows(p)
    known_labels(p, rows["cluster_id"])  # the labelled pair files checked before any work
    if c.paraphraser is not None:
        rows = llm_paraphrases(p, rows)
    return build_items(p, rows)


# --- 02 prompts ----------------------------------------------------------------------------------------
def user_span(tokenizer, system: str | None, ids: list[int]) -> tuple[int, int, bool]:
    """[start, stop) of the user's text inside the rendered prompt ``ids`` and whether it is exact:
    the template's tokens before and after the user turn, tokenised alone, must be the prompt's own
    first and last tokens; otherwise (a template that merges tokens across the boundary) the whole
    prompt, flagged False."""

    text = render(tokenizer, turn(system, USER_SENTINEL))
    if text.count(USER_SENTINEL) != 1:
        return 0, len(ids), False
    before, after = (tokenizer.encode(t, add_special_tokens=False) for t in text.split(USER_SENTINEL))
    stop = len(ids) - len(after)
    if list(ids[:len(before)]) == before and list(ids[stop:]) == after and len(before) + 1 < stop:
        return len(before), stop, True
    return 0, len(ids), False


def prompts(p, items: pd.DataFrame, models) -> pd.DataFrame:
    """Every included item in each audited model's chat template (the same rendering as the generation)."""

    c = p.studies[NAME]
    included = items[items["included"].astype(bool)]
    if included.empty:
        raise ValueError(f"{p.source_file}: confusion: no prompt passed the gates (every cluster was left with fewer "
                         "than two members); the items table's gate_reason says why for each row")
    parts = []
    chosen = D.chosen_clusters(included, c.defense_clusters, p.seed) if c.defenses else set()
    for arm, base, defense in arms(c):
        tok = models.tokenizer(base)
        system = D.system(c.system_prompt or None, defense)
        rows = included if defense is None else included[included["cluster"].isin(chosen)]
        asked = rows if defense is None else rows.assign(query=[D.request(t, defense) for t in rows["text"]])
        built = build_prompts(asked, tok, [(0, system)], models.context_window(base), c.max_new_tokens)
        spans = [user_span(tok, system, list(ids)) for ids in built["input_ids"]]
        parts.append(built.assign(
            prompt_id=[prompt_id(arm, x) for x in built["prompt_id"]], model=arm, base_model=base,
            defense=defense.name if defense else D.NONE, query=rows["text"].values,  # the request as the user wrote it
            cluster=rows["cluster"].values, user_start=[s[0] for s in spans], user_stop=[s[1] for s in spans],
            span_exact=[s[2] for s in spans]))
    return pd.concat(parts, ignore_index=True)


# --- 03 generation ---------------------------------------------------------------------------------------
def pairs_path(p) -> Path:
    """The run's table of pair signals (``pairs.py``): the cache read by the statistics stage."""

    return study_dir(p.run_name, NAME) / "pair_signals.parquet"


def token_signals(p, prompts: pd.DataFrame, models, cache=None, known=None) -> dict[str, pd.DataFrame]:
    """model -> (prompt_id, signal_key, log_ppl, pair_signals) for every prompt of that model: one
    batched forward pass per prompt (cached per (model, layer, tokens)), then the pair signals of the
    pairs the metrics may need (``neighbours.signal_pairs`` over the model's prompts at corpus scope),
    added to the run's pair table (``pairs_path``, the cache) unless already there; each
    generation row carries its own pairs (``pairs.nest``), so the statistics need no other file. Every model's
    signals are computed before
    any reply is generated, so a model without hidden states stops the stage before any work."""

    c = p.studies[NAME]
    cp = dataclasses.replace(confusion_params(c), known=known_labels(p, prompts["cluster"]) if known is None else known)
    cache = cache if cache is not None else signals.SignalCache()
    out = {}
    for name, base, _ in arms(c):
        rows = prompts[prompts["model"] == name].reset_index(drop=True)
        if rows.empty:  # an arm without prompts (a prompts table built for some arms only)
            continue
        model, tok = models.load(base)
        ids = [list(map(int, x)) for x in rows["input_ids"]]
        try:
            sigs = signals.compute_signals(model, ids, model_name=name, layer=c.metrics.layer,
                                           pad_id=tok.pad_token_id or 0, batch_size=c.signal_batch, cache=cache)
        except ValueError as e:
            key = "confusion.metrics.layer" if str(e).startswith("layer") else "confusion.models"
            raise ValueError(f"{p.source_file}: {key}: model {name!r}: {e}") from None
        starts, stops = rows["user_start"].astype(int).tolist(), rows["user_stop"].astype(int).tolist()
        span = [s.select(a, b) for s, a, b in zip(sigs, starts, stops)]
        keys = [pairs.prompt_key(name, c.metrics.layer, x, a, b) for x, a, b in zip(ids, starts, stops)]
        labels = rows["role"].where(rows["role"].isin(neighbours.LABELS), "").to_numpy(dtype=object)
        same = neighbours.signal_pairs(neighbours.Similarity(embeddings=embed(rows["query"].tolist())),
                                       rows["cluster"].to_numpy(), cp.theta, c.metrics.cover, labels,
                                       known=cp.known)
        nested = pairs.nest(pairs.compute(keys, span, same, cp.alignment, cp.shift, pairs_path(p))[0])
        out[name] = pd.DataFrame({"prompt_id": rows["prompt_id"], "signal_key": keys,
                                  "log_ppl": [s.log_perplexity for s in span],
                                  "pair_signals": [nested.get(k, []) for k in keys]})
    return out


CARRY = ("role", "query")  # beside the engine's core: the prompt's role and the request


def generate(p, prompts: pd.DataFrame, models, shards: store.ShardStore, known=None) -> pd.DataFrame:
    """Token signals of every prompt (all models first), then one greedy reply per prompt and model. ``known``:
    the known labels (None: the run's, ``known_labels``)."""
    from ... import executor, generation, retention  # lazy: keeps torch, transformers off this module

    c = p.studies[NAME]
    per_model = token_signals(p, prompts, models, known=known)
    full = [retention.make("full")]
    parts = []
    for name, base, _ in arms(c):
        rows = prompts[prompts["model"] == name]
        if rows.empty:
            continue
        gens = executor.generate(p, models, base, rows, lambda row: full, shards,
                                 [generation.Decoding(0.0, p.seed, c.max_new_tokens)], carry=CARRY).assign(model=name)
        parts.append(gens.merge(per_model[name], on="prompt_id", how="left", validate="many_to_one"))
    return pd.concat(parts, ignore_index=True)


# --- 04 judging ----------------------------------------------------------------------------------------
def judge(p, generations: pd.DataFrame, models, folder: Path) -> pd.DataFrame:
    """The decision judges on every reply (each judge sees the user's request, not the template)."""
    names = decision_judges(p)
    needs_llm = any(n.startswith("llm_") for n in names)
    built_p = p if needs_llm else dataclasses.replace(p, judges=dataclasses.replace(p.judges, llm=None))
    chosen = [j for j in judges.build(built_p, models.load) if j.name in names]
    replies = generations.rename(columns={"query": "prompt"})
    return judges.judge_replies(chosen, replies)


# --- 05 statistics -------------------------------------------------------------------------------------
PARAPHRASE_COLUMNS = ["cluster", "member", "rule", "dataset", "label", "cos_to_seed", "jaccard_to_seed",
                      "safety_score", "seed_safety_score", "gate_side", "gate_class", "gate_cosine", "gate_jaccard",
                      "gate_safety", "gate_near_duplicate", "included", "gate_reason"]


def sanity(p, items: pd.DataFrame, generations: pd.DataFrame, judgments: pd.DataFrame) -> pd.DataFrame:
    """The decision judges on the check set and against each other on each model's replies, a paraphrase cluster
    the bootstrap's unit (``judge_sanity``)."""
    clusters = items[["item_id", "cluster"]].drop_duplicates("item_id")
    replies = generations if "cluster" in generations else generations.merge(clusters, on="item_id", how="left")
    return judge_sanity.table(p, judgments, replies, {j: j for j in dict.fromkeys(judgments["judge"])},
                              cluster="cluster")


def analyse(p, items: pd.DataFrame, generations: pd.DataFrame, judgments: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Gates, scores per prompt and cluster, summaries with bootstrap CIs, FRR vs Confusion Rate,
    judge agreement, the planted control."""
    c, s = p.studies[NAME], p.stats
    cp = dataclasses.replace(confusion_params(c), known=known_labels(p, items.loc[items["included"], "cluster"]))
    decided = analysis.decisions(generations, judgments)
    signal_pairs = analysis.pair_table(generations, cp)
    per_prompt, per_cluster = analysis.score_decisions(items, decided, signal_pairs, cp)
    summary_table = analysis.summary(per_cluster, s.n_bootstrap, p.seed, s.alpha)
    versus = analysis.frr_vs_cr(summary_table, per_cluster, analysis.benign_group(per_cluster), s.alpha)
    tables = {
        "gates": gates.gate_rates(items, s.alpha),
        "gate_drops": gates.gate_drops(items),
        "gate_accuracy": gates.gate_accuracy(items, c.gates),
        "paraphrases": items.loc[items["member"] > 0, PARAPHRASE_COLUMNS].reset_index(drop=True),
        "safety_classifiers": gates.safety_accuracy(items, c.gates.safety_threshold),
        "prompts": per_prompt,
        "clusters": per_cluster,
        "summary": summary_table,
        "frr_vs_cr": versus,
        "arm_pairs": analysis.arm_pairs(versus),
        # over the audited models' replies: a defense arm's (the self-reminder's near-uniform refusals) would pool in
        # easy agreement; each arm's own kappa is in judge_sanity
        "judge_agreement": judges.agreement(judgments[judgments["generation_id"].isin(
            generations.loc[generations["model"].isin(c.models), "generation_id"])], REFUSING),
        "judge_sanity": sanity(p, items, generations, judgments),
        "planted": controls.planted(items, signal_pairs.get(c.models[0]), cp, s.n_bootstrap, p.seed, s.alpha),
        "controls": controls.controls(items, cp),
    }
    nulls, calibration = arm_verdict.null_tables(items, per_prompt, signal_pairs, cp, analysis.benign_group(per_cluster),
                                                 c, s, p.seed)
    tables.update({"nulls": nulls, "null_calibration": calibration})
    if c.defenses:  # each defense arm against the undefended one on the same prompts, paired by prompt
        defended = {a: (b, d.name) for a, b, d in arms(c) if d is not None}
        tables["defenses"] = D.compare(per_prompt, defended, D.matched(items, decided, signal_pairs, cp, defended))
    if meaning.SCORED.is_file():  # the same-meaning rule's measured error (benchmarks/confusion_same_meaning.py)
        scored = pd.read_csv(meaning.SCORED)
        grid = sorted(set(np.round(np.arange(0.6, 0.96, 0.05), 3)) | {cp.theta})
        tables["same_meaning_rule"] = meaning.rule_table(scored, grid).assign(run_theta=lambda d: d["theta"] == cp.theta)
    return {k: v for k, v in tables.items() if len(v)}


def user_turn_check(tokenizer, system: str | None) -> None:
    """``make check``: the user turn (with the study's system text) renders under this tokenizer."""
    chat.render(tokenizer, chat.turn(system, chat.PROBE_QUERY))
