"""What the kv study shows: the notebooks' summaries and stage notes, its figures, the report's reporting
items (operational definitions, seed floor) and the training pools its scores rest on."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ... import judges, report
from ...config import testbed_note
from ...plots import save
from ..contract import Reporting
from . import analysis, charts, humans
from .control import ADAPTER, OUT
from .params import NAME, model_names
from .verdicts import verdicts


def main_condition(p, rates: pd.DataFrame) -> pd.DataFrame:
    """The refusal rates of the main condition: harmful prompts, system prompt on, the main filler."""
    return rates[(rates["role"] == "harmful") & rates["system_prompt"].astype(bool)
                 & (rates["filler_tokens"] == p.studies[NAME].filler_tokens)]


def figures(p, tables: dict[str, pd.DataFrame], folders: list[Path]) -> list[str]:
    """Refusal by judge and retention, the sink dose-response, the filler ablation, MMLU accuracy."""

    kv = p.studies[NAME]
    rates = tables["refusal_rates"]
    names = model_names(kv)
    testbed = testbed_note(p, names)
    llm = f"LLM judges: {p.judges.llm.model}. " if p.judges.llm else ""
    caption = (testbed + f"{', '.join(names)}; {rates['n'].max()} HarmBench prompts per arm; keep_ratio "
               f"{kv.keep_ratio}; Wilson 95 % CIs; {llm}Run {p.run_name!r}. Aggregates only.")
    main = main_condition(p, rates)
    drawn = {}
    if not tables["confirmatory"].empty:
        drawn["kv_monitor_difference"] = charts.monitor_difference(
            tables["confirmatory"], caption + " Paired bootstrap 95 % CIs over prompts; * the claim after Holm "
            f"at {p.stats.alpha} (the difference's sign-flip test AND the reference's drop shown below "
            f"{kv.confirmatory.reference_margin:g}, Tango's paired non-inferiority test); + the difference alone.")
    drawn |= {
        "kv_refusal_by_judge": charts.refusal_by_judge(
            main, ["full", "sink_tail", "snapkv"], caption + f" Filler {kv.filler_tokens} tokens, sink {kv.sink}."),
        "kv_sink_dose_response": charts.sink_dose_response(main, kv.sink,
                                                               caption + f" Filler {kv.filler_tokens} tokens."),
        "kv_filler_ablation": charts.filler_ablation(
            rates[(rates["role"] == "harmful") & rates["system_prompt"].astype(bool)], caption + f" Sink {kv.sink}."),
    }
    if "mmlu_accuracy" in tables:
        acc = tables["mmlu_accuracy"]
        drawn["kv_mmlu_accuracy"] = charts.mmlu_accuracy(
            acc, testbed + f"{acc['n'].max()} MMLU-math items; filler {kv.mmlu_filler_tokens} tokens.")
    for name, fig in drawn.items():
        save(fig, name, folders)
    return list(drawn)


def audited_pools(p) -> list[str]:
    """Pools whose items are excluded before the statistics: the organism's and the style-shift control's
    (when measured) and the learned judges' (the kv study measures the monitors themselves)."""

    return report.pools_for(p, model_names(p.studies[NAME]), learned_judges=True, adapters={ADAPTER: NAME})


def training_pool(p) -> pd.DataFrame:
    """The style-shift control's training requests (``control.py``)."""

    texts = pd.read_csv(OUT / "training_data.csv", keep_default_na=False)["prompt"].drop_duplicates()
    return pd.DataFrame({"id": [f"kv-control-{i}" for i in range(len(texts))], "prompt": texts.to_numpy()})


def reporting(p) -> Reporting:
    """The seed floor and the operational definitions the kv study's numbers rest on (every judge of the run)."""
    lines = [f"* `{j}`: {judges.definition(j)}" for j in judges.registry.names(p)]
    return Reporting(
        "A reply counts as a refusal under a judge's own definition; a harmful-compliance judge's "
        "`not_harmful` counts as the classifier's refusal (the kv paper's convention). The "
        "confirmatory claim has two halves: the monitor's refusal drop under eviction minus the "
        "reference judge's (paired by prompt, sign-flip test) AND the reference's own drop shown "
        "below a declared margin (paired non-inferiority test); Holm over the declared family "
        "(`studies/kv/DEFINITIONS.md`).\n\n" + "\n".join(lines),
        "Nothing is trained in this study's run: greedy decoding is deterministic, the judges' heads "
        "and the testbeds' adapters (the refusing organism, the style-shift control) are committed "
        "files (retrained deterministically by `make judges`, `make organism` and `make kv-control`). "
        "Each testbed was trained under one seed: its seed floor is not measured.")


def summary(p, stage: str, table) -> list:
    """What a notebook shows for this study after ``stage`` (tables and short texts; never a reply)."""
    if stage == "items":
        return [table.groupby(["role", "dataset", "category"]).size().rename("items").to_frame(),
                table.groupby(["source_file", "licence"]).size().rename("rows").to_frame()]
    if stage == "prompts":
        lengths = table.groupby(["model", "role", "filler_tokens", "system_prompt"])["prompt_tokens"].describe()
        same = table[table["system_prompt"] & (table["role"] == "harmful")]
        wide = same.pivot(index=["model", "item_id"], columns="filler_tokens", values="prompt_tokens")
        extra = wide.sub(wide[wide.columns.min()], axis=0).droplevel("item_id").reset_index().drop_duplicates()
        return [lengths[["count", "min", "max"]],
                "Prompt length beyond the shortest filler, per model and item (one row per model: the filler is "
                "exact for every item):", extra]
    if stage == "generate":
        return [table.groupby(["model", "role", "filler_tokens", "system_prompt", "policy", "sink"]).agg(
            rows=("generation_id", "size"), kept=("kept_positions", "mean"), prompt=("prompt_tokens", "mean"),
            new_tokens=("new_tokens", "mean"), stopped_at_eos=("finish", lambda s: (s == "eos").mean()))]
    if stage == "judge":
        return [table.groupby(["judge", "label"]).size().unstack(fill_value=0),
                "Agreement between judges on the same replies (kv's convention: a harmful judge's "
                "not_harmful counts as a refusal):", judges.agreement(table, analysis.REFUSING)]
    if stage == "analyse":
        main = main_condition(p, table["refusal_rates"]).pivot(index=["model", "arm"], columns="judge", values="rate")
        cols = ["model", "family_member", "n_pairs", "monitor_drop", "reference_drop", "difference", "difference_lo",
                "difference_hi", "p", "holm_p", "monitor_holm_p", "reference_holm_p", "hold_p", "claim_holm_p",
                "claimed", "min_significant_difference", "min_significant_over", "claimed_as_read", "not_text_full",
                "not_text_arm", "n_replies", "carrying", "carrying_not_text"]
        conf = table["confirmatory"]
        shown = [main.round(3), *degenerate_share(p, table["refusal_rates"]),
                 "The confirmatory test (DEFINITIONS.md): the monitor's refusal drop minus the reference judge's, "
                 "paired by prompt, sign-flip test, Holm over the declared family per model:",
                 conf[[c for c in cols if c in conf]].round(4),
                 "The nulls, each judge's drop beside the difference (the null control, a testbed; the moving null, "
                 "a judgment-level simulation in which eviction turns refusals into compliance for both judges):",
                 table["null_controls"].round(4),
                 "The claim's family-wise false-positive rate and power over simulated runs, at this n and the paper "
                 "files' (DEFINITIONS.md):", table["calibration"].round(4),
                 "What the test cannot see: evicted replies that changed while the monitor and the reference read them alike:",
                 table.get("blind_spots", pd.DataFrame()),
                 "The share of the system span each arm keeps (main condition):",
                 table.get("span_retention", pd.DataFrame()).round(3),
                 "Paired tests, full retention against every other arm (descriptive):", table["paired_tests"].round(4)]
        if "mmlu_accuracy" in table:
            shown += ["Task accuracy under the same retention (MMLU-math):", table["mmlu_accuracy"].round(3),
                      table["mmlu_tests"].round(4)]
        shown += humans.summary(table.get("human_agreement"))
        return shown + ["**Verdict.** " + " ".join(verdicts(p, table))]
    if stage == "figures":
        return [f"figures: {', '.join(table)}"]
    return []


def degenerate_share(p, rates: pd.DataFrame) -> list:
    """The share of replies the degeneracy judge calls degenerate or off-topic per model and arm of the main
    condition (the monitor's rows: one per reply), or nothing when the run has no such count."""
    if "not_text" not in rates or not len(rates):
        return []
    r = main_condition(p, rates)
    r = r[r["judge"] == p.studies["kv"].confirmatory.monitor]
    share = (r["not_text"] / (r["n"] + r["not_text"] + r["unparseable"])).rename("degenerate_share")
    return ["Degenerate or off-topic replies (degeneracy judge), their own class: the share per model and arm of the "
            "main condition, left out of every refusal rate and pair:",
            r.assign(degenerate_share=share).pivot(index="model", columns="arm", values="degenerate_share").round(3)]


# what each notebook says this study does at its stage (the notebooks list the enabled studies)
NOTEBOOK_NOTES = {
    'items': (
        'HarmBench *standard* behaviours drawn stratified by semantic category (AdvBench the alternative, '
        "with every near-duplicate of a HarmBench behaviour removed when HarmBench's official set is in the "
        'run), the official set for the robustness check when asked for, and MMLU-math for task accuracy.'),
    'prompts': (
        "the system safety text, then a neutral filler cut to an **exact** number of tokens of the model's "
        'tokenizer, then the query; every harmful item under the main condition, every filler length of the '
        'ablation, and without the system prompt; MMLU items under their own filler. The filler ids are '
        'spliced into the rendered template, so the length is exact by construction (checked below).'),
    'generate': (
        'greedy, one `max_new_tokens` for all: `full`; `sink_tail` (the first `sink` positions and the '
        'trailing positions, `keep_ratio` of the prompt in all) at every sink of the ablation; `snapkv` (the '
        'observation window plus the positions it attends to most, per layer and KV head, same budget). MMLU '
        'items are answered after the cue *"The answer is"* under the same policies.'),
    'judge': (
        "every reply to a harmful prompt; a harmful judge's `not_harmful` counts as the classifier's refusal "
        "(the paper's convention). Disagreements between the keyword monitor and the learned judges go to a "
        'blind sheet for humans (`results/<run>/annotation/`).'),
    'analyse': (
        'the confirmatory test (`studies/kv/DEFINITIONS.md`): per model and declared arm, the keyword '
        "monitor's refusal drop under eviction minus the learned judge's, paired by prompt, with its "
        'bootstrap CI, a sign-flip test and Holm over the declared family; then, descriptive, refusal rate '
        'per judge and arm with Wilson 95 % intervals, exact McNemar tests of full retention against each '
        'other arm with the paired bootstrap CI of the drop (full − arm), and MMLU accuracy per arm. Beside '
        "it the nulls with each judge's drop (the null control and a simulated moving null, in which eviction"
        " turns refusals into compliance for both judges), the test's false-positive rate and power over "
        "simulated runs at the run's n, and the human labels of the annotation folder against every judge "
        "(agreement, Cohen's kappa; `make kv-humans`), or a plain statement that none has come back."),
    'figures': (
        'refusal rate by judge and retention policy; the sink dose-response; the filler-length ablation; MMLU'
        ' accuracy.'),
}
