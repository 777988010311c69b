"""The masked three-annotator equivalence audit (seed section 4.3 and its appendix A): a blind sheet of each
item's two paraphrased requests (the frame wrapper and any jailbreak template masked: only the bodies), scored
1-5 by each annotator under the codebook in DEFINITIONS.md ("Equivalence codebook"), read back into Fleiss'
kappa over the five scores (``statsmodels``' ``fleiss_kappa``, with an item-bootstrap interval) and the strict
subset (every annotator scored 5), on which the declared family is re-fitted apart (``analysis.strict_reanalysis``,
the same re-analysis as the LLM score's strict subset); where the run carries the LLM 1-5 score
(``frames.equivalence_scorer``), it is set beside the annotators' median (exact agreement, quadratic-weighted kappa).

``make frames-equivalence`` writes the sheet and its key into ``results/<run>/frames/equivalence/``;
``make frames-equivalence SHEETS=a.csv,b.csv,c.csv`` reads the filled copies back. A bad sheet (a score outside
1-5, a row missing, a duplicate or unknown id) stops with the file and the row before anything is computed.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from statsmodels.stats.inter_rater import aggregate_raters, fleiss_kappa

from ... import config
from ...errors import ParamsError
from ...paths import run_dir, study_dir
from .analysis import cluster_ids, harmful_requests, long_outcomes, sampled_null, strict_reanalysis
from .params import NAME

SHEET_COLUMNS = ["sheet_id", "request_a", "request_b", "score", "note"]
SCORES = (1, 2, 3, 4, 5)


def blind_sheet(items: pd.DataFrame, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(sheet, key): one row per item in a seeded random order under an opaque id, the two bodies only (the
    order of A and B also drawn per row, so an annotator cannot learn which was the source's rewording)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(items))
    swap = rng.random(len(items)) < 0.5
    rows, key = [], []
    for k, i in enumerate(order):
        it = items.iloc[i]
        a, b = (it["request_b"], it["request_a"]) if swap[k] else (it["request_a"], it["request_b"])
        sid = f"eq-{k + 1:04d}"
        rows.append({"sheet_id": sid, "request_a": a, "request_b": b, "score": "", "note": ""})
        key.append({"sheet_id": sid, "item_id": it["item_id"]})
    return pd.DataFrame(rows, columns=SHEET_COLUMNS), pd.DataFrame(key)


def read_sheets(paths: list[Path], key: pd.DataFrame) -> pd.DataFrame:
    """Long table (item_id, annotator, score) of the filled sheets; every check before any statistic."""
    out = []
    ids = set(key["sheet_id"])
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise ParamsError(f"{path}: not found (a filled copy of the equivalence sheet)")
        s = pd.read_csv(path, dtype=str, keep_default_na=False)
        for c in ("sheet_id", "score"):
            if c not in s:
                raise ParamsError(f"{path}: column {c!r} missing (expected the sheet's columns {SHEET_COLUMNS})")
        for row, (sid, score) in enumerate(zip(s["sheet_id"], s["score"]), start=2):   # row 1 is the header
            if sid not in ids:
                raise ParamsError(f"{path}: row {row}: sheet_id {sid!r} is not on the sheet (expected one of its ids)")
            if score.strip() not in {str(v) for v in SCORES}:
                raise ParamsError(f"{path}: row {row} ({sid}): score {score!r}; expected an integer 1-5")
        dup = s["sheet_id"][s["sheet_id"].duplicated()]
        if len(dup):
            row = int(dup.index[0]) + 2
            raise ParamsError(f"{path}: row {row}: sheet_id {dup.iloc[0]!r} appears twice (expected each row once)")
        missing = sorted(ids - set(s["sheet_id"]))
        if missing:
            raise ParamsError(f"{path}: {len(missing)} row(s) missing, the first {missing[0]!r} (expected every row "
                              "of the sheet, scored 1-5)")
        out.append(s.assign(annotator=path.stem, score=s["score"].astype(int))[["sheet_id", "annotator", "score"]])
    long = pd.concat(out, ignore_index=True).merge(key, on="sheet_id")
    return long[["item_id", "sheet_id", "annotator", "score"]]


def fleiss(scores: pd.DataFrame, n_boot: int, seed: int, alpha: float = 0.05) -> dict:
    """Fleiss' kappa of the annotators' 1-5 scores (items x raters; ``statsmodels``) with a percentile
    interval from ``n_boot`` item resamples; the strict subset's size."""
    wide = scores.pivot(index="item_id", columns="annotator", values="score")
    counts, _ = aggregate_raters(wide.to_numpy() - 1, n_cat=len(SCORES))   # items x the five scores
    kappa = float(fleiss_kappa(counts))
    rng = np.random.default_rng(seed)
    boot = [fleiss_kappa(counts[rng.integers(0, len(counts), len(counts))]) for _ in range(n_boot)]
    lo, hi = np.nanquantile(boot, [alpha / 2, 1 - alpha / 2])
    strict = wide.index[(wide == 5).all(axis=1)]
    return {"n_items": len(wide), "n_annotators": wide.shape[1], "fleiss_kappa": kappa, "kappa_lo": float(lo),
            "kappa_hi": float(hi), "n_strict": len(strict), "strict_items": list(strict),
            "score_counts": {v: int((wide.to_numpy() == v).sum()) for v in SCORES}}


def quadratic_kappa(a, b, scores=SCORES) -> float:
    """Cohen's kappa of two raters' ordinal scores with quadratic weights (disagreeing by k points costs k^2)."""
    idx = {v: i for i, v in enumerate(scores)}
    obs = np.zeros((len(scores), len(scores)))
    for x, y in zip(a, b):
        obs[idx[x], idx[y]] += 1
    expected = np.outer(obs.sum(1), obs.sum(0)) / obs.sum()
    w = (np.subtract.outer(np.arange(len(scores)), np.arange(len(scores))) / (len(scores) - 1)) ** 2
    denom = (w * expected).sum()
    return float(1 - (w * obs).sum() / denom) if denom > 0 else float("nan")


def command(args) -> list[str]:
    """``make frames-equivalence [SHEETS=a.csv,b.csv,c.csv] [RUN=name]``: without sheets, the blind sheet and
    its key for the run's drawn items; with them, Fleiss' kappa, the strict subset and the declared primary
    contrasts recomputed on it (``stats/frames/equivalence_humans.csv``, ``equivalence_strict.csv``)."""
    p = config.load(args.params)
    run = args.run or p.run_name
    frames_dir = study_dir(run, NAME)
    where = frames_dir / "equivalence"
    need = [frames_dir / "items.parquet", frames_dir / "generations.parquet"]
    for f in need:
        if not f.is_file():
            raise FileNotFoundError(f"{f}: not found: run make all PARAMS={args.params} STUDIES=frames first")
    g = pd.read_parquet(need[1])
    items = pd.read_parquet(need[0])
    items = items[items["item_id"].isin(set(g["item_id"]))].reset_index(drop=True)
    sheets = [Path(x) for x in args.sheets.split(",") if x.strip()]
    if not sheets:
        sheet, key = blind_sheet(items, p.seed)
        where.mkdir(parents=True, exist_ok=True)
        sheet.to_csv(where / "sheet.csv", index=False)
        key.to_csv(where / "key.csv", index=False)
        return [f"wrote {where / 'sheet.csv'} ({len(sheet)} rows: give each annotator a copy; the codebook is in "
                f"DEFINITIONS.md) and its key {where / 'key.csv'} (not for the annotators)"]
    if not (where / "key.csv").is_file():
        raise FileNotFoundError(f"{where / 'key.csv'}: not found: run make frames-equivalence without SHEETS first")
    scores = read_sheets(sheets, pd.read_csv(where / "key.csv", dtype=str))
    f = fleiss(scores, p.stats.n_bootstrap, p.seed, p.stats.alpha)
    stats_dir = run_dir(run) / "stats" / NAME
    stats_dir.mkdir(parents=True, exist_ok=True)
    wide = scores.pivot(index="item_id", columns="annotator", values="score")
    wide.assign(strict=wide.index.isin(f["strict_items"])).reset_index().to_csv(stats_dir / "equivalence_humans.csv",
                                                                                index=False)
    lines = [f"frames equivalence: {f['n_annotators']} annotators x {f['n_items']} items, Fleiss' kappa "
             f"{f['fleiss_kappa']:.2f} [{f['kappa_lo']:.2f}, {f['kappa_hi']:.2f}]; scores {f['score_counts']}; strict "
             f"subset (all scored 5): {f['n_strict']} items"]
    if "equivalence_llm" in items:   # the run's LLM 1-5 score beside the annotators' (its only validation here)
        llm = items.set_index("item_id")["equivalence_llm"].reindex(wide.index)
        both = pd.concat([llm.rename("llm"), wide.median(axis=1).round().rename("humans")], axis=1).dropna()
        if len(both) >= 2:
            k = quadratic_kappa(both["humans"].astype(int), both["llm"].astype(int))
            lines.append(f"  LLM score against the annotators' median score on {len(both)} items: exact agreement "
                         f"{(both['llm'] == both['humans']).mean():.2f}, quadratic-weighted Cohen's kappa {k:.2f}; "
                         f"strict by both {int(((both['llm'] == 5) & (both['humans'] == 5)).sum())}, by the LLM only "
                         f"{int(((both['llm'] == 5) & (both['humans'] < 5)).sum())}, by the annotators only "
                         f"{int(((both['llm'] < 5) & (both['humans'] == 5)).sum())}")
    j = frames_dir / "judgments.parquet"
    if j.is_file():
        judged = pd.read_parquet(j)
        kinds = judged.drop_duplicates("judge").set_index("judge")["kind"].to_dict()
        d = sampled_null(long_outcomes(g, judged, harmful_requests(items), cluster_ids(items["item_id"])))
        prim = strict_reanalysis(p, d, kinds, set(f["strict_items"]), "every annotator scored 5")
        prim.to_csv(stats_dir / "equivalence_strict.csv", index=False)
        if "note" in prim:
            lines.append(f"  strict subset: {prim['note'].iloc[0]}")
        lines += [f"  strict subset (re-fitted apart; Holm over the re-fitted family), {r.model} {r.outcome} ({r.subset} "
                  f"items) {r.contrast}: " + (f"{r.scale} {r.estimate:+.2f} [{r.ci_lo:+.2f}, {r.ci_hi:+.2f}], Delta "
                                             f"{100 * r.delta:+.1f} points over {int(r.n_items)} items, p {r.p:.3g}"
                                             if r.status == "ok" else f"not tested ({r.status})")
                  for r in prim.itertuples() if "estimate" in prim]
    return lines + [f"wrote {stats_dir / 'equivalence_humans.csv'}"]
