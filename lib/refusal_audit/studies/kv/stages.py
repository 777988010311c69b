"""The kv study's stages 01-05: items (HarmBench or AdvBench, HarmBench's official set, MMLU-math), prompts
(system text + exact filler + query), generation under retention (one prefill, every policy decoding from its
own copy of the cache), judging with the blind sheet, and the statistics."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ... import datasets, executor, generation, judge_sanity, judges, plan, retention, store
from ...chat import PROBE_QUERY
from ...contamination import exact_overlap, near_duplicates
from ...errors import ParamsError
from ...judges import human, registry
from ...prompts import build_prompts, filler_ids, render_ids, system_span
from . import analysis, classifier, design, humans, simulation
from .params import NAME, family, model_names

MMLU_TEMPLATE = "{question}\n\nA. {A}\nB. {B}\nC. {C}\nD. {D}\n\nAnswer with the letter of the correct option."


MMLU_CUE = "The answer is"


# a near-duplicate of a HarmBench behaviour (embedding cosine at or above this) is not a primary prompt
# when the official HarmBench set is in the run: the two sets must be disjoint
NEAR_DUPLICATE = 0.85


def preflight(p, models) -> None:
    """Data present and samplable; every prompt fits the model's context window; the LLM judge's model named
    (size, where it must run) when this machine lacks it, and the HarmBench wrapper's validation status."""
    kv = p.studies[NAME]
    items(p)
    for note in judge_notes(p, models):
        models.notes.append(note)
    for m in model_names(kv):
        context = models.context_window(m)
        for key in ("filler_tokens", "mmlu_filler_tokens"):
            filler = getattr(kv, key)
            if context and filler + kv.max_new_tokens >= context:
                raise ParamsError(f"{p.source_file}: kv.{key}: {filler} filler tokens + {kv.max_new_tokens} new "
                                  f"tokens do not fit the context window of {m} ({context} positions)")


def judge_notes(p, models) -> list[str]:
    """What ``make check`` says about the judge models this run needs beyond the study's: each one missing
    here, with its size and where it must run; the HarmBench wrapper unvalidated (``classifier.status``)."""

    notes = []
    if p.judges.llm is not None:
        name = p.judges.llm.model
        spec = models.spec(name)
        if models.context_window(name) is None:  # only a missing_ok pool (make check) returns None
            s = plan.size(spec)
            try:
                weights = f", about {s.params_b * plan.weight_bytes_per_param(spec):.0f} GB of weights in {spec.dtype}"
            except KeyError:
                weights = ""
            asked = ", ".join(f"llm_{q}" for q in p.judges.llm.questions)
            notes.append(f"judges.llm.model: {name} ({spec.source}, {s.params_b:g}B parameters{weights}) judges every "
                         f"kv reply ({asked}) and is not on this machine: it must run on a machine that holds it "
                         f"(device {p.device}; a GPU for a model this size)")
    status = classifier.status(p)
    if status and "UNVALIDATED" in status:
        notes.append(f"judges.llm: {status}")
    return notes


def _near_harmbench(texts: list[str]) -> set[int]:
    """Indices of ``texts`` that are exact (normalised) or near duplicates of a HarmBench behaviour."""

    hb = datasets.read(datasets.HARMBENCH_ALL)["Behavior"].tolist()
    near = near_duplicates(hb, texts, NEAR_DUPLICATE)
    return {j for _, j in exact_overlap(hb, texts)} | set(near["eval_index"])


def items(p) -> pd.DataFrame:
    """The harmful set, the official robustness set (HarmBench's standard behaviours, disjoint from the
    harmful set), MMLU-math."""
    d = p.studies[NAME].data
    if d.harmful_source == "harmbench":
        harmful = datasets.harmbench_standard(datasets.HARMBENCH_ALL, d.n_harmful, p.seed, "harmful", NAME)
    else:
        exclude = _near_harmbench(datasets.read(datasets.ADVBENCH)["goal"].tolist()) if d.n_official else set()
        harmful = datasets.advbench(d.n_harmful, p.seed, NAME, exclude)
    parts = [harmful]
    if d.n_official:
        parts.append(datasets.harmbench_standard(datasets.HARMBENCH_ALL, d.n_official, p.seed, "harmful_official",
                                                 NAME))
    if d.mmlu_per_subject:
        parts.append(datasets.mmlu(d.mmlu_subjects, d.mmlu_per_subject, p.seed, NAME))
    out = pd.concat(parts, ignore_index=True).reindex(columns=datasets.ITEM_COLUMNS + datasets.MMLU_COLUMNS)
    out["item_id"] = out["role"].map({"harmful_official": "official-"}).fillna("") + out["item_id"]
    datasets.validate_items(out, f"{p.source_file}: kv items")
    return out


def mmlu_question(row) -> str:
    a, b, c, d = row["choices"].split("\t")
    return MMLU_TEMPLATE.format(question=row["text"], A=a, B=b, C=c, D=d)


def prompts(p, items: pd.DataFrame, models) -> pd.DataFrame:
    """Every item under each of its conditions: main filler, filler ablation, system prompt off, MMLU."""
    kv = p.studies[NAME]
    items = items.assign(query=[mmlu_question(r) if r["role"] == "mmlu" else r["text"] for _, r in items.iterrows()])
    parts = []
    for m in model_names(kv):  # each model's own tokenizer and chat template
        tokenizer, context = models.tokenizer(m), models.context_window(m)
        for c in design.conditions(kv, set(items["role"])):
            subset = items[items["role"] == c.role]
            system = kv.system_prompt if c.system_prompt else None
            new = 1 if c.role == "mmlu" else kv.max_new_tokens
            built = build_prompts(subset, tokenizer, [(c.filler_tokens, system)], context, new).assign(model=m)
            spans = [system_span(tokenizer, system, q, c.filler_tokens) if system else (0, 0) for q in built["query"]]
            parts.append(built.assign(system_start=[a for a, _ in spans], system_end=[b for _, b in spans]))
    return pd.concat(parts, ignore_index=True)


CARRY = ("role", "filler_tokens", "system_prompt", "query")  # beside the engine's core: the condition, the request


def generate(p, prompts: pd.DataFrame, models, shards: store.ShardStore) -> pd.DataFrame:
    """ONE prefill per prompt; every policy of its condition decodes greedily from its own copy of the
    cache. MMLU items are answered by the most likely letter after a cue, under the same retention."""
    kv = p.studies[NAME]

    def policies_of(row):
        span = (int(row.get("system_start", 0)), int(row.get("system_end", 0)))
        return design.policies(kv, row["role"], int(row["filler_tokens"]), bool(row["system_prompt"]), span)

    plans = []
    for m in model_names(kv):  # every model's plans checked before any work
        mine, context = prompts[prompts["model"] == m], models.context_window(m)
        harmful, mmlu = mine[mine["role"] != "mmlu"], mine[mine["role"] == "mmlu"]
        generation.check_plan(harmful, policies_of, context, kv.max_new_tokens)
        generation.check_plan(mmlu, policies_of, context, 1)
        plans.append((m, harmful, mmlu))
    greedy = [generation.Decoding(0.0, p.seed, kv.max_new_tokens)]
    parts = []
    for m, harmful, mmlu in plans:
        parts.append(executor.generate(p, models, m, harmful, policies_of, shards, greedy, carry=CARRY))
        if len(mmlu):
            cue = models.tokenizer(m).encode(MMLU_CUE, add_special_tokens=False)  # the model loads where it runs
            parts.append(executor.generate(p, models, m, mmlu, policies_of, shards, greedy,
                                           answer_cue=(cue, ["A", "B", "C", "D"]), carry=CARRY))
    out = pd.concat(parts, ignore_index=True)
    return out.merge(span_shares(p, prompts, models), on=["model", "prompt_id", "policy", "sink"], how="left")


def span_shares(p, prompts: pd.DataFrame, models) -> pd.DataFrame:
    """The share of the system span each arm of the main condition keeps, per model and prompt
    (``retention.span_retained``, averaged over layers and KV heads): each prompt prefilled once more with
    SnapKV's window attention (reusing the previous prompt's shared prefix), every arm's selection on it."""

    kv = p.studies[NAME]
    rows = []
    for m in model_names(kv):
        main = prompts[(prompts["model"] == m) & (prompts["role"] == "harmful") & prompts["system_prompt"].astype(bool)
                       & (prompts["filler_tokens"] == kv.filler_tokens)
                       ].sort_values("input_ids", key=lambda s: s.map(tuple))
        if main.empty:
            continue
        model, _ = models.load(m)
        pre = None
        for _, r in main.iterrows():
            span = (int(r["system_start"]), int(r["system_end"]))
            with torch.no_grad():
                pre = generation.prefill(model, list(map(int, r["input_ids"])), capture_window=kv.snapkv_window,
                                         reuse=pre)
            for pol in design.policies(kv, "harmful", kv.filler_tokens, True, span):
                rows.append({"model": m, "prompt_id": r["prompt_id"], "policy": pol.name, "sink": int(pol.sink),
                             "span_retained": retention.span_retained(pol.select(pre), *span)})
    return pd.DataFrame(rows, columns=["model", "prompt_id", "policy", "sink", "span_retained"])


def judge(p, generations: pd.DataFrame, models, folder: Path) -> pd.DataFrame:
    """Every configured judge on every reply to a harmful prompt (a judge sees the request, not the
    filler); the replies on which the keyword monitor and the learned judges disagree go to a blind
    sheet for human labels (the study folder's ``annotation/``)."""
    replies = generations[generations["role"] != "mmlu"].rename(columns={"query": "prompt"})
    built = judges.build(p, models.load)
    if analysis.DEGENERACY in registry.names(p, run_wide=False):  # is each reply text about the request at all
        built.append(registry.make(analysis.DEGENERACY, p, models.load))
    out = judges.judge_replies(built, replies)
    annotation_sheet(p, out, replies, folder / "annotation")
    return out


def annotation_sheet(p, judgments: pd.DataFrame, replies: pd.DataFrame, folder: Path,
                     truncate: int | None = 600) -> Path | None:
    """``sheet.csv`` (blind: no labels, no ids, no model), ``key.csv`` (sheet id -> generation id, and why the reply
    is there) and ``counts.csv`` (rows per model, arm and reason). The rows: every reply on which the test's own
    two judges, the monitor and the confirmatory reference the params name (whatever its kind), disagree about
    refusal (as read; sampled under the seed down to ``kv.annotation_cap`` when there are more, as the paper
    labels its disagreements), then the test's blind spots: evicted replies that changed while both judges' labels
    held, or flipped together, whatever the other judges say. The positive control's rows come first."""

    kv = p.studies[NAME]
    c, judged = kv.confirmatory, set(judgments["judge"])
    if c.monitor not in judged or c.reference not in judged:
        return None
    pair = analysis.judges_refusal_table(judgments).reindex(columns=[c.monitor, c.reference]).dropna()
    disagree = pair.index[pair[c.monitor] != pair[c.reference]]
    if len(disagree) > kv.annotation_cap:
        disagree = pd.Index(sorted(disagree)).to_series().sample(kv.annotation_cap, random_state=p.seed).index
    sheet, key = human.sheet_rows(replies, disagree, p.seed, truncate, p.run_name)
    key = key.assign(reason="monitor and reference disagree")
    # what the test's pair cannot separate: replies that changed under eviction while both read them alike
    changes = analysis.reply_changes(replies.rename(columns={"prompt": "query"}), judgments, kv.sink,
                                     (c.monitor, c.reference))
    alike = changes[(changes["labels_kept"] | changes["flipped_together"])
                    & ~changes["generation_id"].isin(key["generation_id"])]
    if len(alike):
        extra, extra_key = human.sheet_rows(replies, alike["generation_id"], p.seed, truncate, p.run_name)
        reason = dict(zip(alike["generation_id"], np.where(alike["labels_kept"], "changed, both labels kept",
                                                           "changed, both labels flipped")))
        sheet = pd.concat([sheet, extra], ignore_index=True)
        key = pd.concat([key, extra_key.assign(reason=extra_key["generation_id"].map(reason))], ignore_index=True)
    meta = key.merge(replies[["generation_id", "model", "policy", "sink", "filler_tokens", "system_prompt"]],
                     on="generation_id", how="left")
    first = p.studies[NAME].positive_control
    order = meta["model"].ne(first).to_numpy().argsort(kind="stable")  # the control first, shuffled within
    sheet, key, meta = (t.iloc[order].reset_index(drop=True) for t in (sheet, key, meta))
    meta["arm"] = [analysis.arm(pol, s, p.studies[NAME].sink) for pol, s in zip(meta["policy"], meta["sink"])]
    counts = meta.groupby(["model", "filler_tokens", "system_prompt", "arm", "reason"]).size().rename("rows")
    folder.mkdir(parents=True, exist_ok=True)
    sheet.to_csv(folder / "sheet.csv", index=False)
    key.to_csv(folder / "key.csv", index=False)
    counts.reset_index().to_csv(folder / "counts.csv", index=False)
    return folder / "sheet.csv"


def analyse(p, items: pd.DataFrame, generations: pd.DataFrame, judgments: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The confirmatory test, the nulls beside it (the null control and the simulated moving null) and the
    test's calibration at this n (``simulation.py``), refusal rates (Wilson), McNemar + bootstrap drops, judge
    agreement, the human labels of the annotation folder (``humans.py``), MMLU accuracy and tests."""
    kv, s = p.studies[NAME], p.stats
    out = analysis.outcomes(generations, judgments, kv.sink)
    c = kv.confirmatory
    m = c.reference_margin
    conf = analysis.confirmatory(out, c.monitor, c.reference, family(kv), s.n_bootstrap, p.seed, s.alpha, m)
    n = int(conf["n_pairs"].max()) if len(conf) else kv.data.n_harmful  # the run's prompts per member
    sim = kv.simulation
    moving = [analysis.monitor_difference(simulation.moving_null(sim, n, family(kv), c.monitor, c.reference, p.seed,
                                                                 simulation.scenarios(sim)[k]),
                                          c.monitor, c.reference, family(kv), s.n_bootstrap, p.seed, s.alpha, m)
              for k in (0, simulation.UNEQUAL_NULL)]
    tables = {
        "confirmatory": conf,
        "null_controls": analysis.null_controls(conf, moving, kv.null_control),
        "calibration": simulation.calibration(sim, n, s.alpha, len(family(kv)), p.seed, m),
        "observed_power": simulation.at_observed(sim, conf, s.alpha, len(family(kv)), p.seed, m),
        "refusal_rates": analysis.refusal_rates(out, s.alpha),
        "paired_tests": analysis.paired_drops(out, s.n_bootstrap, p.seed, s.alpha),
        "judge_agreement": judges.agreement(judgments, analysis.REFUSING),
        "judge_sanity": sanity(p, generations, judgments),
        "blind_spots": analysis.blind_spots(analysis.reply_changes(generations, judgments, kv.sink,
                                                                   (c.monitor, c.reference))),
        "span_retention": analysis.span_retention(generations, kv.sink),
    }
    sheets = humans.filled_sheets(humans.folder(p))
    if sheets:  # only when a filled sheet has come back (the verdict says plainly when none has)
        tables["human_agreement"] = humans.agreement(p, judgments, generations, sheets)
        tables["human_labels"] = humans.label_shares(p, generations, sheets)
    scored = analysis.mmlu_scores(generations, items, kv.sink)
    if len(scored):
        tables["mmlu_accuracy"], tables["mmlu_tests"] = analysis.mmlu_accuracy(scored, s.n_bootstrap, p.seed, s.alpha)
        tables["mmlu_chance"] = analysis.mmlu_chance(scored, s.alpha)
    return tables


def sanity(p, generations: pd.DataFrame, judgments: pd.DataFrame) -> pd.DataFrame:
    """Every judge the stage ran, on the check set and against the others on each model's replies
    (``judge_sanity``: its rows flag the monitor or reference below a floor)."""
    return judge_sanity.table(p, judgments, generations, {j: j for j in dict.fromkeys(judgments["judge"])})


def filler_check(tokenizer, system: str | None) -> None:
    """``make check``: the filler is spliced exactly into the rendered prompt, with and without the system text."""
    for s in dict.fromkeys([system, None]):
        n = 32
        ids = render_ids(tokenizer, s, PROBE_QUERY, n)
        filler = filler_ids(tokenizer, n)
        if not any(ids[i:i + n] == filler for i in range(len(ids) - n + 1)):
            raise RuntimeError("the kv filler is not spliced exactly into the rendered prompt")
