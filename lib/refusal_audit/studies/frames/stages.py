"""The frames study's stages 01-05: preflight, items (validated and drawn across difficulty tiers), framed
prompts (one wrapper, one slot), generation over the decoding grid, judging and the analysis; and the frame-locality
check ``make check`` runs under each model's tokenizer."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ... import datasets, encoder, executor, generation, judge_sanity, judges, retention, store
from ...chat import PROBE_QUERY
from ...config import ParamsError
from ...judges.outcome import OutcomeJudge
from ...paths import DATA_DIR, study_dir
from ...prompts import build_prompts
from . import analysis, familiarity, paraphrase, rubric
from . import wrapper as W
from .params import NAME, PARAPHRASES, STRATA, TIERS, as_null, null_seeds, reference, second_judges
from .wrapper import check_locality


def preflight(p, models) -> None:
    """Items readable and valid (both paraphrases, none equal to its source), prompts fit the context, the
    semantic divergence's encoder installed (a Hugging Face id absent here is a note when checking a file for
    another machine)."""
    fr = p.studies[NAME]
    items(p, llm=False)
    try:
        encoder.locate(fr.encoder)
    except FileNotFoundError as e:
        if not (models.missing_ok and encoder.is_hub_id(fr.encoder)):
            raise ParamsError(f"{p.source_file}: frames.encoder: {e}") from None
        models.notes.append(f"frames.encoder: {e} (needed where the run's statistics are computed)")
    for m in fr.models:
        context = models.context_window(m)
        if context and 512 + fr.max_new_tokens >= context:
            raise ParamsError(f"{p.source_file}: frames.max_new_tokens: {fr.max_new_tokens} does not fit {m}")


# --- 01 items ------------------------------------------------------------------------------------------
def _norm(text: str) -> str:
    return " ".join(str(text).lower().split())


def validate_items(df: pd.DataFrame, where: str) -> None:
    """One clear error for an item without both paraphrases, or a paraphrase identical to its source
    (or to the other paraphrase)."""
    for col in ("item_id", "stratum", "source_text", "paraphrase_a", "paraphrase_b", "request_a", "request_b"):
        if col not in df:
            raise ValueError(f"{where}: missing column {col!r}")
    for i, r in df.iterrows():
        for x in ("a", "b"):
            if not str(r[f"paraphrase_{x}"]).strip() or not str(r[f"request_{x}"]).strip():
                raise ValueError(f"{where}: row {i} (item {r['item_id']!r}): paraphrase {x.upper()} is missing; "
                                 "every item needs both paraphrases A and B")
            if _norm(r[f"request_{x}"]) == _norm(r["source_text"]):
                raise ValueError(f"{where}: row {i} (item {r['item_id']!r}): paraphrase {x.upper()} is identical "
                                 "to its source text")
        if _norm(r["paraphrase_a"]) == _norm(r["paraphrase_b"]):
            raise ValueError(f"{where}: row {i} (item {r['item_id']!r}): paraphrases A and B are identical")
        if r["stratum"] not in STRATA:
            raise ValueError(f"{where}: row {i} (item {r['item_id']!r}): unknown stratum {r['stratum']!r}")
        for x in ("a", "b"):
            for marker in (W.SLOT, W.BODY):
                if marker in str(r[f"paraphrase_{x}"]):
                    raise ValueError(f"{where}: row {i} (item {r['item_id']!r}): paraphrase {x.upper()} contains "
                                     f"the wrapper marker {marker!r}")
    datasets.validate_items(df, where, "source_text")


def read_items(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: frames item file not found")
    return pd.read_csv(path, keep_default_na=False)


def items(p, llm: bool = True) -> pd.DataFrame:
    """The items drawn per stratum (seeded) before any prompt is rendered, with their paraphrase bodies
    and requests: ``per_stratum`` of them, or with ``tier_balance`` the ``tier_pool`` candidates that the
    calibration pass tiers and ``balanced_draw`` thins to ``per_stratum`` (stage 03). With ``frames.paraphraser``
    the drawn items' requests and bodies are the LLM's (``paraphrase.py``; items without a usable pair dropped),
    with ``frames.equivalence_scorer`` each carries its LLM 1-5 equivalence score; ``llm=False``: the file's
    draw alone (``make check``, ``make plan``: no model is loaded)."""
    fr = p.studies[NAME]
    path = DATA_DIR / fr.data.file
    df = read_items(path)
    where = f"{p.source_file}: frames.data.file ({fr.data.file})"
    validate_items(df, where)
    parts = []
    for s in fr.data.strata:
        pool = df[df["stratum"] == s]
        if len(pool) < fr.data.count(s):
            raise ParamsError(f"{p.source_file}: frames.data.per_stratum: {fr.data.count(s)} items asked for "
                              f"stratum {s!r}, the file has {len(pool)}")
        n = min(fr.data.tier_pool or len(pool), len(pool)) if fr.data.tier_balance else fr.data.count(s)
        parts.append(pool.sample(n, random_state=p.seed).sort_values("item_id"))
    out = pd.concat(parts, ignore_index=True)
    out = out.assign(study=NAME, role=out["stratum"], text=out["source_text"])
    cols = datasets.ITEM_COLUMNS + ["stratum", "template", "paraphrase_a", "paraphrase_b", "request_a", "request_b"]
    out = out[cols].astype({"source_row": int}).reset_index(drop=True)
    if llm and fr.paraphraser is not None:
        out = paraphrase.paraphrase_items(p, out)
    if llm and fr.equivalence_scorer is not None:
        out = paraphrase.equivalence_scores(p, out)
    return out


# --- 02 prompts ----------------------------------------------------------------------------------------
def bodies(items: pd.DataFrame) -> pd.DataFrame:
    """One row per item and paraphrase: item_id, paraphrase, body (the wrapped text's task), request."""
    return pd.concat([pd.DataFrame({"item_id": items["item_id"], "paraphrase": r,
                                    "body": items[f"paraphrase_{r.lower()}"], "request": items[f"request_{r.lower()}"],
                                    "stratum": items["stratum"]}) for r in PARAPHRASES],
                     ignore_index=True).sort_values(["item_id", "paraphrase"], ignore_index=True)


def prompts(p, items: pd.DataFrame, models) -> pd.DataFrame:
    """Every item x paraphrase x frame, for every model (its own tokenizer), after the frame-locality
    check on the rendered tokens of every item and paraphrase."""
    fr = p.studies[NAME]
    W.check_wrapper(fr.wrapper, fr.frames, f"{p.source_file}: frames")
    b = bodies(items)
    parts = []
    # a reference model outside the roster gets its own calibration prompts (its tokenizer's ids)
    extra = [] if reference(fr) in fr.models else [reference(fr)]
    for m in fr.models + extra:
        tok, context = models.tokenizer(m), models.context_window(m)
        rows = []
        for _, r in b.iterrows():
            W.check_locality(tok, fr.wrapper, fr.frames, r["body"], f"item {r['item_id']!r} paraphrase {r['paraphrase']}")
            for f, text in fr.frames.items():
                if m in extra and f != fr.calibration_frame:
                    continue
                rows.append({"item_id": r["item_id"], "study": NAME, "role": r["stratum"], "frame": f,
                             "paraphrase": r["paraphrase"], "query": W.render(fr.wrapper, text, r["body"]),
                             "body": r["body"], "request": r["request"]})
        rows = pd.DataFrame(rows)
        built = build_prompts(rows, tok, [(0, None)], context, fr.max_new_tokens)
        parts.append(built.assign(model=m, body=rows["body"].values, request=rows["request"].values))
    return pd.concat(parts, ignore_index=True)


# --- 03 generation (calibration pass first) -------------------------------------------------------------
def tiers_from(calibration: pd.DataFrame, drop_untiered: bool = False) -> pd.DataFrame:
    """Per item: the reference model's refusal rate over its calibration replies (unparseable ones
    left out) and its tier by thirds of that rate: easy < 1/3 <= medium <= 2/3 < hard. An item with no
    parseable calibration reply has no tier: an error, before any framed generation."""
    rows = []
    for item, g in calibration.groupby("item_id", sort=True):
        ok = g[g["label"] != "unparseable"]
        if ok.empty and drop_untiered:
            rows.append({"item_id": item, "calibration_n": 0, "calibration_refusal": np.nan, "tier": "none"})
            continue
        if ok.empty:
            raise ValueError(f"frames calibration: item {item!r}: the tier cannot be computed (all {len(g)} "
                             "calibration replies are unparseable; frames.drop_untiered: true drops such items)")
        rate = float((ok["label"] == "refusal").mean())
        rows.append({"item_id": item, "calibration_n": len(ok), "calibration_refusal": rate,
                     "tier": "easy" if rate < 1 / 3 else "medium" if rate <= 2 / 3 else "hard"})
    return pd.DataFrame(rows)


def balanced_draw(tiers: pd.DataFrame, sizes: dict[str, int], seed: int) -> set[str]:
    """The items of the framed grid: per stratum, ``sizes[stratum]`` tiered items taken one tier at a time
    (easy, medium, hard, easy, ...; each tier's items in a seeded order), so that each stratum is spread
    as evenly over the three tiers as its candidates allow (a tier that runs out leaves its turns to the
    others). ``tiers``: item_id, stratum, tier (untiered items, tier "none", are never drawn)."""
    chosen: set[str] = set()
    for stratum, g in tiers[tiers["tier"].isin(TIERS)].groupby("stratum", sort=True):
        queues = {t: g.loc[g["tier"] == t, "item_id"].sample(frac=1, random_state=seed).tolist() for t in TIERS}
        wanted = sizes[stratum]
        taken = 0
        while taken < wanted and any(queues.values()):
            for t in TIERS:
                if queues[t] and taken < wanted:
                    chosen.add(queues[t].pop(0))
                    taken += 1
    return chosen


CARRY = ("role", "frame", "paraphrase", "query")  # beside the engine's core: the stratum, frame and paraphrase


def generate(p, prompts: pd.DataFrame, models, shards: store.ShardStore) -> pd.DataFrame:
    """1) calibration: the reference model, calibration frame, the whole decoding grid, on every drawn
    item (its shards are reused by the grid) -> tiers, and with ``tier_balance`` the tier-balanced draw
    (the study folder's ``tiers.parquet``, column ``selected``); 2) familiarity: Min-K% Prob per model and
    body (``familiarity.parquet``); 3) the framed grid for every model, on the selected items."""

    fr = p.studies[NAME]
    folder = study_dir(p.run_name, NAME)
    full = [retention.make("full")]
    grid = generation.decoding_grid(fr.temperatures, fr.seeds, fr.max_new_tokens)
    ref = reference(fr)
    ref_prompts = prompts[(prompts["model"] == ref)  # rendered with the reference model's own tokenizer
                          & (prompts["frame"] == fr.calibration_frame)]
    calib = executor.generate(p, models, ref, ref_prompts, lambda r: full, shards, grid, carry=CARRY)
    calib = calib.merge(ref_prompts[["prompt_id", "request"]].drop_duplicates("prompt_id"), on="prompt_id")
    verdicts = OutcomeJudge().judge_many(calib["request"].tolist(), calib["reply"].tolist())
    calib = calib.assign(label=[v[0] for v in verdicts])
    tiers = tiers_from(calib, fr.drop_untiered)
    tiers = tiers.merge(ref_prompts[["item_id", "role"]].drop_duplicates("item_id").rename(columns={"role": "stratum"}),
                        on="item_id")
    selected = (balanced_draw(tiers, fr.data.counts(), p.seed) if fr.data.tier_balance
                else set(tiers.loc[tiers["tier"] != "none", "item_id"]))
    tiers = tiers.assign(selected=tiers["item_id"].isin(selected))
    store.write_atomic(tiers.assign(reference_model=ref), folder / "tiers.parquet")
    fam, parts = [], []
    public = familiarity.texts(items(p))  # the source texts and their unseen reference (the requests)
    for m in fr.models:
        model, tok = models.load(m)
        mine = prompts[(prompts["model"] == m) & prompts["item_id"].isin(selected)]
        b = mine.drop_duplicates(["item_id", "paraphrase"])[["item_id", "paraphrase", "body"]]
        b = pd.concat([b, public[public["item_id"].isin(b["item_id"])]], ignore_index=True)
        fam.append(familiarity.scores(model, tok, b, fr.min_k).assign(model=m))
        parts.append(executor.generate(p, models, m, mine, lambda r: full, shards, grid, carry=CARRY))
    nulls = []  # the null control: the reference frame's prompt under every frame label (DEFINITIONS.md)
    for m in fr.null_control:
        rows = prompts[(prompts["model"] == m) & (prompts["frame"] == fr.reference_frame)
                       & prompts["item_id"].isin(selected)]
        for k, f in enumerate(fr.frames):
            g = generation.decoding_grid(fr.temperatures, null_seeds(fr.seeds, k), fr.max_new_tokens)
            nulls.append((f, executor.generate(p, models, m, rows, lambda r: full, shards, g, carry=CARRY)))
    fam = pd.concat(fam, ignore_index=True)
    store.write_atomic(fam, folder / "familiarity.parquet")
    per_item = familiarity.per_item(fam, fr.familiarity_quantile)
    extra = prompts[["prompt_id", "model", "body", "request"]].drop_duplicates(["prompt_id", "model"])

    def complete(out):
        out = out.merge(extra, on=["prompt_id", "model"], how="left").merge(tiers[["item_id", "tier"]], on="item_id")
        return out.merge(per_item, on=["model", "item_id"], how="left")

    return pd.concat([complete(pd.concat(parts, ignore_index=True))] + [as_null(complete(g), f) for f, g in nulls],
                     ignore_index=True)


# --- 04 judging ----------------------------------------------------------------------------------------
def judge(p, generations: pd.DataFrame, models, folder: Path) -> pd.DataFrame:
    """The outcome judge and the second judge on every reply. Both see the item's REQUEST without the
    frame wrapper, so that neither can itself respond to the frame."""

    fr = p.studies[NAME]
    replies = generations.rename(columns={"request": "prompt"})
    chosen = [outcome_judge(p, models.load)] + [judges.registry.make(n, p, models.load)
                                                 for n in dict.fromkeys((*second_judges(fr), "learned_harmful"))]
    out = judges.judge_replies(chosen, replies)
    if fr.rubric is not None:   # the ordinal rubric of reply pairs (a secondary outcome): its own table
        store.write_atomic(rubric.score(p, generations, models.load), folder / "rubric.parquet")
    return out


def outcome_judge(p, load_model):
    """The judge params name for the outcome role (frames.outcome_judge), under the role's name ``outcome``,
    so that every table and the declared family read the same judge whichever fills the role."""
    name = p.studies[NAME].outcome_judge
    j = OutcomeJudge() if name == "outcome" else judges.registry.make(name, p, load_model)
    j.name = "outcome"
    return j


# --- 05 statistics -------------------------------------------------------------------------------------
def analyse(p, items: pd.DataFrame, generations: pd.DataFrame, judgments: pd.DataFrame) -> dict[str, pd.DataFrame]:

    # with tier_balance the items table holds every calibrated candidate; the statistics run on those drawn
    drawn = items[items["item_id"].isin(set(generations["item_id"]))].reset_index(drop=True)
    scores = None
    if p.studies[NAME].rubric is not None:   # the judge stage's rubric table, on the decontaminated items
        path = study_dir(p.run_name, NAME) / "rubric.parquet"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not found: frames.rubric is set and the judge stage (notebook 04) has "
                                    "not scored the reply pairs for this run")
        scores = pd.read_parquet(path)
        scores = scores[scores["item_id"].isin(set(drawn["item_id"]))]
    tables = analysis.run(p, drawn, generations, judgments, scores)
    return {**tables, "judge_sanity": sanity(p, generations, judgments)}


def sanity(p, generations: pd.DataFrame, judgments: pd.DataFrame) -> pd.DataFrame:
    """The judge stage's judges (the outcome role as the judge params name for it) on the check set and against
    each other on each model's replies (``judge_sanity``)."""
    fr = p.studies[NAME]
    used = {"outcome": fr.outcome_judge, **{j: j for j in (*second_judges(fr), "learned_harmful")}}
    return judge_sanity.table(p, judgments, generations, used)


def locality_check(tokenizer, wrapper: str, frames: dict) -> None:
    """``make check``: the frames differ only inside the wrapper's slot under this tokenizer."""
    check_locality(tokenizer, wrapper, frames, PROBE_QUERY, "probe body")
