"""The frames seed's headline quantities as this run measures them (``data/published/frames.csv`` beside them):
the frame contrasts in points (risk difference x 100, with its item-bootstrap interval, ``contrasts``) and their
p-values (the confirmatory GEE's, before Holm, ``confirmatory``), per model, on every item, with the primary
outcome judge."""
from __future__ import annotations

import pandas as pd

from ..contract import Measurement
from .params import NAME

# quantity -> (outcome, contrast, a p-value?)
QUANTITIES = {"refusal_E-N": ("refusal", "E-N", False), "refusal_E-N_p": ("refusal", "E-N", True),
              "harmful_compliance_E-D": ("harmful_compliance", "E-D", False),
              "harmful_compliance_E-D_p": ("harmful_compliance", "E-D", True),
              "refusal_E-D": ("refusal", "E-D", False)}
MEASURES = {q: "p" if is_p else "points" for q, (_, _, is_p) in QUANTITIES.items()}


def measured(p, tables: dict[str, pd.DataFrame]) -> list[Measurement]:
    """Per model, each quantity of ``QUANTITIES`` on the subset ``all`` under the first confirmatory judge."""
    judge = p.studies[NAME].confirmatory.judges[0]
    contrasts, conf = tables.get("contrasts"), tables.get("confirmatory")
    out = []
    for quantity, (outcome, contrast, is_p) in QUANTITIES.items():
        if is_p and conf is not None and len(conf):
            rows = conf[(conf["judge"] == judge) & (conf["outcome"] == outcome) & (conf["subset"] == "all")
                        & (conf["contrast"] == contrast) & conf["family"].astype(str).str.startswith("confirmatory")]
            out += [Measurement(quantity, r["model"], float(r["p"]),
                                note=f"GEE {r['scale']}, Holm {r['p_holm']:.3g}, {int(r['n_items'])} items")
                    for r in rows.to_dict("records") if pd.notna(r["p"])]
        elif not is_p and contrasts is not None and len(contrasts):
            rows = contrasts[(contrasts["judge"] == judge) & (contrasts["outcome"] == outcome)
                             & (contrasts["subset"] == "all") & (contrasts["contrast"] == contrast)]
            out += [Measurement(quantity, r["model"], 100 * float(r["delta"]), 100 * float(r["ci_lo"]),
                                100 * float(r["ci_hi"]), note=f"{int(r['n_items'])} items, judge {judge}")
                    for r in rows.to_dict("records")]
    return out
