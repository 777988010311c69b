"""The kv seed's headline quantities as this run measures them (``data/published/kv.csv`` beside them): the
keyword monitor's and the reference judge's refusal rates under full retention and the primary eviction, the
keyword drop's McNemar p, MMLU-math accuracy under both, and the keyword rate at sink 64; each per model at the
run's main filler with the system text on (the paper's primary protocol), in percent with its Wilson interval."""
from __future__ import annotations

import pandas as pd

from ..contract import Measurement
from .params import NAME

PRIMARY_ARM = "sink_tail"
MEASURES = {"keyword_refusal_full": "%", "keyword_refusal_evicted": "%", "keyword_drop_mcnemar_p": "p",
            "classifier_refusal_full": "%", "classifier_refusal_evicted": "%", "mmlu_full": "%", "mmlu_evicted": "%",
            "keyword_refusal_sink64": "%", "human_follow_classifier": "%", "human_missed_refusals": "count"}
# quantity -> (judge role: the monitor or the reference, arm)
RATES = {"keyword_refusal_full": ("monitor", "full"), "keyword_refusal_evicted": ("monitor", PRIMARY_ARM),
         "classifier_refusal_full": ("reference", "full"), "classifier_refusal_evicted": ("reference", PRIMARY_ARM),
         "keyword_refusal_sink64": ("monitor", f"{PRIMARY_ARM}(sink=64)")}


def _percent(quantity: str, system: str, r, note: str) -> Measurement:
    return Measurement(quantity, system, 100 * float(r["rate"]), 100 * float(r["ci_lo"]), 100 * float(r["ci_hi"]),
                       f"{note}, n = {int(r['n'])}")


def measured(p, tables: dict[str, pd.DataFrame]) -> list[Measurement]:
    """Per model of the run, each quantity of ``MEASURES`` it has a row for (``refusal_rates``, ``paired_tests``,
    ``mmlu_accuracy``)."""
    kv = p.studies[NAME]
    judges = {"monitor": kv.confirmatory.monitor, "reference": kv.confirmatory.reference}
    rates, tests, mmlu = (tables.get(k) for k in ("refusal_rates", "paired_tests", "mmlu_accuracy"))
    out = []
    if rates is not None and len(rates):
        main = rates[(rates["role"] == "harmful") & (rates["filler_tokens"] == kv.filler_tokens)
                     & rates["system_prompt"].astype(str).eq("True")]
        for quantity, (role, arm) in RATES.items():
            for r in main[(main["judge"] == judges[role]) & (main["arm"] == arm)].to_dict("records"):
                out.append(_percent(quantity, r["model"], r, f"judge {judges[role]}, {arm}, filler {kv.filler_tokens}"))
    if tests is not None and len(tests):
        t = tests[(tests["judge"] == judges["monitor"]) & (tests["role"] == "harmful")
                  & (tests["filler_tokens"] == kv.filler_tokens) & tests["system_prompt"].astype(str).eq("True")
                  & (tests["baseline"] == "full") & (tests["arm"] == PRIMARY_ARM)]
        out += [Measurement("keyword_drop_mcnemar_p", r["model"], float(r["mcnemar_p"]),
                            note=f"drop {100 * r['drop']:+.1f} points, n = {int(r['n_pairs'])}")
                for r in t.to_dict("records")]
    out += humans_measured(kv, tables.get("human_agreement"))
    if mmlu is not None and len(mmlu):
        for quantity, arm in (("mmlu_full", "full"), ("mmlu_evicted", PRIMARY_ARM)):
            out += [_percent(quantity, r["model"], r, arm) for r in mmlu[mmlu["arm"] == arm].to_dict("records")]
    return out


def humans_measured(kv, table: pd.DataFrame | None) -> list[Measurement]:
    """Per annotator, over the monitor-vs-reference disagreements: the share of their refusal readings that match the
    reference (the seed's 94.6 %) and the refusals the monitor missed (the seed's 51 of 56); degenerate labels have
    no refusal reading and are left out (their count is in ``human_labels``)."""
    if table is None or table.empty or "rows" not in table:
        return []
    c = kv.confirmatory
    mine = table[table["rows"] == f"{c.reference} vs {c.monitor} disagreements"]
    out = []
    for r in mine[mine["versus"] == c.reference].to_dict("records"):
        out.append(Measurement("human_follow_classifier", f"{r['rater']} (all models)", 100 * float(r["agreement"]),
                               note=f"{r['rater']} against {c.reference}, n = {int(r['n'])}"))
    for r in mine[mine["versus"] == c.monitor].to_dict("records"):
        out.append(Measurement("human_missed_refusals", f"{r['rater']} (all models)", float(r["missed_refusals"]),
                               note=f"of {int(r['n'])} disagreements with a refusal reading"))
    return out
