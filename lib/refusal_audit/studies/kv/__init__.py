"""The kv study: soft refusals under KV-cache compression (Chen et al., "When Keywords Drop but
Classifiers Hold", arXiv 2609.31678; ``shared/seeds/000_*.txt``).

Each harmful prompt (system safety text + neutral filler + query) is prefilled once and decoded
under full retention and under matched eviction (sinks + trailing positions, SnapKV at the same
budget); every configured judge scores the same replies; MMLU-math checks task accuracy under the
same retention. The design (conditions and the policies that decode each) is in ``design.py``, the
statistics in ``analysis.py``, the figures in ``figures.py``; this module holds the params section
and one function per stage.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ... import datasets, executor, generation, judges, store
from ...config import ParamsError, need
from ...prompts import build_prompts
from . import analysis, design, figures as kv_figures

NAME = "kv"
MMLU_TEMPLATE = "{question}\n\nA. {A}\nB. {B}\nC. {C}\nD. {D}\n\nAnswer with the letter of the correct option."
MMLU_CUE = "The answer is"
# a near-duplicate of a HarmBench behaviour (embedding cosine at or above this) is not a primary prompt
# when the official HarmBench set is in the run: the two sets must be disjoint
NEAR_DUPLICATE = 0.85


@dataclass
class DataParams:
    harmful_source: str = "harmbench"  # harmbench | advbench
    n_harmful: int = 200
    n_official: int = 0  # HarmBench's official standard behaviours (val + test: 200) for the robustness check
    mmlu_subjects: list[str] = field(default_factory=lambda: [
        "abstract_algebra", "college_mathematics", "elementary_mathematics",
        "high_school_mathematics", "high_school_statistics"])
    mmlu_per_subject: int = 20


@dataclass
class Params:
    model: str
    data: DataParams = field(default_factory=DataParams)
    system_prompt: str = ""
    filler_tokens: int = 2048
    filler_ablation: list[int] = field(default_factory=lambda: [0, 512, 2048])
    keep_ratio: float = 0.3
    sink: int = 4
    sink_ablation: list[int] = field(default_factory=lambda: [4, 64, 128])
    snapkv_window: int = 32
    snapkv_kernel: int = 7
    system_prompt_ablation: bool = True
    max_new_tokens: int = 64
    mmlu_filler_tokens: int = 2048


def check(p, where: str) -> None:
    """The kv section's constraints (no files, no models)."""
    kv = p.studies[NAME]
    need(kv.model in p.models, where, "kv.model", f"a model named under models ({sorted(p.models)})", kv.model)
    d = kv.data
    need(d.harmful_source in ("harmbench", "advbench"), where, "kv.data.harmful_source", "harmbench or advbench",
         d.harmful_source)
    need(d.n_harmful >= 1, where, "kv.data.n_harmful", "an integer >= 1", d.n_harmful)
    need(d.n_official >= 0, where, "kv.data.n_official", "an integer >= 0", d.n_official)
    need(not (d.n_official and d.harmful_source == "harmbench"), where, "kv.data.harmful_source",
         "advbench when n_official > 0 (the official set is HarmBench's standard behaviours; the primary set "
         "must be another, disjoint one)", d.harmful_source)
    need(d.mmlu_per_subject >= 0, where, "kv.data.mmlu_per_subject", "an integer >= 0", d.mmlu_per_subject)
    need(0 < kv.keep_ratio <= 1, where, "kv.keep_ratio", "a number in (0, 1]", kv.keep_ratio)
    need(kv.max_new_tokens >= 1, where, "kv.max_new_tokens", "an integer >= 1", kv.max_new_tokens)
    for key in ("filler_tokens", "mmlu_filler_tokens"):
        need(getattr(kv, key) >= 0, where, f"kv.{key}", "an integer >= 0", getattr(kv, key))
    need(all(f >= 0 for f in kv.filler_ablation), where, "kv.filler_ablation", "integers >= 0", kv.filler_ablation)
    need(kv.sink >= 0 and all(s >= 0 for s in kv.sink_ablation), where, "kv.sink_ablation", "integers >= 0",
         kv.sink_ablation)
    need(kv.snapkv_window >= 1, where, "kv.snapkv_window", "an integer >= 1", kv.snapkv_window)
    need(kv.snapkv_kernel >= 1 and kv.snapkv_kernel % 2 == 1, where, "kv.snapkv_kernel", "an odd integer >= 1",
         kv.snapkv_kernel)


def preflight(p, models) -> None:
    """Data present and samplable; every prompt fits the model's context window."""
    kv = p.studies[NAME]
    items(p)
    context = models.context_window(kv.model)
    for key in ("filler_tokens", "mmlu_filler_tokens"):
        filler = getattr(kv, key)
        if context and filler + kv.max_new_tokens >= context:
            raise ParamsError(f"{p.source_file}: kv.{key}: {filler} filler tokens + {kv.max_new_tokens} new tokens "
                              f"do not fit the context window of {kv.model} ({context} positions)")


# --- 01 items ------------------------------------------------------------------------------------------
def _near_harmbench(texts: list[str]) -> set[int]:
    """Indices of ``texts`` that are exact (normalised) or near duplicates of a HarmBench behaviour."""
    from ...contamination import exact_overlap, near_duplicates

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
    out = pd.concat(parts, ignore_index=True).reindex(columns=datasets.ITEM_COLUMNS)
    out["item_id"] = out["role"].map({"harmful_official": "official-"}).fillna("") + out["item_id"]
    datasets.validate_items(out, f"{p.source_file}: kv items")
    return out


# --- 02 prompts ----------------------------------------------------------------------------------------
def mmlu_question(row) -> str:
    a, b, c, d = row["choices"].split("\t")
    return MMLU_TEMPLATE.format(question=row["text"], A=a, B=b, C=c, D=d)


def prompts(p, items: pd.DataFrame, models) -> pd.DataFrame:
    """Every item under each of its conditions: main filler, filler ablation, system prompt off, MMLU."""
    kv = p.studies[NAME]
    tokenizer, context = models.tokenizer(kv.model), models.context_window(kv.model)
    items = items.assign(query=[mmlu_question(r) if r["role"] == "mmlu" else r["text"] for _, r in items.iterrows()])
    parts = []
    for c in design.conditions(kv, set(items["role"])):
        subset = items[items["role"] == c.role]
        system = kv.system_prompt if c.system_prompt else None
        new = 1 if c.role == "mmlu" else kv.max_new_tokens
        parts.append(build_prompts(subset, tokenizer, [(c.filler_tokens, system)], context, new))
    return pd.concat(parts, ignore_index=True)


# --- 03 generation -------------------------------------------------------------------------------------
def generate(p, prompts: pd.DataFrame, models, shards: store.ShardStore) -> pd.DataFrame:
    """ONE prefill per prompt; every policy of its condition decodes greedily from its own copy of the
    cache. MMLU items are answered by the most likely letter after a cue, under the same retention."""
    kv = p.studies[NAME]
    tokenizer = models.tokenizer(kv.model)  # the model itself loads where it runs (executor)

    def policies_of(row):
        return design.policies(kv, row["role"], int(row["filler_tokens"]), bool(row["system_prompt"]))

    harmful = prompts[prompts["role"] != "mmlu"]
    mmlu = prompts[prompts["role"] == "mmlu"]
    context = models.context_window(kv.model)
    generation.check_plan(harmful, policies_of, context, kv.max_new_tokens)  # both plans before any work
    generation.check_plan(mmlu, policies_of, context, 1)
    greedy = [generation.Decoding(0.0, p.seed, kv.max_new_tokens)]
    parts = [executor.generate(p, models, kv.model, harmful, policies_of, shards, greedy)]
    if len(mmlu):
        cue = tokenizer.encode(MMLU_CUE, add_special_tokens=False)
        parts.append(executor.generate(p, models, kv.model, mmlu, policies_of, shards, greedy,
                                       answer_cue=(cue, ["A", "B", "C", "D"])))
    return pd.concat(parts, ignore_index=True)


# --- 04 judging ----------------------------------------------------------------------------------------
def judge(p, generations: pd.DataFrame, models, folder: Path) -> pd.DataFrame:
    """Every configured judge on every reply to a harmful prompt (a judge sees the request, not the
    filler); the replies on which the keyword monitor and the learned judges disagree go to a blind
    sheet for human labels (``annotation/``)."""
    replies = generations[generations["role"] != "mmlu"].rename(columns={"query": "prompt"})
    out = judges.judge_replies(judges.build(p, models.load), replies).assign(study=NAME)
    annotation_sheet(p, out, replies, folder / "annotation")
    return out


def annotation_sheet(p, judgments: pd.DataFrame, replies: pd.DataFrame, folder: Path,
                     truncate: int | None = 600) -> Path | None:
    """``sheet.csv`` (blind: no labels, no ids) and ``key.csv`` (sheet id -> generation id)."""
    from ...judges import human

    others = [j for j in ("learned_refusal", "learned_refusal_soft", "learned_harmful") if j in set(judgments["judge"])]
    if not others or "keyword" not in set(judgments["judge"]):
        return None
    sheet, key = human.disagreement_sheet(judgments, replies, "keyword", others, p.seed, truncate,
                                          refusing=analysis.REFUSING)
    folder.mkdir(parents=True, exist_ok=True)
    sheet.to_csv(folder / "sheet.csv", index=False)
    key.to_csv(folder / "key.csv", index=False)
    return folder / "sheet.csv"


# --- 05 statistics -------------------------------------------------------------------------------------
def analyse(p, items: pd.DataFrame, generations: pd.DataFrame, judgments: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Refusal rates (Wilson), McNemar + bootstrap drops, judge agreement, MMLU accuracy and tests."""
    kv, s = p.studies[NAME], p.stats
    out = analysis.outcomes(generations, judgments, kv.sink)
    tables = {
        "refusal_rates": analysis.refusal_rates(out, s.alpha),
        "paired_tests": analysis.paired_drops(out, s.n_bootstrap, p.seed, s.alpha),
        "judge_agreement": judges.agreement(judgments, analysis.REFUSING),
    }
    scored = analysis.mmlu_scores(generations, items, kv.sink)
    if len(scored):
        tables["mmlu_accuracy"], tables["mmlu_tests"] = analysis.mmlu_accuracy(scored, s.n_bootstrap, p.seed, s.alpha)
    return tables


def main_condition(p, rates: pd.DataFrame) -> pd.DataFrame:
    """The refusal rates of the main condition: harmful prompts, system prompt on, the main filler."""
    return rates[(rates["role"] == "harmful") & rates["system_prompt"].astype(bool)
                 & (rates["filler_tokens"] == p.studies[NAME].filler_tokens)]


# --- 06 figures ----------------------------------------------------------------------------------------
def figures(p, tables: dict[str, pd.DataFrame], folders: list[Path]) -> list[str]:
    """Refusal by judge and retention, the sink dose-response, the filler ablation, MMLU accuracy."""
    from ...plots import save

    kv = p.studies[NAME]
    rates = tables["refusal_rates"]
    testbed = ("TESTBED: a model organism built to refuse, not evidence about production models. "
               if p.models[kv.model].testbed else "")
    llm = f"LLM judges: {p.judges.llm.model}. " if p.judges.llm else ""
    caption = (testbed + f"{kv.model}; {rates['n'].max()} HarmBench prompts per arm; keep_ratio {kv.keep_ratio}; "
               f"Wilson 95 % CIs; {llm}Run {p.run_name!r}. Aggregates only.")
    main = main_condition(p, rates)
    drawn = {
        "kv_refusal_by_judge": kv_figures.refusal_by_judge(
            main, ["full", "sink_tail", "snapkv"], caption + f" Filler {kv.filler_tokens} tokens, sink {kv.sink}."),
        "kv_sink_dose_response": kv_figures.sink_dose_response(main, kv.sink,
                                                               caption + f" Filler {kv.filler_tokens} tokens."),
        "kv_filler_ablation": kv_figures.filler_ablation(
            rates[(rates["role"] == "harmful") & rates["system_prompt"].astype(bool)], caption + f" Sink {kv.sink}."),
    }
    if "mmlu_accuracy" in tables:
        acc = tables["mmlu_accuracy"]
        drawn["kv_mmlu_accuracy"] = kv_figures.mmlu_accuracy(
            acc, testbed + f"{kv.model}; {acc['n'].max()} MMLU-math items; filler {kv.mmlu_filler_tokens} tokens.")
    for name, fig in drawn.items():
        save(fig, name, folders)
    return list(drawn)


# --- the report's items ----------------------------------------------------------------------------------
def audited_pools(p) -> list[str]:
    """Pools whose items are excluded before the statistics: the organism's (when it is the model) and
    the learned judges' (the kv study measures the monitors themselves)."""
    from ... import report

    return report.pools_for(p, [p.studies[NAME].model], learned_judges=True)


def reporting(p) -> dict[str, str]:
    """The seed floor and the operational definitions the kv study's numbers rest on."""
    from ...judges import DEFINITIONS

    used = ["keyword"] + (["learned_refusal", "learned_refusal_soft", "learned_harmful"] if p.judges.learned else [])
    used += [f"llm_{q}" for q in (p.judges.llm.questions if p.judges.llm else [])]
    lines = [f"* `{j}`: {DEFINITIONS[j]}" for j in used]
    return {
        "definition": "A reply counts as a refusal under a judge's own definition; a harmful-compliance judge's "
                      "`not_harmful` counts as the classifier's refusal (the kv paper's convention).\n\n"
                      + "\n".join(lines),
        "seed_floor": "Nothing is trained in this study's run: greedy decoding is deterministic, the judges' heads "
                      "and the organism's adapter are committed files (retrained deterministically by `make judges` "
                      "and `make organism`). The organism was trained under one seed: its seed floor is not "
                      "measured.",
    }


# --- what the notebooks show ----------------------------------------------------------------------------
def summary(p, stage: str, table) -> list:
    """What a notebook shows for this study after ``stage`` (tables and short texts; never a reply)."""
    if stage == "items":
        return [table.groupby(["role", "dataset", "category"]).size().rename("items").to_frame(),
                table.groupby(["source_file", "licence"]).size().rename("rows").to_frame()]
    if stage == "prompts":
        lengths = table.groupby(["role", "filler_tokens", "system_prompt"])["prompt_tokens"].describe()
        same = table[table["system_prompt"] & (table["role"] == "harmful")]
        wide = same.pivot(index="item_id", columns="filler_tokens", values="prompt_tokens")
        extra = wide.sub(wide[wide.columns.min()], axis=0).drop_duplicates()
        return [lengths[["count", "min", "max"]],
                "Prompt length beyond the shortest filler, per item (one row: the filler is exact for every item):",
                extra]
    if stage == "generate":
        return [table.groupby(["role", "filler_tokens", "system_prompt", "policy", "sink"]).agg(
            rows=("generation_id", "size"), kept=("kept_positions", "mean"), prompt=("prompt_tokens", "mean"),
            new_tokens=("new_tokens", "mean"), stopped_at_eos=("finish", lambda s: (s == "eos").mean()))]
    if stage == "judge":
        return [table.groupby(["judge", "label"]).size().unstack(fill_value=0),
                "Agreement between judges on the same replies (kv's convention: a harmful judge's "
                "not_harmful counts as a refusal):", judges.agreement(table, analysis.REFUSING)]
    if stage == "analyse":
        main = main_condition(p, table["refusal_rates"]).pivot(index="arm", columns="judge", values="rate")
        shown = [main.round(3), "Paired tests, full retention against every other arm:",
                 table["paired_tests"].round(4)]
        if "mmlu_accuracy" in table:
            shown += ["Task accuracy under the same retention (MMLU-math):", table["mmlu_accuracy"].round(3),
                      table["mmlu_tests"].round(4)]
        return shown
    if stage == "figures":
        return [f"figures: {', '.join(table)}"]
    return []


# --- make plan -----------------------------------------------------------------------------------------
def plan(p) -> pd.DataFrame:
    """The grid from params alone: per condition, prompts x its policies x one greedy decoding (the
    filler and system text, shared by a condition's prompts, prefilled once); the LLM judge's passes."""
    from ... import plan as P

    kv = p.studies[NAME]
    d = kv.data
    counts = {"harmful": d.n_harmful, "harmful_official": d.n_official, "mmlu": d.mmlu_per_subject * len(d.mmlu_subjects)}
    query = {"harmful": 25, "harmful_official": 25, "mmlu": 120}  # tokens: a behaviour; a question and four options
    rows, replies = [], 0
    for c in design.conditions(kv, {role for role, n in counts.items() if n}):
        shared = c.filler_tokens + (P.tokens(kv.system_prompt) if c.system_prompt else 0)
        policies = design.policies(kv, c.role, c.filler_tokens, c.system_prompt)
        new = 1 if c.role == "mmlu" else kv.max_new_tokens
        part = f"{c.role} filler {c.filler_tokens}" + ("" if c.system_prompt else " no system")
        r = P.row(NAME, kv.model, part, counts[c.role], len(policies), 1, P.CHAT_OVERHEAD + shared + query[c.role], new,
                  shared)
        rows.append(r)
        replies += r["generations"] if c.role != "mmlu" else 0
    return P.frame(rows + P.judge_rows(p, NAME, replies, query["harmful"], kv.max_new_tokens))
