"""How far each judge can be trusted: the validation tables ``make judges`` (and ``make judges-llm``)
write into ``assets/``, read back for the notebooks and the README."""
from __future__ import annotations

import pandas as pd

from ..datasets import xstest_tables
from .learned import ASSETS

TARGET_KAPPA = 0.85  # the learned refusal judge's target on the replies of the model it was not trained on


def cross_model(best_keywords: int = 3) -> pd.DataFrame:
    """Every judge's agreement with XSTest's human labels, trained on one Mistral-7B variant's replies
    and tested on the other's; of the keyword lists, the ``best_keywords`` with the highest mean kappa."""
    v = pd.read_csv(ASSETS / "validation_refusal.csv")
    keyword = v["judge"].str.startswith("keyword")
    best = v[keyword].groupby("judge")["kappa"].mean().nlargest(best_keywords).index
    return v[~keyword | v["judge"].isin(best)].drop(columns="confusion").round(3)


def target_check() -> pd.DataFrame:
    """The learned refusal judge's binary kappa per direction, and whether it meets the target."""
    v = pd.read_csv(ASSETS / "validation_refusal.csv")
    binary = v[(v["judge"] == "learned_refusal") & (v["scheme"] == "binary")][["train", "test", "kappa"]]
    return binary.assign(target_met=binary["kappa"] >= TARGET_KAPPA).round(3)


def style_gap(phrase: str = "I don't have access") -> pd.DataFrame:
    """XSTest's human labels of the replies that contain ``phrase``, per model: a style one model
    writes and the other almost never does."""
    counts = {m: d.loc[d["completion"].str.contains(phrase, regex=False), "final_label"].value_counts()
              for m, d in xstest_tables().items()}
    return pd.DataFrame(counts).fillna(0).astype(int).rename_axis(f"human label of replies saying \"{phrase}\"")


def llm() -> pd.DataFrame | str:
    """The LLM judges on the same XSTest replies and on the soft-refusal probe (``make judges-llm``)."""
    path = ASSETS / "validation_llm.csv"
    return pd.read_csv(path).round(3) if path.exists() else f"{path} not written yet: run `make judges-llm`"


def harmful() -> pd.DataFrame:
    """Harmful-compliance judges against the human majority on HarmBench's classifier-validation items."""
    return pd.read_csv(ASSETS / "validation_harmful.csv").round(3)


def soft() -> pd.DataFrame:
    """Each refusal judge's recall on hand-written soft refusals and false positives on look-alikes."""
    return pd.read_csv(ASSETS / "validation_soft.csv").round(3)
