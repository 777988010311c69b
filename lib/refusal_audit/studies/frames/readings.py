"""The frames study's item-level readings of each declared (judge, outcome, subset, model): on its declared
primary contrast, beside the GEE's directional claim, do items move in both directions beyond rewording noise
(with the reversal count), how many items carry the effect (with an interval), and does it depend on decoding
(frame x greedy/sampled)? Each reading is its own declared test (``refusal_audit.divergence``), Holm over the
rows of its family (the declared family's rows; the null control's rows apart). Definitions and calibration:
DEFINITIONS.md "Item-level readings"; the calibration table: ``benchmarks/frames_item_shapes.py``."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ... import divergence, stats
from ...config import ParamsError
from ...paths import ROOT
from .confirmatory import _per_item, _subset
from .params import NAME, pair_families, primary_of

CALIBRATION = ROOT / "benchmarks" / "frames_item_shapes.csv"
TESTS = {"both": "both_p", "concentrated": "concentrated_p", "decoding": "decode_p"}


def _sampled_greedy(g: pd.DataFrame, pair) -> pd.DataFrame:
    """Per model and item: the primary contrast on the greedy (T = 0) and on the sampled (T > 0) decodes."""
    out = []
    for name, part in (("greedy", g[g["temperature"] == 0]), ("sampled", g[g["temperature"] > 0])):
        if not len(part) or part["frame"].nunique() < 2:
            return pd.DataFrame(columns=["model", "item_id", "greedy", "sampled"])
        c = stats.frame_contrasts(part, "item_id", "frame", "paraphrase", "y", [pair], by=["model"])
        out.append(c.set_index(["model", "item_id"])["delta"].rename(name))
    return pd.concat(out, axis=1).reset_index()


def _row(it: pd.DataFrame, margin: float, alpha: float) -> dict:
    """The three readings of one row's items (``it``: delta, delta_p, noise_var, greedy, sampled, cluster)."""
    it = it.dropna(subset=["delta", "delta_p", "noise_var"])
    if len(it) < 3 or it["cluster"].nunique() < 3:
        return {"readings_status": "not tested: fewer than 3 item clusters with both contrasts"}
    cl = it["cluster"].to_numpy()
    s = divergence.signed_excess(it["delta"], it["delta_p"], cl)
    sh = divergence.effective_share(it["delta"], it["noise_var"], cl, margin, alpha)
    mean = float(it["delta"].mean())
    row = {"n_items": len(it), "n_up": int(s.n_up), "n_down": int(s.n_down),
           "n_reversed": int(s.n_down if mean > 0 else s.n_up if mean < 0 else 0),
           "up_excess": float(s.up), "up_p": float(s.up_p), "down_excess": float(s.down), "down_p": float(s.down_p),
           # the share's estimate is a ratio of unbiased estimates: reported clipped to [0, 1] (n_eff to [0, n])
           "both_p": float(s.both_p), "share": float(np.clip(sh.share, 0, 1)), "share_lo": float(np.clip(sh.lo, 0, 1)),
           "share_hi": float(np.clip(sh.hi, 0, 1)), "n_eff": float(np.clip(sh.share, 0, 1) * len(it)),
           "n_eff_lo": float(np.clip(sh.lo, 0, 1) * len(it)), "n_eff_hi": float(np.clip(sh.hi, 0, 1) * len(it)),
           "concentrated_p": float(sh.p), "readings_status": "ok"}
    dec = it.dropna(subset=["greedy", "sampled"])
    if len(dec) >= 3 and dec["cluster"].nunique() >= 3:
        d = divergence.decode_dependence(dec["sampled"], dec["greedy"], dec["cluster"].to_numpy(), alpha)
        row.update(greedy_delta=float(dec["greedy"].mean()), sampled_delta=float(dec["sampled"].mean()),
                   decode_diff=float(d.difference), decode_lo=float(d.lo), decode_hi=float(d.hi), decode_p=float(d.p))
    return row


def table(p, d: pd.DataFrame, confirmatory: pd.DataFrame, judges_in_run: dict[str, str]) -> pd.DataFrame:
    """One row per declared (judge, outcome, subset, model) and per null-control row: the declared primary
    contrast, its GEE Holm p and noise comparison (from ``confirmatory``), and the three readings with their
    Holm p over their family."""
    fr, alpha = p.studies[NAME], p.stats.alpha
    fam = pair_families(fr, judges_in_run)
    data = d.dropna(subset=["y"])
    rows = []
    for (judge, outcome, subset), keys in fam.groupby(["judge", "outcome", "subset"], sort=True):
        k = primary_of(fr, outcome)
        pair = tuple(k.split("-"))
        sub = _subset(data[(data["judge"] == judge) & (data["outcome"] == outcome)], subset)
        items = _per_item(sub, [pair]) if len(sub) else pd.DataFrame(columns=["model", "item_id", "f1", "f2"])
        if len(sub) and "temperature" in sub:
            items = items.merge(_sampled_greedy(sub, pair), on=["model", "item_id"], how="left")
        for r in keys.itertuples():
            it = items[items["model"] == r.model] if len(items) else items
            base = {"judge": judge, "outcome": outcome, "subset": subset, "model": r.model, "primary": k,
                    "family": "null control" if r.null else "confirmatory"}
            rows.append({**base, **(_row(it.assign(**{c: it.get(c, np.nan) for c in ("greedy", "sampled")}),
                                         fr.confirmatory.share_margin, alpha) if len(it)
                                    else {"readings_status": "not tested: no items"})})
    t = pd.DataFrame(rows)
    keys = ["judge", "outcome", "subset", "model"]
    prim = confirmatory.rename(columns={"contrast": "primary"})[
        [*keys, "primary", "estimate", "ci_lo", "ci_hi", "delta", "p_holm", "status", "beyond_noise", "noise_margin",
         "noise_p", "mde_80_primary"]].rename(columns={"p_holm": "primary_p_holm", "status": "primary_status"})
    t = t.merge(prim, on=[*keys, "primary"], how="left")
    for col in [*TESTS.values(), "decode_diff"]:
        if col not in t:
            t[col] = np.nan
    for col in TESTS.values():
        t[f"{col}_holm"] = np.nan
        for _, g in t.groupby("family"):
            t.loc[g.index, f"{col}_holm"] = stats.holm_family(g[col].to_numpy(dtype=float))
    t["holm_rows"] = t.groupby("family")["model"].transform("size")
    t["reading"] = [reading(r, alpha) for _, r in t.iterrows()]
    return t


def reading(r, alpha: float) -> str:
    """The row's answer in words: the directional claim qualified by the readings that hold, or the reading
    that holds without it, or "beyond paraphrase noise, not significant", or "no divergence"."""
    sig = lambda c: pd.notna(r.get(f"{c}_holm")) and r[f"{c}_holm"] < alpha  # noqa: E731
    directional = pd.notna(r.get("primary_p_holm")) and r["primary_p_holm"] < alpha
    both, conc, dec = sig("both_p"), sig("concentrated_p") and directional, sig("decode_p")
    if directional:
        words = ["divergence"] + (["in both directions"] if both else []) + (["concentrated"] if conc else []) \
            + (["decode-dependent"] if dec else [])
        return words[0] if len(words) == 1 else words[0] + ": " + ", ".join(words[1:])
    if both:
        return "divergence without a consistent direction" + (", decode-dependent" if dec else "")
    if dec:
        return "decode-dependent divergence"
    if pd.notna(r.get("beyond_noise")) and bool(r["beyond_noise"]):
        return "beyond paraphrase noise, not significant"
    return "no divergence"


def words(r, alpha: float) -> str:
    """The readings in a sentence, every number from the row (``table``)."""
    head = (f"{r['model']}, {r['outcome']} ({r['judge']} judge, {r['subset']} items), declared primary {r['primary']}: "
            f"{r['reading'].upper() if r['reading'] != 'no divergence' else 'no divergence'}")
    if r.get("readings_status") != "ok":
        return head + f" (item-level readings {r.get('readings_status')})."
    n = int(r["n_items"])
    parts = [f"GEE Holm p {r['primary_p_holm']:.3g}" if pd.notna(r.get("primary_p_holm")) else "GEE not fitted",
             f"items up {int(r['n_up'])}, down {int(r['n_down'])} of {n} ({int(r['n_reversed'])} against the mean); "
             f"both directions beyond rewording noise: Holm p {r['both_p_holm']:.3g} (up {r['up_p']:.3g}, down "
             f"{r['down_p']:.3g}, one-sided)"]
    directional = pd.notna(r.get("primary_p_holm")) and r["primary_p_holm"] < alpha
    if directional and pd.notna(r["share"]):
        parts.append(f"carried by {r['n_eff']:.1f} [{r['n_eff_lo']:.1f}, {r['n_eff_hi']:.1f}] items' "
                     f"worth of {n} (share {r['share']:.2f}; fewer than the declared share: Holm p "
                     f"{r['concentrated_p_holm']:.3g})")
    elif not directional:
        parts.append("concentration read only with a direction")
    if pd.notna(r.get("decode_diff")):
        parts.append(f"greedy {100 * r['greedy_delta']:+.1f} points, sampled {100 * r['sampled_delta']:+.1f} "
                     f"(difference {100 * r['decode_diff']:+.1f} [{100 * r['decode_lo']:+.1f}, "
                     f"{100 * r['decode_hi']:+.1f}], Holm p {r['decode_p_holm']:.3g})")
    if pd.notna(r.get("beyond_noise")):
        parts.append(f"{'beyond' if bool(r['beyond_noise']) else 'not beyond'} paraphrase noise (margin "
                     f"{r['noise_margin']:+.3f})")
    return head + "; " + "; ".join(parts) + f" (Holm over the {int(r['holm_rows'])} rows of the {r['family']} family)."


def read_calibration(path: Path = CALIBRATION) -> pd.DataFrame | None:
    """The committed calibration table, or None; a table without its columns stops with file and column."""
    if not path.is_file():
        return None
    t = pd.read_csv(path)
    for c in ("shape", "reading", "n_items", "n_decodes", "reps", "rate", "mc_se", "target"):
        if c not in t:
            raise ParamsError(f"{path}: column {c!r} missing (expected the columns of benchmarks/frames_item_shapes.py)")
    return t


def calibration_words(t: pd.DataFrame | None, n_items: int) -> str:
    """The readings' worst simulated false-positive rate (non-target shape x reading, directional excluded) at
    the calibrated size nearest ``n_items``, with its draws and Monte Carlo error."""
    if t is None:
        return "item readings not calibrated (benchmarks/frames_item_shapes.csv missing)"
    size = t.loc[(t["n_items"] - n_items).abs().idxmin(), "n_items"]
    off = t[(t["n_items"] == size) & ~t["target"].astype(bool) & t["reading"].isin(
        ["both directions", "concentrated", "decode-dependent"])]
    w = off.loc[off["rate"].idxmax()]
    return (f"item readings {100 * w['rate']:.1f} % +- {100 * w['mc_se']:.1f} (worst of {len(off)} shape x reading "
            f"cells off target, {int(w['reps'])} draws each, {int(size)} items x {int(w['n_decodes'])} decodes, "
            f"nominal 5 %; benchmark)")
