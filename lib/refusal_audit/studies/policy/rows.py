"""The policy study's rows of the run's verdict table (``verdict.Verdict``): every trained arm at the run seed and
every released or user's guard (primary), the synthetic guards of known answer (controls) and the rule's
calibration, every text cell generated from ``guard_verdict`` and ``verdict_calibration``, the numbers behind
them beside."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from ...verdict import CALIBRATION, NULL, POSITIVE, PRIMARY, USER, Bound, Controls, ControlState, Verdict, held_to, not_computed
from ..contract import Measurement
from .following import DIRECTION_NAMES, DIRECTIONS, MARGIN
from .params import NAME

QUESTION = "Which policy does this guard follow?"
QUESTION_CALIBRATION = "Does the rule name a wrong policy?"
ANSWERS = {"A": "follows A", "B": "follows B", "mixed": "mixed", "undetermined": "undetermined",
           "inconsistent": "inconsistent with both policies"}
ROLES = {"arm": PRIMARY, "guard": PRIMARY, "user": PRIMARY}  # the synthetic guards are controls, by known answer
# a position lies in [0, 1]: no direction can stand further than 0.5 from halfway
FARTHEST = Bound(0.5, "the largest distance from halfway a position allows")
KNOWN_NONE = "known: none"  # the last signal of the synthetic guard that follows no policy (coin flips)


def _number(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def _position_text(r) -> str:
    parts = []
    for d in DIRECTIONS:
        if not r[f"n_{d}"]:
            continue
        pos, lo, hi = r[f"pos_{d}"], r[f"pos_{d}_lo"], r[f"pos_{d}_hi"]
        parts.append(f"{DIRECTION_NAMES[d]} " + (f"{pos:+.2f} [{lo:+.2f}, {hi:+.2f}]" if np.isfinite(pos)
                                                 else "no position"))
    return "; ".join(parts) + " (position toward A: 0 = as B labels them, 1 = as A)" if parts else \
        not_computed("no disputed item answered")


def _mdes(r) -> list[tuple[str, float]]:
    """Per direction with a position: the smallest distance from halfway it must show to side (its
    interval's half-width + the margin)."""
    out = []
    for d in DIRECTIONS:
        lo, hi = r[f"pos_{d}_lo"], r[f"pos_{d}_hi"]
        if r[f"n_{d}"] and np.isfinite(lo) and np.isfinite(hi):
            out.append((DIRECTION_NAMES[d], (hi - lo) / 2 + MARGIN))
    return out


def _follower(r, cal: pd.DataFrame | None) -> pd.Series | None:
    """The calibration's typical follower of the policy a guard is named to follow (None: no table)."""
    if cal is None or cal.empty:
        return None
    return cal.set_index("profile").loc[f"follows_{r['follows']}"]


def _power_text(r, cal) -> str:
    """Power at the calibration's typical follower for a named policy; for mixed / undetermined the
    smallest distance from halfway a direction must show (its interval's half-width + the margin)."""
    if r["follows"] in ("A", "B"):
        row = _follower(r, cal)
        if row is None:
            return not_computed("no calibration table")
        return f"{row['power']:.2f} at a typical follower of {r['follows']} (8 % / 90 %; {int(row['draws'])} draws)"
    parts = [f"{name} |position - 0.5| >= {mde:.2f}" for name, mde in _mdes(r)]
    return ("MDE " + ", ".join(parts) + " (interval half-width + margin)") if parts else \
        not_computed("no direction with a position")


def controls(gv: pd.DataFrame) -> Controls:
    """The synthetic guards of known answer as the controls every row carries: A's and B's labels with 10 %
    flipped and the mixed guard must be recovered (their verdict names their own signal); coin flips must
    name no policy. A control that fails keeps the study's words: "not recovered (<its verdict>)", "named
    a policy"."""
    states = []
    for r in gv[gv["kind"] == "synthetic"].itertuples():
        ok = str(r.names_own_signal) == "True"
        if r.last_signal == KNOWN_NONE:
            states.append(ControlState.null(r.guard, not ok, words="" if ok else "named a policy"))
        else:
            states.append(ControlState.positive(r.guard, ok, detail="" if ok else f" ({r.follows})",
                                                words="" if ok else "not recovered"))
    return Controls(tuple(states))


def verdict_rows(p, tables: dict[str, pd.DataFrame]) -> list[Verdict]:
    """One row per guard of ``guard_verdict`` at the run seed: every trained arm and every released or user's
    guard (primary), the synthetic guards of known answer (A's and B's labels with 10 % flipped and the mixed
    guard: positive controls; coin flips: null control), and the rule's calibration (worst wrong-policy rate
    over its profiles). Beside the cells: n (the disputed items the positions rest on), the worst simulated
    wrong-policy rate, the power at a typical follower of a named policy, or for mixed and undetermined the
    smallest distance from halfway any direction could show (MDE). A position is one per direction, so a row
    has no single effect and no p-value (the intervals are Jeffreys-posterior intervals)."""
    gv, cal = tables.get("guard_verdict"), tables.get("verdict_calibration")
    if gv is None or gv.empty:
        cell = not_computed("no guard_verdict table (run the policy study)")
        return [Verdict(NAME, "policy arms", PRIMARY, QUESTION, "not computed", cell, cell, cell, Controls(flags=(cell,)))]
    gv = gv[~gv["guard"].astype(str).str.contains("|", regex=False)]
    if cal is None or cal.empty:
        fpr, fpr_rate = not_computed("no verdict_calibration table"), None
    else:
        worst = cal.loc[cal["error"].idxmax()]
        fpr = (f"{worst['error']:.1%} (worst wrong-policy rate of {len(cal)} simulated profiles, "
               f"{int(worst['draws'])} draws each; {worst['profile']})")
        fpr_rate = _number(worst["error"])
    state = controls(gv)
    out = []
    for r in gv.to_dict("records"):
        role = ROLES.get(r["kind"])
        if r["kind"] == "synthetic":
            role = NULL if r["last_signal"] == KNOWN_NONE else POSITIVE
        if role is None:
            continue
        system = r["guard"] + (f" (last signal {str(r['last_signal']).upper()})" if r["kind"] == "arm" else "")
        named = r["follows"] in ("A", "B")
        follower = _follower(r, cal) if named else None
        mdes = [] if named else [mde for _, mde in _mdes(r)]
        v = Verdict(NAME, system, role, QUESTION, ANSWERS[r["follows"]], _position_text(r), fpr,
                    _power_text(r, cal), state, fpr_rate=fpr_rate, testbed=r["kind"] == "arm",
                    power_rate=None if follower is None else _number(follower["power"]),
                    mde=min(mdes) if mdes else None, n=None if pd.isna(r["n_disputed"]) else int(r["n_disputed"]))
        out.append(held_to(v, math.inf if v.mde is None else v.mde, [FARTHEST], (ANSWERS["undetermined"],)))
    if cal is not None and not cal.empty:
        follow = cal[cal["expected"].isin(["A", "B"])].set_index("profile")["power"]
        powers = [_number(follow.get(name, np.nan)) for name in ("follows_A", "follows_B")]
        out.append(Verdict(
            NAME, "verdict rule", CALIBRATION, QUESTION_CALIBRATION,
            "within 5 %" if bool(cal["error_ok"].all()) else "not within 5 %",
            f"worst wrong-policy rate {cal['error'].max():.1%} over {len(cal)} profiles", fpr,
            f"follows_A {follow.get('follows_A', np.nan):.2f}, follows_B {follow.get('follows_B', np.nan):.2f}", state,
            effect=_number(cal["error"].max()), fpr_rate=fpr_rate,
            power_rate=None if None in powers else min(powers), n=int(worst["draws"])))
    return out


# --- the seed's headline quantities (data/published/policy.csv beside them) and a user's guard's rows ------------
COPYRIGHT = "harmbench_copyright"  # the benchmark the seed's headline numbers are about
MEASURES = {"copyright_catch_a_last": "points", "copyright_catch_mixing": "points", "copyright_rank_p": "p",
            "delta_b_copyright": "share", "delta_b_smallest": "share", "phi_b_copyright": "points"}


def _catch(scores: pd.DataFrame, arms: list[str], quantity: str, system: str) -> list:
    rates = scores[scores["model"].isin(arms)]["rate"] * 100
    if not len(rates):
        return []
    return [Measurement(quantity, system, float(rates.mean()), float(rates.min()), float(rates.max()),
                        note=f"mean of {len(rates)} arms, interval = their range", testbed=True)]


def measured(p, tables: dict[str, pd.DataFrame]) -> list:
    """The seed's quantities on this run's arms (at the run seed, clean rows): copyright catch rate of the arms
    whose last signal is A and of the mixing arms (A in the hard labels, a B teacher), the rank test's p on
    copyright, Delta_b on copyright and the smallest Delta_b, the seed floor on copyright."""
    out = []
    scores, arms = tables.get("scores"), tables.get("models")
    if scores is not None and arms is not None and len(scores):
        clean = scores[(scores["benchmark"] == COPYRIGHT) & (scores["kind"] == "arm") & (scores["seed"] == p.seed)
                       & (scores["subset"] == "clean" if "subset" in scores else True)]
        at_seed = arms[(arms["kind"] == "arm") & (arms["seed"] == p.seed)]
        a_last = at_seed[at_seed["last_signal"] == "a"]["model"].tolist()
        mixing = at_seed[(at_seed["teacher"] == "b") & (at_seed["hard_a"].astype(float) > 0)
                         & (at_seed["recalibrate"].fillna("none") == "none")]["model"].tolist()
        out += _catch(clean, a_last, "copyright_catch_a_last", "arms whose last signal is A: " + ", ".join(a_last))
        out += _catch(clean, mixing, "copyright_catch_mixing", "mixing arms: " + ", ".join(mixing))
    rank = tables.get("rank_test")
    if rank is not None and len(rank):
        r = rank[(rank["benchmark"] == COPYRIGHT) & rank["analysis"].astype(str).str.startswith("confirmatory")]
        out += [Measurement("copyright_rank_p", f"{int(x['n'])} arms, k = {int(x['k'])}", float(x["p_toward_a"]),
                            note=f"1/C(n,k) {x['one_over_n_choose_k']:.3g}, Holm {x['p_toward_a_holm']:.3g}", testbed=True)
                for x in r.to_dict("records")]
    sens = tables.get("sensitivity")
    if sens is not None and len(sens):
        for x in sens[sens["benchmark"] == COPYRIGHT].to_dict("records"):
            out.append(Measurement("delta_b_copyright", COPYRIGHT, float(x["delta"]), note=f"{int(x['n_models'])} arms",
                                   testbed=True))
            out.append(Measurement("phi_b_copyright", COPYRIGHT, 100 * float(x["phi"]), 100 * float(x["phi_min"]),
                                   100 * float(x["phi_max"]), note=f"{int(x['n_recipes'])} recipes x seeds",
                                   testbed=True))
        low = sens.loc[sens["delta"].idxmin()]
        out.append(Measurement("delta_b_smallest", str(low["benchmark"]), float(low["delta"]),
                               note=f"smallest of {len(sens)} benchmarks", testbed=True))
    return out


def user_rows(p, folder) -> list[Verdict]:
    """A user's guards of ``make guard-verdict`` (``<run>/guard_verdict.csv``), one row each, role ``USER``."""
    path = folder / "guard_verdict.csv"
    if not path.is_file():
        return []
    gv = pd.read_csv(path)
    cal_file = folder / "stats" / NAME / "verdict_calibration.csv"
    cal = pd.read_csv(cal_file) if cal_file.is_file() else None
    guards = set(gv["guard"].astype(str))
    rows = verdict_rows(p, {"guard_verdict": gv.assign(kind="user"), "verdict_calibration": cal})
    return [dataclasses.replace(r, role=USER, headline=True) for r in rows if r.system in guards]
