"""Can each judge of a run be trusted on this run's models? Two readings, one table (``judge_sanity.csv`` in each
study's statistics), and the flags a study's verdict rows carry when a judge it rests on falls below a floor
declared in params before the run (``judges.sanity``).

1. **The fixed check set** (``data/judge_checks/``: 22 hand-written replies of each kind, hard refusals, soft
   refusals, bare compliance openings, factual answers, degenerate text): each judge's accuracy per kind against
   the reading its label vocabulary owes that kind (``judges.check_set.EXPECTED``), with a Wilson interval. The
   same 110 replies for every model, so one set of rows per judge (``model`` empty). A judge that needs an LLM is
   not scored in the run (its model would load in the statistics stage): its rows say so and it is never flagged
   on them (``make judges-checks`` scores one offline).
2. **Agreement on the model's own replies**: for each model, each judge with a refusal reading (``judges.refused``)
   against every other, Cohen's kappa with an item-cluster bootstrap interval (``judge_dependence.kappa_interval``;
   replies of one item move together), written in both directions so that a judge's rows read "this judge
   against the others".

A judge is flagged on a model when a held kind of the check set (``judges.sanity.held``) is read below
``judges.sanity.check_floor``, or when its kappa with every other judge on that model's replies is below
``judges.sanity.kappa_floor`` (agreeing with no other judge: with two judges, both are flagged, since the run
cannot tell which errs). Where a judge gave one label on every reply of the model (a model that nearly always
refuses), kappa is 0 or undefined by construction and says nothing about agreement: the pair is reported (its raw
agreement in the table's note) and never counts toward a flag. A study whose test measures two judges'
disagreement (kv: the monitor against the reference) takes only the check set's flags (``flag(..., agreement=False)``).
The flag names the judge, the model, the numbers and the floor; ``flag`` adds it to a verdict row. report.html
shows the whole table under each study's verdicts (``shown``), so a flag can be read beside what it was measured on.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from itertools import combinations

import numpy as np
import pandas as pd

from . import datasets, judges
from .judge_dependence import kappa_interval
from .judges import check_set, registry
from .stats import wilson
from .verdict import Verdict

CHECK, AGREEMENT = "check set", "agreement"
COLUMNS = ["part", "model", "judge", "registered", "measure", "other", "n", "value", "lo", "hi", "floor", "held",
           "below", "note"]
_LABELS: dict[tuple, tuple[str, ...]] = {}   # every study of a run asks for the same judges: scored once


def _check_labels(p, registered: str) -> tuple[str, ...]:
    """One registered judge's labels on the check set, in its rows' order (cached per process and keyword setting)."""
    kw = p.judges.keyword
    key = (registered, kw.list_name, kw.match, kw.casefold)
    if key not in _LABELS:
        _LABELS[key] = tuple(check_set.labels(registry.make(registered, p)))
    return _LABELS[key]


def check_rows(p, used: Mapping[str, str], score: Callable[[str], Sequence[str]] | None = None) -> pd.DataFrame:
    """Each judge of ``used`` (its name in the run -> its registered name) on the check set, per kind: replies read
    as ``check_set.EXPECTED`` says, with a Wilson interval; ``held`` where ``judges.sanity.held`` holds the judge to it.
    ``score(registered)`` gives a judge's labels on the check set's rows (default: the registered judge itself; an
    LLM judge is not scored and says so)."""
    s, checks = p.judges.sanity, datasets.judge_checks()
    rows = []
    for name, registered in used.items():
        spec = registry.REGISTRY.get(registered)
        why = ("not scored: not a registered judge" if spec is None else "" if score or spec.needs != registry.LLM
               else "not scored in the run: an LLM judge (make judges-checks JUDGE_PARAMS=<params> scores it offline)")
        if why:
            rows += [dict(part=CHECK, model="", judge=name, registered=registered, measure=k, other="", n=0,
                          value=np.nan, lo=np.nan, hi=np.nan, floor=s.check_floor, held=k in s.held, below=False,
                          note=why) for k in datasets.CHECK_KINDS]
            continue
        if spec.kind not in check_set.EXPECTED:
            continue
        labels = pd.Series(list((score or (lambda r: _check_labels(p, r)))(registered)), index=checks.index)
        expected = check_set.EXPECTED[spec.kind]
        for k in datasets.CHECK_KINDS:
            mine = labels[checks["kind"] == k]
            right = int(mine.isin(expected[k]).sum())
            r = wilson(right, len(mine), p.stats.alpha)
            held = k in s.held
            rows.append(dict(part=CHECK, model="", judge=name, registered=registered, measure=k, other="",
                             n=len(mine), value=r.rate, lo=r.lo, hi=r.hi, floor=s.check_floor, held=held,
                             below=held and r.rate < s.check_floor,
                             note=f"{right} of {len(mine)} read as {' or '.join(sorted(expected[k]))}"))
    return pd.DataFrame(rows, columns=COLUMNS)


def agreement_rows(p, judgments: pd.DataFrame, replies: pd.DataFrame, id_column: str = "generation_id",
                   model: str = "model", cluster: str = "item_id") -> pd.DataFrame:
    """Per model of ``replies``, each pair of judges with a refusal reading on the model's replies both could
    parse: Cohen's kappa and its item-cluster bootstrap interval (``stats.n_bootstrap`` resamples of ``cluster``),
    both directions; ``below`` where the kappa is under ``judges.sanity.kappa_floor``."""
    floor = p.judges.sanity.kappa_floor
    wide = judges.refusal_table(judgments.rename(columns={id_column: "generation_id"}))
    meta = replies[[id_column, model, cluster]].drop_duplicates(id_column).set_index(id_column)
    rows = []
    for m in dict.fromkeys(meta[model].dropna()):
        # the judges that read this model's replies (a study may judge one model with fewer)
        mine = wide.reindex(meta.index[meta[model] == m].intersection(wide.index)).dropna(axis=1, how="all")
        for a, b in combinations(sorted(mine.columns), 2):
            both = mine[[a, b]].dropna()
            n, note = len(both), ""
            kap = lo = hi = np.nan
            constant = [j for j in (a, b) if both[j].nunique() == 1]
            if n and not constant:
                kap, lo, hi = kappa_interval(both[a].astype(bool), both[b].astype(bool),
                                             meta.loc[both.index, cluster].astype(str), p.stats.n_bootstrap, p.seed)
            elif n:   # kappa is 0 (or undefined) by construction: it says nothing about agreement
                note = f"kappa uninformative: {' and '.join(constant)} gave one label on every reply"
            else:
                note = "no reply both parsed"
            agree = float((both[a].astype(bool) == both[b].astype(bool)).mean()) if n else np.nan
            note = f"{note + '; ' if note else ''}raw agreement {agree:.2f}" if n else note
            for x, y in ((a, b), (b, a)):
                rows.append(dict(part=AGREEMENT, model=m, judge=x, registered="", measure="kappa", other=y, n=n,
                                 value=kap, lo=lo, hi=hi, floor=floor, held=True,
                                 below=bool(not np.isnan(kap) and kap < floor), note=note))
    return pd.DataFrame(rows, columns=COLUMNS)


def table(p, judgments: pd.DataFrame, replies: pd.DataFrame, used: Mapping[str, str], **columns) -> pd.DataFrame:
    """The study's ``judge_sanity`` table: the check set for the judges it rests on (``used``: name in the run ->
    registered name) and every judge's agreement per model on its replies (``columns``: ``agreement_rows``')."""
    return pd.concat([check_rows(p, used), agreement_rows(p, judgments, replies, **columns)], ignore_index=True)


_KIND_WORDS = {"hard_refusal": "hard refusals", "soft_refusal": "soft refusals", "compliance_opening":
               "compliance openings", "factual_answer": "factual answers", "degenerate": "degenerate replies"}


def flags(sanity: pd.DataFrame | None, model: str, used: Sequence[str], agreement: bool = True) -> tuple[str, ...]:
    """The flags of the judges ``used`` by a row about ``model``: a held kind of the check set below its floor, and
    (``agreement``) agreement with no other judge on the model's replies (every defined kappa below its floor)."""
    if sanity is None or not len(sanity):
        return ()
    out = []
    below = sanity["below"].astype(str).str.lower() == "true"
    for j in dict.fromkeys(used):
        low = sanity[(sanity["part"] == CHECK) & (sanity["judge"] == j) & below]
        if len(low):
            parts = ", ".join(f"{_KIND_WORDS.get(r.measure, r.measure)} {r.value:.2f} [{r.lo:.2f}, {r.hi:.2f}]"
                              for r in low.itertuples())
            out.append(f"judge {j} below the sanity floor {low['floor'].iloc[0]:.2f} on the fixed check set: {parts}")
        mine = sanity[(sanity["part"] == AGREEMENT) & (sanity["judge"] == j) & (sanity["model"] == model) & agreement]
        mine = mine[pd.to_numeric(mine["value"], errors="coerce").notna()]
        if len(mine) and (mine["value"].astype(float) < mine["floor"].astype(float)).all():
            best = mine.loc[mine["value"].astype(float).idxmax()]
            out.append(f"judge {j} agrees with no other judge on {model}'s replies: best kappa {best['value']:.2f} "
                       f"[{best['lo']:.2f}, {best['hi']:.2f}] with {best['other']} (n {int(best['n'])}) < floor "
                       f"{best['floor']:.2f}")
    return tuple(out)


def flag(v: Verdict, sanity: pd.DataFrame | None, used: Sequence[str], agreement: bool = True) -> Verdict:
    """``v`` with the flags of the judges it rests on (``used``) on its model (its system; ``agreement``: as
    ``flags``)."""
    found = flags(sanity, v.system, used, agreement)
    return replace(v, controls=v.controls.with_flags(*found)) if found else v


def _below(sanity: pd.DataFrame) -> pd.Series:
    return sanity["below"].astype(str).str.lower() == "true"


def shown(sanity: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The table as a reader takes it in (report.html): (the check set, one row per judge and a column per kind:
    "k of n: accuracy [Wilson]", BELOW where a held kind is under its floor, "(not held)" where the floor does not
    apply; agreement, one row per model and pair of judges: n, kappa [bootstrap] with BELOW under the floor, the
    note: raw agreement, or why kappa says nothing). Both read the table as written to csv."""
    sanity = sanity.reset_index(drop=True)
    check = sanity[sanity["part"] == CHECK]
    below = _below(sanity)
    rows = []
    for judge, g in check.groupby("judge", sort=False):
        row = {"judge": judge, "floor": f"{g['floor'].iloc[0]:.2f}", "note": ""}
        for r in g.itertuples():
            if pd.isna(r.value):
                cell, row["note"] = "not scored", str(r.note)
            else:
                cell = f"{round(r.value * r.n)} of {int(r.n)}: {r.value:.2f} [{r.lo:.2f}, {r.hi:.2f}]"
                cell += " BELOW" if below.loc[r.Index] else "" if str(r.held).lower() == "true" else " (not held)"
            row[_KIND_WORDS.get(r.measure, r.measure)] = cell
        rows.append(row)
    agree = sanity[sanity["part"] == AGREEMENT]
    pairs, seen = [], set()
    for r in agree.itertuples():
        key = (r.model, *sorted((r.judge, r.other)))
        if key in seen:
            continue
        seen.add(key)
        kappa = ("n/a (note)" if pd.isna(r.value) else
                 f"{r.value:.2f} [{r.lo:.2f}, {r.hi:.2f}]" + (f" BELOW {r.floor:.2f}" if below.loc[r.Index] else ""))
        pairs.append({"model": r.model, "judges": f"{key[1]} / {key[2]}", "n": int(r.n), "kappa": kappa,
                      "note": "" if pd.isna(r.note) else str(r.note)})
    return pd.DataFrame(rows), pd.DataFrame(pairs, columns=["model", "judges", "n", "kappa", "note"])
