"""A fifth study, for the test that adding a study touches no shared module (tests/test_studies.py).

It implements what every study implements (docs/usage.md, "Adding a study"): a params section (``Params``, ``check``,
``preflight``), one function per stage, ``audited_pools`` and ``summary``; and, like the policy study, names
its own tables (``TABLES``) and writes scores, not generations: a lexical scorer's share of words it lists.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from refusal_audit import stats
from refusal_audit.config import need

NAME = "toy"
TABLES = {"generate": "scores"}


@dataclass
class Params:
    prompts: list[str] = field(default_factory=lambda: ["Please explain rain.", "Tell me a joke."])
    words: list[str] = field(default_factory=lambda: ["please", "rain"])
    threshold: float = 0.2


def check(p, where: str) -> None:
    s = p.studies[NAME]
    need(len(s.prompts) >= 1 and len(set(s.prompts)) == len(s.prompts), where, "toy.prompts",
         "a non-empty list without repeats", s.prompts)


def preflight(p, models) -> None:
    pass


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
    import matplotlib.pyplot as plt

    from refusal_audit.plots import save

    fig, ax = plt.subplots()
    ax.bar(tables["flag_rate"]["judge"], tables["flag_rate"]["rate"])
    save(fig, "toy_flag_rate", folders)
    plt.close(fig)
    return ["toy_flag_rate"]


def audited_pools(p) -> list[str]:
    return []


def summary(p, stage: str, table) -> list:
    return [table.head()] if isinstance(table, pd.DataFrame) else [str(table)]
