"""What the confusion study shows: the notebooks' summaries, the figures and their caption, the
reporting items and the pools the contamination audit reads."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ... import judges, report
from ...config import testbed_note
from .params import NAME, REFUSING, SAFETY_POOL, decision_judges, defended_model
from .verdicts import verdicts


# --- 06 figures ----------------------------------------------------------------------------------------
def caption(p) -> str:
    c = p.studies[NAME]
    drawn = ", ".join(f"{n} {label}" for label, n in c.defense_clusters.items())
    where = f"at most {drawn} clusters" if drawn else "every cluster"
    defended = (f" (defense arms <model>+<defense>: {', '.join(d.name for d in c.defenses)} on "
                f"{defended_model(c)}, on {where})" if c.defenses else "")
    return (testbed_note(p, c.models) + f"Models {', '.join(c.models)}{defended}; same meaning: same cluster or, "
            "same label, "
            f"a known label of the pair of clusters (twin or look-alike), else cosine > tau {c.gates.tau}; "
            f"k {c.metrics.k}, scope "
            f"{c.metrics.scope}; gates tau {c.gates.tau}, delta {c.gates.delta}; bootstrap 95 % CIs over intents; "
            f"run {p.run_name!r}. Aggregates only: no reply is shown.")


def figures(p, tables: dict[str, pd.DataFrame], folders: list[Path]) -> list[str]:
    """The headline (Confusion Rate beside its null, with the verdict), the per-cluster confusion map, the CI
    distribution, FRR vs Confusion Rate."""
    from ...plots import save  # lazy: keeps seaborn off this module
    from . import charts as cf  # lazy: keeps matplotlib, seaborn off this module
    text = caption(p)
    drawn = {}
    if tables.get("nulls") is not None and len(tables["nulls"]):  # the headline: the verdict's statistic and its null
        drawn["confusion_rate_vs_null"] = cf.rate_vs_null(tables["frr_vs_cr"], tables["nulls"], text)
    drawn |= {"confusion_map": cf.confusion_map(tables["prompts"], tables.get("paraphrases"), text),
             "confusion_ci_distribution": cf.ci_distribution(tables["prompts"], text),
             "confusion_frr_vs_rate": cf.frr_vs_rate(tables["frr_vs_cr"], tables.get("planted"), text)}
    for name, fig in drawn.items():
        save(fig, name, folders)
    return list(drawn)


# --- the report's three items ---------------------------------------------------------------------------
CONTAMINATION_UNIT = "cluster"  # one contaminated member takes its whole paraphrase cluster out


def audited_pools(p) -> list[str]:
    """Pools whose clusters are excluded before the statistics: the measured models' (the organism's,
    when measured). The learned judges are instruments here (validated out of sample in 04); they
    trained on replies to every XSTest prompt, so auditing their pool would drop every XSTest cluster."""

    return report.pools_for(p, list(p.studies[NAME].models), learned_judges=False)


def reporting(p) -> dict[str, str]:
    """The seed floor and the operational definitions the confusion study's numbers rest on."""
    c = p.studies[NAME]
    lines = [f"* `{j}`: {judges.definition(j)}" for j in decision_judges(p) if j in judges.registry.REGISTRY]
    m, g = c.metrics, c.gates
    return {
        "definition": (
            "**Decision** (ParaGuard's g(x)): REJECT when the judge calls the greedy reply a refusal (a full or "
            "partial refusal under XSTest's scheme), ACCEPT otherwise; an unparseable verdict is no decision. Each "
            "judge gives its own decision set:\n\n" + "\n".join(lines) + "\n\n"
            f"**Confusion event**: an accepted a and a rejected r (scope `{m.scope}`) of the same meaning: the same "
            f"cluster (both passed the gate against its seed) or, in another cluster of the same intended label, MiniLM "
            f"cosine sim(a, r) > theta = the gate's tau {g.tau}. **Confusion Rate**: rejected prompts with at least "
            f"one event / rejected prompts (0 without rejections). **Confusion Index** CI(r) (the paper's): mean over "
            f"N_k(r), the k = {m.k} nearest accepted prompts of the corpus (same cluster or label), of CS(a, r) = "
            f"weighted mean ({list(m.weights)}) of token drift "
            f"({m.alignment} alignment of layer {m.layer} hidden states, user-turn tokens), next-token shift "
            f"({m.shift} of the first reply token's distributions) and perplexity contrast (1 - exp(-|delta log "
            f"ppl| / {m.contrast_scale})). **Confusion Depth** ({m.depth_method}, {m.depth_k} neighbours): how far "
            "inside the accepted region a rejection sits. **FRR**: rejected / prompts on the benign clusters. "
            f"**Gates**: cosine to the seed >= {g.tau}, token Jaccard distance >= {g.delta}, the safety ensemble "
            f"(P(unsafe) threshold {g.safety_threshold}, margin {g.safety_margin}) does not read the paraphrase on the "
            f"other side of its cluster's {'intended label' if g.safety_against == 'label' else 'seed'} (a class "
            f"validated below {g.min_accuracy} is held to its seed's read), near-duplicates (shingle Jaccard >= "
            f"{g.near_duplicate}) collapse to one. Full "
            "definitions: `lib/refusal_audit/studies/confusion/DEFINITIONS.md`."),
        "seed_floor": (
            "Nothing with a seed is trained. The safety gate's three prompt classifiers are fitted at run time, "
            "deterministically (logistic regression, lbfgs; a nearest-neighbour vote), on " + SAFETY_POOL + ", after "
            "every reference prompt that is the same request as a gated prompt is left out (exact after "
            "normalisation, or cosine >= 0.85); `safety_left_out` in the items counts them. Greedy decoding is "
            "deterministic; the organism was trained under one seed and its seed floor is not measured."),
    }


# --- what the notebooks show ----------------------------------------------------------------------------
def _validation_table() -> pd.DataFrame:
    from .safety import VALIDATION  # lazy: keeps torch off this module

    return pd.read_csv(VALIDATION).set_index(["held_out", "classifier"]).round(3)


def summary(p, stage: str, table) -> list:
    """What a notebook shows for this study after ``stage`` (tables and short texts; never a reply)."""
    c = p.studies[NAME]
    flag = testbed_note(p, c.models, markdown=True)
    if stage == "items":
        para = table[table["member"] > 0]
        gates = para.groupby("dataset")[["gate_cosine", "gate_jaccard", "gate_safety", "included"]].mean()
        side = (f"its cluster's label (a class validated below {c.gates.min_accuracy} is held to its seed's read; "
                "`gate_side`)" if c.gates.safety_against == "label" else "its seed's read")
        return [table.groupby(["dataset", "label"]).agg(clusters=("cluster", "nunique"), prompts=("item_id", "size"),
                                                        included=("included", "sum")),
                "Share of paraphrases passing each gate (seeds are the reference):", gates.round(3),
                (f"Safety ensemble: fitted on {SAFETY_POOL}, minus {int(table['safety_left_out'].iloc[0])} "
                 "reference prompts that are the same request as a gated prompt (left out before fitting); the "
                 f"gate holds each paraphrase to {side}. "
                 "Its validation on sets it never trained on (`assets/safety_validation.csv`; an ensemble fitted "
                 "without the held-out set reads it):"), _validation_table()]
    if stage == "prompts":
        return [table.assign(user_tokens=table["user_stop"] - table["user_start"]).groupby("model").agg(
            prompts=("prompt_id", "size"), tokens=("prompt_tokens", "mean"), user_tokens=("user_tokens", "mean"),
            span_exact=("span_exact", "mean")).round(2)]
    if stage == "generate":
        return [flag + "Replies are not shown (aggregates only).", table.groupby("model").agg(
            rows=("generation_id", "size"), new_tokens=("new_tokens", "mean"),
            stopped_at_eos=("finish", lambda s: (s == "eos").mean()), log_ppl=("log_ppl", "mean")).round(3)]
    if stage == "judge":
        return [table.groupby(["judge", "label"]).size().unstack(fill_value=0),
                "Agreement between the decision judges:", judges.agreement(table, REFUSING)]
    if stage == "analyse":
        cols = [x for x in ("model", "judge", "n_clusters", "frr", "frr_lo", "frr_hi", "confusion_rate",
                            "confusion_rate_lo", "confusion_rate_hi", "clusters_mixed", "clusters_all_rejected",
                            "ci", "depth") if x in table["frr_vs_cr"]]
        shown = [flag + "FRR (benign clusters) against the Confusion Rate, per model and judge (bootstrap 95 % CIs "
                 "over intents):", table["frr_vs_cr"][cols].round(3),
                 "Pairs of arms where FRR and Confusion Rate order them differently:",
                 table["arm_pairs"][table["arm_pairs"]["disagree"]].round(3) if "arm_pairs" in table else "none",
                 "Gate pass rates:", table["gates"][table["gates"]["dataset"] == "all"].round(3),
                 "Paraphrases dropped per rule:", table["gate_drops"][table["gate_drops"]["label"] == "all"],
                 "The safety gate's validated accuracy per class (A) and label error (E):",
                 table["gate_accuracy"].round(3),
                 "Planted control (known answers, recovered by the same code):", table["planted"].round(4),
                 "Scope and harmful-twin controls (expected from plain loops, found by the study's scoring):",
                 table["controls"].round(4) if "controls" in table else "none"]
        if "nulls" in table:
            shown += ["Confusion Rate and CI beside their random-placement nulls, per arm (benign prompts; nulls.py):",
                      table["nulls"].round(3)]
        if "defenses" in table:
            shown += ["Each defense arm against the undefended arm of the same judge, paired by prompt (exact McNemar; "
                      "defenses.py):", table["defenses"].round(3)]
        if "same_meaning_rule" in table:
            rule = table["same_meaning_rule"]
            shown += ["The same-meaning rule on hand-labelled cross-cluster pairs (meaning.py):",
                      rule[rule["group"] == "all"].round(3)]
        return shown + ["**Verdicts**", "\n".join(f"- {v}" for v in verdicts(p, table))]
    if stage == "figures":
        return [f"figures: {', '.join(table)}"]
    return []


# what each notebook says this study does at its stage (the notebooks list the enabled studies)
NOTEBOOK_NOTES = {
    'items': (
        'paraphrase clusters (a seed intent and its paraphrases) from `data/confusion/`, gated by embedding '
        'cosine to the seed, token Jaccard distance and a safety ensemble; a rejected paraphrase is kept with'
        ' its reason.'),
    'prompts': (
        "each prompt rendered once per model; the user turn's token span is kept for the token-level signals."),
    'generate': (
        'one greedy reply per prompt and model, and one batched forward pass per prompt for the token-level '
        'signals (cached).'),
    'judge': (
        'each refusal judge gives its own accept/reject decision set.'),
    'analyse': (
        "FRR against Confusion Rate, Confusion Index and Depth over each model's whole corpus of accepted "
        'prompts (`studies/confusion/DEFINITIONS.md`), with cluster-bootstrap CIs over intents.'),
    'figures': (
        'the per-cluster confusion map, the CI distribution, FRR against Confusion Rate.'),
}
