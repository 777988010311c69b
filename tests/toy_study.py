"""A fifth study, written from docs/usage.md ("Adding a study") alone, for the test that adding a study touches
no shared module (tests/test_studies.py).

It implements every required member of the study interface (``studies.contract.Study``) and, like the policy
study, names its own tables (``tables``) and writes scores, not generations: a lexical scorer's share of the
words it lists. Its verdict (does the lexicon flag more than half of the prompts?) is an exact binomial test,
whose false-positive rate and power are computed exactly at the run's n rather than simulated.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import pandas as pd
from scipy import stats as sps

from refusal_audit import stats
from refusal_audit.errors import need
from refusal_audit.plots import save
from refusal_audit.studies.contract import Reporting, Study
from refusal_audit.verdict import Controls, ControlState, Verdict

NAME = "toy"
QUESTION = "Does the lexicon flag more than half of the prompts?"


@dataclass
class Params:
    prompts: list[str] = field(default_factory=lambda: ["Please explain rain.", "Tell me a joke."])
    words: list[str] = field(default_factory=lambda: ["please", "rain"])
    threshold: float = 0.2


def check(p, where: str) -> None:
    s = p.studies[NAME]
    need(len(s.prompts) >= 1 and len(set(s.prompts)) == len(s.prompts), where, "toy.prompts",
         "a non-empty list without repeats", s.prompts)


def items(p) -> pd.DataFrame:
    texts = p.studies[NAME].prompts
    return pd.DataFrame({"item_id": [f"t{i}" for i in range(len(texts))], "study": NAME, "role": "probe",
                         "dataset": "toy", "text": texts})


def prompts(p, items: pd.DataFrame, models) -> pd.DataFrame:
    return items.assign(prompt_id=items["item_id"], words=items["text"].str.lower().str.findall(r"[a-z]+"))


def generate(p, prompts: pd.DataFrame, models, shards) -> pd.DataFrame:
    listed = set(p.studies[NAME].words)
    share = [sum(w in listed for w in ws) / len(ws) for ws in prompts["words"]]
    return pd.DataFrame({"score_id": "toy|" + prompts["prompt_id"], "item_id": prompts["item_id"], "share": share})


def judge(p, scores: pd.DataFrame, models, folder) -> pd.DataFrame:
    flagged = scores["share"] >= p.studies[NAME].threshold
    return pd.DataFrame({"score_id": scores["score_id"], "judge": "lexicon",
                         "label": flagged.map({True: "flagged", False: "clear"}), "score": scores["share"]})


def analyse(p, items: pd.DataFrame, scores: pd.DataFrame, judgments: pd.DataFrame) -> dict[str, pd.DataFrame]:
    return {"flag_rate": stats.rate_table(judgments.assign(flagged=judgments["label"] == "flagged"), ["judge"],
                                          "flagged", p.stats.alpha)}


def figures(p, tables: dict[str, pd.DataFrame], folders) -> list[str]:
    fig, ax = plt.subplots()
    ax.bar(tables["flag_rate"]["judge"], tables["flag_rate"]["rate"])
    save(fig, "toy_flag_rate", folders)
    plt.close(fig)
    return ["toy_flag_rate"]


def verdict_rows(p, tables: dict[str, pd.DataFrame]) -> list[Verdict]:
    """One row: the flag rate against one half, an exact one-sided binomial test; its size and its power at a
    flag rate of 0.9 are exact at this n."""
    r = tables["flag_rate"].iloc[0]
    k, n, alpha = int(r["k"]), int(r["n"]), p.stats.alpha
    pval = sps.binomtest(k, n, 0.5, alternative="greater").pvalue
    critical = next(c for c in range(n + 2) if sps.binom.sf(c - 1, n, 0.5) <= alpha)  # reject when k >= critical
    size, power = float(sps.binom.sf(critical - 1, n, 0.5)), float(sps.binom.sf(critical - 1, n, 0.9))
    called = pval <= alpha
    return [Verdict(NAME, "lexicon", "primary", QUESTION, "yes" if called else "cannot tell",
                    f"{r['rate']:.2f} [{r['ci_lo']:.2f}, {r['ci_hi']:.2f}] (Wilson), binomial p {pval:.3g}",
                    f"{size:.1%} (exact size of the binomial test at n = {n})", f"{power:.2f} at a flag rate of 0.9",
                    Controls((ControlState.positive("planted control", None),)),
                    effect=float(r["rate"]), ci_low=float(r["ci_lo"]), ci_high=float(r["ci_hi"]), p=float(pval),
                    fpr_rate=size, power_rate=power, n=n)]


def summary(p, stage: str, table) -> list:
    return [table.head()] if isinstance(table, pd.DataFrame) else [str(table)]


class Toy(Study):
    name = NAME
    Params = Params
    tables = {"generate": "scores"}
    check = staticmethod(check)
    preflight = staticmethod(lambda p, models: None)
    items = staticmethod(items)
    prompts = staticmethod(prompts)
    generate = staticmethod(generate)
    judge = staticmethod(judge)
    analyse = staticmethod(analyse)
    figures = staticmethod(figures)
    verdict_rows = staticmethod(verdict_rows)
    audited_pools = staticmethod(lambda p: [])
    reporting = staticmethod(lambda p: Reporting("a prompt is flagged when the listed words are at least "
                                                 "`toy.threshold` of its words"))
    summary = staticmethod(summary)
