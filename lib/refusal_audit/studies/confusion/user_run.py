"""``make confusion``: the confusion study's answer on a user's own paraphrase clusters.

Writes ``results/<RUN>/``:

- ``confusion_summary.csv``: per system (model or decisions file) and judge: FRR, Confusion Rate,
  mean CI and Depth, each with its percentile cluster-bootstrap CI (clusters resampled), the counts,
  and ``signals`` (available / not available);
- ``confusion_clusters.csv``: the per-cluster table; ``confusion_prompts.csv``: one row per prompt
  and judge (gates, decision, events, CI, signals, depth);
- ``confusion_nulls.csv`` and ``confusion_null_calibration.csv``: the default run's verdict for each arm
  (``arm_verdict.py``: CR beside its random-placement null, the word, the test's false-positive rate and power),
  with the same-meaning rule's measured error and what rests on the cosine alone, also in the summary's columns;
- ``confusion_pairs_sheet.csv`` where any event rests on the cosine alone: the blind sheet of those pairs of
  clusters that ``PAIRS=`` reads once filled;
- ``confusion_map.png``, ``confusion_frr_vs_rate.png`` and ``report.html`` (aggregates only: no
  reply is shown); the study's tables in ``results/<RUN>/confusion/``: ``items.parquet`` and, with a
  model run, ``generations.parquet``, ``judgments.parquet``, ``pair_signals.parquet`` and the shards.
"""
from __future__ import annotations

import dataclasses
import html
from pathlib import Path

import numpy as np
import pandas as pd

from ... import config, datasets, store
from ...config import ParamsError, testbed_note
from ...paths import run_dir, study_dir
from . import analysis, arm_verdict, gates, meaning
from . import clusters as cl
from . import defenses as D
from . import same_meaning_judge as J
from . import wording as W
from .params import NAME, arms, confusion_params
from .stages import build_items, generate, judge, preflight, prompts
from .verdicts import _null_words, gate_verdict

DECISIONS = ("ACCEPT", "REJECT")
SUMMARY = ["frr", "confusion_rate", "ci", "depth"]
# the verdict's columns of the summary (``arm_verdict.null_tables``): the word, CR's null, the test's calibration,
# the same-meaning rule's error and what rests on the cosine alone
NULL_COLUMNS = ["model", "judge", "verdict", "confusion_rate_null", "confusion_rate_null_lo", "confusion_rate_null_hi",
                "confusion_rate_p_below", "n_perm", "fpr", "n_null_draws", "power_at_half", "effect_at_half", "mde",
                "n_draws", "rule_theta", "rule_n_pairs", "rule_precision", "rule_precision_lo", "rule_precision_hi",
                "rule_recall", "rule_recall_lo", "rule_recall_hi", "n_cosine_events", "n_cosine_confused",
                "confusion_rate_without_cosine", "p_below_without_cosine", "verdict_without_cosine",
                "verdict_rests_on_cosine", "confusion_rate_wording_null", "wording_p_below", *W.SPLIT, "fpr_random_only",
                "fpr_trigger", "fpr_trigger_random_only", "n_trigger_guards"]


def read_decisions(path: str | Path, ids: set[str], clusters_csv: str | Path) -> pd.DataFrame:
    """A decisions file (``id``, ``decision`` ACCEPT/REJECT), checked row by row against the clusters'
    ids: one clear error naming the file and row."""
    df = datasets.read_user_csv(path, ["id", "decision"], [], "decisions")
    for i, (item, decision) in enumerate(zip(df["id"], df["decision"])):
        if decision.strip() not in DECISIONS:
            raise ValueError(f"{path}: row {i}: decision {decision!r}; expected ACCEPT or REJECT")
        if item not in ids:
            raise ValueError(f"{path}: row {i}: id {item!r} is not in the clusters file {clusters_csv}")
    return pd.DataFrame({"item_id": df["id"].values, "accepted": df["decision"].str.strip().eq("ACCEPT").values})


def check_inputs(clusters_csv: str, model_names: list[str], decisions_csv: str | None, pairs_csv: str | None = None):
    """Clusters (and decisions, and known labels) read and checked; returns (cluster rows, decision rows or
    None, known labels: (cluster a, cluster b, same) triples, empty without ``pairs_csv``)."""

    rows = cl.read_user(clusters_csv)
    known = meaning.user_known(pairs_csv, rows) if pairs_csv else ()
    decided = None
    if decisions_csv:
        decided = read_decisions(decisions_csv, set(rows["id"]), clusters_csv)
    elif not model_names:
        raise ValueError("make confusion: name MODELS=a,b (models from params, Hugging Face ids or local paths) "
                         "or DECISIONS=file.csv (id, decision ACCEPT/REJECT)")
    return rows, decided, known


def run(clusters_csv: str, model_names: list[str], run_name: str, params_file: str,
        decisions_csv: str | None = None, pool=None, pairs_csv: str | None = None) -> Path:
    """See the module docstring; every input is checked before the encoder or any model loads."""
    from ... import models as model_lib  # lazy: keeps torch, transformers off this module

    p = config.load(params_file)
    if NAME not in p.studies:
        raise ParamsError(f"{p.source_file}: confusion: missing; make confusion takes its gates, metrics, judges "
                          "and max_new_tokens from the confusion section")
    model_names = [m.strip() for m in model_names if m and m.strip()]
    if len(set(model_names)) != len(model_names):
        raise ValueError(f"make confusion: MODELS names a model twice: {model_names}")
    rows, decided, known = check_inputs(clusters_csv, model_names, decisions_csv, pairs_csv)
    c = p.studies[NAME]
    p = dataclasses.replace(p, run_name=run_name)
    if decided is None:
        pool = pool or model_lib.Pool(p.models, device=p.device)
        for name in model_names:
            model_lib.resolve(pool.spec(name).source)
        # the params' defenses apply to the defended model where MODELS names it, else to the first of MODELS
        p = dataclasses.replace(p, studies={**p.studies, NAME: dataclasses.replace(
            c, models=model_names, defended=c.defended if c.defended in model_names else None)})
        preflight(p, pool)
    if c.same_meaning_judge:  # the sheet's pre-labelling model found before any work
        pool = pool or model_lib.Pool(p.models, device=p.device)
        model_lib.resolve(pool.spec(c.same_meaning_judge).source)
    folder, tables = run_dir(run_name), study_dir(run_name, NAME)
    items = build_items(p, rows)
    store.write_atomic(items, tables / "items.parquet")
    cp = dataclasses.replace(confusion_params(p.studies[NAME]), known=known)
    if decided is None:
        built = prompts(p, items, pool)
        gens = generate(p, built, pool, store.ShardStore(tables / "shards" / "generations"), known=known)
        store.write_atomic(gens, tables / "generations.parquet")
        judged = judge(p, gens, pool, tables)
        store.write_atomic(judged, tables / "judgments.parquet")
        decisions = analysis.decisions(gens, judged)
        pairs = analysis.pair_table(gens, cp)
    else:
        decisions = decided.assign(model=Path(decisions_csv).stem, judge="decision")
        pairs = {}
    per_prompt, per_cluster = analysis.score_decisions(items, decisions, pairs, cp)
    if per_cluster.empty:
        raise ValueError(f"{clusters_csv}: no cluster kept two decided members after the gates; "
                         f"{tables / 'items.parquet'} says why for each row")
    summary = summary_table(per_cluster, p.stats.n_bootstrap, p.seed, p.stats.alpha, signals=decided is None)
    null, calibration = arm_verdict.null_tables(items, per_prompt, pairs, cp, analysis.benign_group(per_cluster),
                                                 p.studies[NAME], p.stats, p.seed)
    summary = summary.merge(null[[c for c in null.columns if c in NULL_COLUMNS]], on=analysis.ARM, how="left")
    write_tables(folder, items, per_prompt, per_cluster, summary)
    defended = {a: (b, d.name) for a, b, d in arms(p.studies[NAME]) if d is not None} if decided is None else {}
    compared = D.compare(per_prompt, defended, D.matched(items, decisions, pairs, cp, defended))
    said = D.words(compared, null) if len(compared) else []
    if len(compared):
        compared.to_csv(folder / "confusion_defenses.csv", index=False)
    null.to_csv(folder / "confusion_nulls.csv", index=False)
    calibration.to_csv(folder / "confusion_null_calibration.csv", index=False)
    (folder / arm_verdict.SHEET).unlink(missing_ok=True)
    sheet = arm_verdict.write_sheet(folder / arm_verdict.SHEET, items,
                                     arm_verdict.sheet_pairs(items, per_prompt, cp), p.seed)
    judge_line = pre_label(sheet, p, pool) if sheet is not None and c.same_meaning_judge else None
    figures = draw(folder, per_prompt, summary, p, cp, model_names, decisions_csv)
    gate = gate_verdict(p.studies[NAME].gates, gates.gate_drops(items),
                        gates.gate_accuracy(items, p.studies[NAME].gates)) + said
    write_report(folder, summary, per_cluster, figures, p, cp, clusters_csv, model_names, decisions_csv,
                 gate + ([judge_line] if judge_line else []), pairs_csv, null, sheet)
    return folder


def pre_label(sheet: Path, p, pool) -> str:
    """The params' same-meaning judge's labels beside each row of the blind sheet (``judge_label``,
    ``judge_p_same``; the person's ``label`` stays empty) and its measured error on the labelled pairs, in words."""
    from ... import models as model_lib  # lazy: keeps torch, transformers off this module

    name = p.studies[NAME].same_meaning_judge
    pool = pool or model_lib.Pool(p.models, device=p.device)
    judge = J.build(*pool.load(name))
    rows = pd.read_csv(sheet, dtype=str, keep_default_na=False)
    rows = pd.concat([rows, J.judge_pairs(judge, rows["seed_a"].tolist(), rows["seed_b"].tolist())], axis=1)
    rows.to_csv(sheet, index=False)
    return J.words(J.measured(judge), name)


def population(group: str) -> str:
    """Which prompts the FRR and the benign statistics count (``analysis.benign_group``)."""
    return ("benign prompts (label safe)" if group == "safe"
            else "every prompt (no label column: all taken as benign)")


def summary_table(per_cluster: pd.DataFrame, n_boot: int, seed: int, alpha: float, signals: bool) -> pd.DataFrame:
    """Per system and judge, on the benign clusters (every cluster of an unlabelled file): FRR, Confusion
    Rate, CI, Depth with cluster-bootstrap CIs and the counts; the harmful clusters' refusals (correct) and
    acceptances (the other error) apart, in the ``harmful_*`` columns."""
    group = analysis.benign_group(per_cluster)
    if group == "safe" and not (per_cluster["label"] == "safe").any():
        raise ValueError("make confusion: the clusters file labels no cluster safe; the FRR and the confusion "
                         "statistics are about benign prompts (label safe), so at least one benign cluster is needed")
    boot = analysis.summary(per_cluster, n_boot, seed, alpha)
    table = analysis.frr_vs_cr(boot, per_cluster, group, alpha)
    table["population"] = population(group)
    ci = analysis.wide(boot, group).reindex(columns=["model", "judge"] + [f"{s}{x}" for s in ("ci", "depth")
                                                                          for x in ("", "_lo", "_hi")])
    table = table.drop(columns=[c for c in ("ci", "ci_lo", "ci_hi", "depth") if c in table]).merge(
        ci[["model", "judge", "ci", "ci_lo", "ci_hi", "depth", "depth_lo", "depth_hi"]], on=["model", "judge"])
    table["signals"] = "available" if signals else "not available (decisions only)"
    if not signals:
        table[["ci", "ci_lo", "ci_hi"]] = np.nan
    first = ["model", "judge", "n_clusters", "n_prompts", "n_rejected", "n_confused"]
    stats_cols = [f"{s}{x}" for s in SUMMARY for x in ("", "_lo", "_hi")]
    rest = [c for c in table.columns if c not in first + stats_cols]
    return table[first + stats_cols + rest]


def write_tables(folder: Path, items: pd.DataFrame, per_prompt: pd.DataFrame, per_cluster: pd.DataFrame,
                 summary: pd.DataFrame) -> None:
    base = items[["item_id", "cluster", "member", "text", "included", "gate_reason", "cos_to_seed",
                  "jaccard_to_seed", "safety_score"]].rename(columns={"item_id": "id", "cluster": "cluster_id",
                                                                      "text": "prompt"})
    metric_cols = ["model", "judge", "item_id", "accepted", "n_neighbours", "n_events", "confused", "n_cross_events",
                   "cross_confused", "n_known_events", "n_known_removed", "ci", "drift", "shift", "contrast", "depth"]
    scored = per_prompt[metric_cols].rename(columns={"item_id": "id"})
    table = base.merge(scored, on="id", how="left").astype({"n_events": "Int64", "confused": "boolean",
                                                            "n_cross_events": "Int64", "cross_confused": "boolean",
                                                            "n_known_events": "Int64", "n_known_removed": "Int64"})
    table["decision"] = np.select([~table["included"], table["accepted"].isna(), table["accepted"] == True],  # noqa: E712
                                  ["EXCLUDED", "UNDECIDED", "ACCEPT"], "REJECT")
    table.drop(columns=["accepted"]).to_csv(folder / "confusion_prompts.csv", index=False)
    per_cluster.drop(columns=["label"], errors="ignore").rename(columns={"cluster": "cluster_id"}).to_csv(
        folder / "confusion_clusters.csv", index=False)
    summary.to_csv(folder / "confusion_summary.csv", index=False)


def _caption(p, cp, model_names: list[str], decisions_csv: str | None) -> str:
    note = testbed_note(p, model_names)
    what = f"decisions from {Path(decisions_csv).name}" if decisions_csv else f"models {', '.join(model_names)}"
    return (note + f"{what}; same meaning: same cluster or, in another cluster of the same label (safe / unsafe; "
            f"unlabelled: own cluster only), a known label where one exists ({len(cp.known)} pairs of clusters), "
            f"else cosine > {cp.theta} (the gate's tau); FRR on benign prompts; k {cp.k}, scope "
            f"{cp.scope}; cluster-bootstrap 95 % CIs. Aggregates only: no reply is shown.")


def draw(folder: Path, per_prompt: pd.DataFrame, summary: pd.DataFrame, p, cp, model_names, decisions_csv) -> list[str]:
    import matplotlib.pyplot as plt  # lazy: keeps matplotlib off this module

    from ...plots import save  # lazy: keeps seaborn off this module
    from . import charts as cf  # lazy: keeps matplotlib, seaborn off this module
    text = _caption(p, cp, model_names, decisions_csv)
    drawn = {"confusion_map": cf.confusion_map(per_prompt, None, text),
             "confusion_frr_vs_rate": cf.frr_vs_rate(summary, None, text)}
    for name, fig in drawn.items():
        save(fig, name, [folder])
        plt.close(fig)  # a command, not a notebook: nothing shows an open figure, and a long process would keep it
    return [f"{name}.png" for name in drawn]


def _interval(row: pd.Series, stat: str) -> str:
    if pd.isna(row[stat]):
        return "n/a"
    if stat != "frr" and not row.get("n_rejected", 1):  # a judge that rejected nothing has no confusion to measure
        return "n/a (no rejection)"
    if pd.isna(row[f"{stat}_lo"]):
        return f"{row[stat]:.3f} [no interval]"
    return f"{row[stat]:.3f} [{row[f'{stat}_lo']:.3f}, {row[f'{stat}_hi']:.3f}]"


def headline(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary as text: one row per system and judge, each statistic as 'value [lo, hi]'."""
    out = summary[["model", "judge", "n_clusters", "n_prompts"]].copy()
    if "verdict" in summary:
        out.insert(2, "verdict", summary["verdict"].fillna("n/a"))
    for stat, label in zip(SUMMARY, ("FRR", "Confusion Rate", "mean CI", "Depth")):
        out[label] = [_interval(r, stat) for _, r in summary.iterrows()]
    if "confusion_rate_null" in summary:
        out.insert(out.columns.get_loc("Confusion Rate") + 1, "CR null (random placement)", [
            "n/a" if pd.isna(r["confusion_rate_null"]) else
            f"{r['confusion_rate_null']:.2f} [{r['confusion_rate_null_lo']:.2f}, {r['confusion_rate_null_hi']:.2f}], "
            f"p(below) {r['confusion_rate_p_below']:.3f}; FPR {r['fpr']:.1%}" for _, r in summary.iterrows()])
    if "wording_p_below" in summary:
        out.insert(out.columns.get_loc("CR null (random placement)") + 1, "CR null (same harm words)", [
            "n/a" if pd.isna(r["wording_p_below"]) else
            f"{r['confusion_rate_wording_null']:.2f}, p(below) {r['wording_p_below']:.3f}" for _, r in summary.iterrows()])
    return out


def label_rule(clusters_csv: str, pairs_csv: str | None = None) -> str:
    """What "same meaning" means for this clusters file (DEFINITIONS.md, same meaning never crosses the label;
    known labels from ``pairs_csv`` decide where they exist)."""
    labelled = (cl.read_user(clusters_csv)["label"] != "").all()
    known = (f" Known labels ({pairs_csv}): a pair of clusters labelled the same intent shares its meaning whatever "
             "the cosine, one labelled a different intent never does; the cosine decides elsewhere."
             if pairs_csv else " No known labels (PAIRS=): the cosine decides every cross-cluster pair.")
    return ("Same meaning: the same cluster, or another cluster of the same label (safe / unsafe) with cosine > theta."
            + known if labelled else "The clusters file has no label column: same meaning stays within each cluster, so there "
            "are no cross-cluster events and N_k(r) holds r's own cluster's accepted prompts only.")


def arm_words(r, n) -> str:
    """One system's answer in words, the default run's verdict (``verdicts``' null sentence, same code): the word
    (``analysis.null_answer``), FRR and CR beside the null placement with the test's false-positive rate and power
    or smallest detectable drop, the same-meaning rule's error and what rests on the cosine; the cross-cluster
    events and the harmful prompts apart."""
    if n is None:
        return f"{r.model} / {r.judge}: no benign prompt left to place a null on."
    word = (" (its benign rejections fill whole intents: fewer sit beside an accepted paraphrase than the same "
            "rejections placed at random would)" if n["verdict"] == "follows intents" else
            " (its benign rejections sit beside accepted prompts of the same meaning as often as the same number of "
            "rejections placed at random: no evidence that its refusal boundary follows intents)"
            if n["verdict"] == "confused at chance" else
            " (its benign rejections fill whole intents, but no more than the same rejections placed at random among "
            "prompts holding the same harm words would: a guard keyed on those words would do the same)"
            if n["verdict"] == W.WORDING else
            " (no accepted prompt is left for a rejection to sit beside: the test has nothing to place)"
            if n["verdict"] == analysis.EVERY_REJECTED else "")
    out = (f"{r.model} / {r.judge}: {n['verdict']}{word}. Rejects {r.frr:.0%} of {int(r.n_prompts)} {r.population} "
           f"(FRR {r.frr:.3f} [{r.frr_lo:.3f}, {r.frr_hi:.3f}]); Confusion Rate {r.confusion_rate:.2f} "
           f"({int(r.n_confused)} of {int(r.n_rejected)} rejections with an accepted prompt of the same meaning)."
           + _null_words(n, r) + W.words_line(n) + " " + arm_verdict.rule_words(n))
    if r.n_cross_events > 0 or r.n_known_removed > 0:
        out += (f" Across clusters: {int(r.n_cross_confused)} rejections confused by another cluster "
                f"({int(r.n_cross_events)} events, {int(r.n_known_events)} of them with a known same-intent twin, "
                f"{int(r.n_known_confused)} rejections); {int(r.n_known_removed)} accepted prompts above theta "
                "of clusters labelled a different intent were not counted.")
    if getattr(r, "n_harmful", 0) > 0:
        out += (f" Harmful prompts, apart: {int(r.n_harmful_refused)} of {int(r.n_harmful)} refused (correct "
                f"refusals), {int(r.n_harmful_accepted)} accepted (harmful acceptances, the other error).")
    return out


def write_report(folder: Path, summary: pd.DataFrame, per_cluster: pd.DataFrame, figures: list[str], p, cp,
                 clusters_csv: str, model_names: list[str], decisions_csv: str | None, gate: list[str] = (),
                 pairs_csv: str | None = None, null: pd.DataFrame | None = None, sheet: Path | None = None) -> Path:
    """A short self-contained ``report.html``: the headline table, the verdicts (``null``: the nulls table of
    ``arm_verdict.null_tables``), the blind pairs sheet where one was written, the gate's drops and validated
    accuracy (``gate``: ``gate_verdict``'s line), the figures, the clusters."""
    by_arm = {} if null is None else {(x["model"], x["judge"]): x for _, x in null.iterrows()}
    verdicts = [arm_words(r, by_arm.get((r.model, r.judge))) for r in summary.itertuples()]
    body = [f"<h1>Semantic confusion: {html.escape(folder.name)}</h1>",
            f"<p>{html.escape(_caption(p, cp, model_names, decisions_csv))}</p>",
            f"<p>Clusters: {html.escape(str(clusters_csv))}; params: {html.escape(str(p.source_file))}.</p>",
            "<h2>Headline</h2>", headline(summary).to_html(index=False, escape=True),
            "<ul>" + "".join(f"<li>{html.escape(v)}</li>" for v in verdicts) + "</ul>"]
    body.append("<p>" + html.escape(label_rule(clusters_csv, pairs_csv)) + "</p>")
    if sheet is not None:
        body.append("<p>" + html.escape(
            f"Labels wanted: {sheet} lists the pairs of clusters whose events rest on the cosine alone (blind: seeds "
            "and paraphrases, no decision). Fill its label column with same or different intent and pass it as "
            "PAIRS=; those pairs are then decided by your labels.") + "</p>")
    body += [f"<p>{html.escape(line)}</p>" for line in gate]
    if decisions_csv:
        body.append("<p>Decisions only: the token signals (CI, drift, shift, contrast) are not available.</p>")
    body += [f'<h2>{html.escape(f)}</h2><img src="{html.escape(f)}" style="max-width:100%">' for f in figures]
    cols = ["model", "judge", "cluster", "n_prompts", "n_rejected", "n_confused", "frr", "confusion_rate", "ci", "depth"]
    body += ["<h2>Per cluster</h2>", per_cluster[cols].round(3).to_html(index=False, escape=True),
             "<p>Definitions: lib/refusal_audit/studies/confusion/DEFINITIONS.md.</p>"]
    path = folder / "report.html"
    path.write_text("<!doctype html><html><head><meta charset='utf-8'><title>confusion</title></head><body>"
                    + "\n".join(body) + "</body></html>", encoding="utf-8")
    return path
