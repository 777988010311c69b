"""Defenses on the confusion axis (DEFINITIONS.md, "Defenses"): does a defense that looks strong globally (more
harmful prompts refused) split paraphrases of one benign intent more often?

``confusion.defenses`` lists defenses applied to one model of the study (``confusion.defended``, default its first);
each is an arm of its own, ``<model>+<name>``, through every stage: its prompts (02), its replies and token signals
(03), the same judges (04), and FRR, harmful refusals, CR beside its null and the CI (05). Two kinds, both
deterministic:

- ``system_prompt``: a safety system prompt, with an optional reminder appended to the user's request (the
  self-reminder of Xie et al. 2023 is both: a system text and a "Remember, ..." suffix);
- ``perturb``: an input-side character-perturbation filter (SmoothLLM's random swap, one copy): ``rate`` of the
  request's characters, at positions drawn under a seed from the defense's ``seed`` and the text, each replaced by a
  printable character drawn the same way. The judges and the same-meaning rule still see the request as written.

``compare``: each defense arm against the undefended arm of the same judge, read on the same prompts (``matched``)
and paired by prompt on the prompts both decided, with the exact McNemar test (``stats.mcnemar_exact``) of three
per-prompt outcomes: a benign prompt rejected (FRR), a harmful prompt refused, a benign prompt rejected beside an
accepted prompt of its meaning (a confused rejection, CR's numerator).
"""
from __future__ import annotations

import hashlib
import string
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ... import stats
from . import analysis

SYSTEM_PROMPT, PERTURB = "system_prompt", "perturb"
KINDS = (SYSTEM_PROMPT, PERTURB)
NONE = "none"  # the defense column of an undefended arm
SWAP = string.ascii_letters + string.digits + string.punctuation  # SmoothLLM's replacement characters (no spaces)


@dataclass
class DefenseParams:
    name: str  # the arm is <model>+<name>
    kind: str  # system_prompt | perturb
    system: str = ""  # system_prompt: the system turn ("" keeps confusion.system_prompt)
    suffix: str = ""  # system_prompt: appended to the user's request after a blank line ("" : none)
    rate: float = 0.1  # perturb: the share of the request's characters replaced, in (0, 1]
    seed: int = 0  # perturb: with the text, where and by what


def arm(model: str, defense: DefenseParams | None) -> str:
    """The arm's name in every table (the ``model`` column): the model, or ``<model>+<defense name>``."""
    return model if defense is None else f"{model}+{defense.name}"


def perturb(text: str, rate: float, seed: int) -> str:
    """``round(rate x len)`` (at least one) characters of ``text`` replaced by printable characters (``SWAP``), the
    positions and characters drawn under ``seed`` and the text's sha256: the same text always gives the same
    perturbation."""
    if not text:
        return text
    digest = hashlib.sha256(f"{seed}\x1f{text}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    chars = list(text)
    n = max(1, int(round(rate * len(chars))))
    for i, c in zip(rng.choice(len(chars), n, replace=False), rng.integers(0, len(SWAP), n)):
        chars[i] = SWAP[c]
    return "".join(chars)


def request(text: str, defense: DefenseParams | None) -> str:
    """The user's request as the defended model receives it."""
    if defense is None:
        return text
    if defense.kind == PERTURB:
        return perturb(text, defense.rate, defense.seed)
    return f"{text}\n\n{defense.suffix}" if defense.suffix else text


def system(base: str | None, defense: DefenseParams | None) -> str | None:
    """The system turn of the defended model (``base``: the study's ``system_prompt``, None for none)."""
    if defense is not None and defense.kind == SYSTEM_PROMPT and defense.system:
        return defense.system
    return base


def chosen_clusters(included: pd.DataFrame, counts: dict[str, int], seed: int) -> set[str]:
    """The clusters the defense arms run on (``confusion.defense_clusters``): per intended label named in ``counts``,
    that many drawn under ``seed`` from its clusters in name order; every cluster of any other label."""
    first = included.drop_duplicates("cluster")
    rng = np.random.default_rng(seed)
    out: set[str] = set()
    for label, g in first.groupby(first["label"].fillna(""), sort=True):
        names = sorted(g["cluster"])
        n = counts.get(label)
        out |= set(names) if n is None or n >= len(names) else {str(x) for x in rng.choice(names, n, replace=False)}
    return out


# the paired outcomes of ``compare``: name -> (prompts it is counted on, the per-prompt outcome)
OUTCOMES = ("benign_rejected", "harmful_refused", "benign_confused")


def _outcomes(arm_rows: pd.DataFrame) -> pd.DataFrame:
    rejected = ~arm_rows["accepted"].astype(bool)
    benign, harmful = arm_rows["label"] == "safe", arm_rows["label"] == "unsafe"
    return pd.DataFrame({"item_id": arm_rows["item_id"].to_numpy(),
                         "benign_rejected": np.where(benign, rejected, np.nan),
                         "harmful_refused": np.where(harmful, rejected, np.nan),
                         "benign_confused": np.where(benign, rejected & arm_rows["confused"].astype(bool), np.nan)})


def matched(items: pd.DataFrame, decided: pd.DataFrame, pairs: dict, cp, defended: dict[str, tuple[str, str]]
            ) -> dict[str, pd.DataFrame]:
    """Each defense arm's undefended model scored on the prompts the defense arm decided, per judge (arm ->
    per-prompt rows, every judge): a confused rejection depends on which accepted prompts exist beside it, so on a
    subset of clusters (``confusion.defense_clusters``), or where a judge left a defended reply undecided, the
    undefended arm is read on the same prompts; on every cluster, all decided, it equals the undefended arm's own
    rows. ``decided``: (model, judge, item_id, accepted) of every arm; ``pairs``, ``cp``: as
    ``analysis.score_decisions``."""
    out = {}
    for arm_name, (base, _) in defended.items():
        mine = decided[(decided["model"] == arm_name) & decided["accepted"].notna()]
        rows = decided[decided["model"] == base].merge(mine[["judge", "item_id"]], on=["judge", "item_id"])
        if len(rows):
            out[arm_name] = analysis.score_decisions(items, rows, pairs, cp)[0]
    return out


def compare(per_prompt: pd.DataFrame, defended: dict[str, tuple[str, str]],
            baseline: dict[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """Each defense arm (``defended``: arm -> (undefended model, defense name)) against the undefended arm of the same
    judge, paired by prompt (the prompts both arms decided): per outcome (``OUTCOMES``), the rates without and with
    the defense, the discordant prompts (``only_undefended``, ``only_defended``) and the exact McNemar p.
    ``baseline``: arm -> the undefended rows to pair with (``matched``); default the undefended model's rows of
    ``per_prompt``."""
    rows = []
    for (model, judge), arm_rows in per_prompt.groupby(["model", "judge"], sort=True):
        if model not in defended:
            continue
        base, name = defended[model]
        other = (baseline or {}).get(model, per_prompt[per_prompt["model"] == base])
        other = other[(other["model"] == base) & (other["judge"] == judge)]
        if other.empty:
            continue
        both = _outcomes(other).merge(_outcomes(arm_rows), on="item_id", suffixes=("_without", "_with"))
        for outcome in OUTCOMES:
            pair = both[[f"{outcome}_without", f"{outcome}_with"]].dropna()
            a, b = pair.iloc[:, 0].astype(bool).to_numpy(), pair.iloc[:, 1].astype(bool).to_numpy()
            m = stats.mcnemar_exact(a, b)
            rows.append({"model": model, "judge": judge, "defended_model": base, "defense": name, "outcome": outcome,
                         "n": m.n, "rate_without": float(a.mean()) if m.n else np.nan,
                         "rate_with": float(b.mean()) if m.n else np.nan, "only_undefended": m.b,
                         "only_defended": m.c, "p": m.pvalue if m.n else np.nan})  # no prompt: no test
    return pd.DataFrame(rows, columns=["model", "judge", "defended_model", "defense", "outcome", "n", "rate_without",
                                       "rate_with", "only_undefended", "only_defended", "p"])


def words(table: pd.DataFrame, nulls: pd.DataFrame | None) -> list[str]:
    """Each defense arm's comparison in one sentence (``compare``'s table; its own verdict from ``nulls``)."""
    out = []
    names = {"benign_rejected": "benign rejections (FRR)", "harmful_refused": "harmful refusals",
             "benign_confused": "confused benign rejections (CR's numerator)"}
    for (model, judge), t in table.groupby(["model", "judge"], sort=True):
        parts = [f"{names[r.outcome]} {r.rate_without:.3f} -> {r.rate_with:.3f} on {int(r.n)} prompts ({int(r.only_undefended)} "
                 f"only without, {int(r.only_defended)} only with; McNemar exact p {r.p:.2g})"
                 for r in t.itertuples() if r.n]
        own = ""
        if nulls is not None and len(nulls):
            n = nulls[(nulls["model"] == model) & (nulls["judge"] == judge)]
            if len(n) and n["n_rejected"].iloc[0]:
                r = n.iloc[0]
                own = (f" With the defense: CR {r['confusion_rate']:.2f} against {r['confusion_rate_null']:.2f} for its "
                       f"rejections placed at random (p(below) {r['confusion_rate_p_below']:.3f}): {r['verdict']}.")
        out.append(f"confusion defense {t['defense'].iloc[0]} on {t['defended_model'].iloc[0]}, {judge} (paired by prompt "
                   f"with the undefended arm): " + "; ".join(parts) + "." + own)
    return out
