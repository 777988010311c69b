"""The policy study's params section: its dataclasses (the split, the guards trained from scratch, head-only
and LoRA recalibration, distillation, the arms, released guards) and their checks."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ...config import need
from . import arms, conventions, rules

NAME = "policy"


@dataclass
class SplitParams:
    train: float = 0.5         # share of each stratum in the training pool
    validation: float = 0.15   # share held out as the validation split; the rest are benchmark rows
    max_per_dataset: int = 0   # > 0: at most this many rows per dataset, drawn by stratum (small runs)


@dataclass
class FitParams:
    """A guard trained from scratch on frozen embeddings (student or teacher)."""

    hidden: int = 128
    epochs: int = 30
    lr: float = 0.003
    batch_size: int = 64
    weight_decay: float = 0.0001


@dataclass
class HeadParams:
    """Head-only recalibration."""

    epochs: int = 60
    lr: float = 0.01
    batch_size: int = 64
    weight_decay: float = 0.0


@dataclass
class KdParams:
    tau: float = 4.0    # the paper's distillation temperature
    alpha: float = 0.5  # weight of the distillation term (1 - alpha on the hard labels)
    weighting: str = "rows"  # rows: class weights on both terms (a class-balanced sampler); hard: hard-label term only


@dataclass
class LoraParams:
    """Whole-model recalibration: LoRA adapters on MiniLM's attention, with the guard's body and head."""

    r: int = 8
    alpha: int = 16
    dropout: float = 0.1
    targets: list[str] = field(default_factory=lambda: ["query", "value"])
    epochs: int = 3
    lr: float = 0.002       # LoRA adapters
    head_lr: float = 0.01   # the guard's body and head
    batch_size: int = 16
    max_rows: int = 300     # cap on the calibration set (each row costs encoder forward and backward passes)


@dataclass
class ArmParams:
    """One arm: where policy A enters (``arms.py``)."""

    name: str
    hard_a: float = 0.0           # share of training rows whose hard label is A's (the rest B's)
    teacher: str = "none"         # none | a | b: distil from a teacher trained on that policy (tau = kd.tau)
    recalibrate: str = "none"     # none | head | lora: recalibrate the base arm's model
    base: str | None = None       # the arm recalibrated (recalibrate != none)
    calibration: float = 1.0      # share of the training pool in the calibration set
    calibration_policy: str = "a"  # the calibration set's labels


@dataclass
class GuardParams:
    """A released guard (a model under ``models:``) read under its own verdict convention."""

    model: str
    convention: str               # llama_guard | qwen3guard | granite_guardian
    max_new_tokens: int = 20
    system: str | None = None     # a system prompt (a prompted model used as a guard); released guards: none
    risk_name: str | None = None  # Granite Guardian's guardian_config risk (e.g. harm)
    batch_size: int = 8
    per_benchmark: int = 0        # > 0: at most this many clean prompts per benchmark (drawn under the seed)


def _default_arms() -> list[ArmParams]:
    return [
        ArmParams("E1_b_only", hard_a=0.0, teacher="b"),
        ArmParams("E2_mix_a25", hard_a=0.25, teacher="b"),
        ArmParams("E3_mix_a50", hard_a=0.5, teacher="b"),
        ArmParams("E4_mix_a75", hard_a=0.75, teacher="b"),
        ArmParams("E5_hard_a_teacher_b", hard_a=1.0, teacher="b"),
        ArmParams("E6_hard_a", hard_a=1.0, teacher="none"),
        ArmParams("E7_teacher_a", hard_a=0.0, teacher="a"),
        ArmParams("E8_reverse_mix", hard_a=0.5, teacher="a"),
        ArmParams("E9_head_a16", recalibrate="head", base="E1_b_only", calibration=0.16),
        ArmParams("E10_head_a100", recalibrate="head", base="E1_b_only", calibration=1.0),
        ArmParams("E11_lora_a16", recalibrate="lora", base="E1_b_only", calibration=0.16),
        # the head-only routes' equal-capacity counterparts on the other side of the contrast
        ArmParams("E12_head_b16", recalibrate="head", base="E1_b_only", calibration=0.16, calibration_policy="b"),
        ArmParams("E13_head_b100", recalibrate="head", base="E1_b_only", calibration=1.0, calibration_policy="b"),
    ]


@dataclass
class Params:
    datasets: list[str] = field(default_factory=lambda: [*rules.DEFAULT_DATASETS, "simplesafetytests",
                                                         "openai_moderation", "written"])
    split: SplitParams = field(default_factory=SplitParams)
    student: FitParams = field(default_factory=FitParams)
    teacher: FitParams = field(default_factory=lambda: FitParams(hidden=512))
    head: HeadParams = field(default_factory=HeadParams)
    kd: KdParams = field(default_factory=KdParams)
    lora: LoraParams = field(default_factory=LoraParams)
    arms: list[ArmParams] = field(default_factory=_default_arms)
    seed_recipes: list[str] = field(default_factory=lambda: ["E1_b_only", "E3_mix_a50", "E9_head_a16"])
    # the arms of the confirmatory rank test (empty: every arm): arms whose capacity has a counterpart on
    # the other side of the contrast (scratch students of one size; head-only refits under A and under B)
    rank_arms: list[str] = field(default_factory=list)
    n_seeds: int = 3              # seeds per seed recipe (the run's seed, then seed + 1, ...)
    thresholds: list[float] = field(default_factory=lambda: [0.1, 0.25, 0.5, 0.75, 0.9])
    policy_loaded: float = 0.05   # a benchmark is policy-loaded when A and B disagree on this share of its clean rows
    semantic_audit: bool = False  # also flag embedding near-duplicates (cosine >= 0.85) in the audit
    # simulated guards per profile of the verdict's calibration (verdict_calibration.csv); a run whose items
    # match benchmarks/policy_verdict_calibration.csv at these draws reads that table instead (the simulation
    # takes about 30 s, more than make all may spend)
    calibration_draws: int = 500
    guards: list[GuardParams] = field(default_factory=list)


def check(p, where: str) -> None:
    """The policy section's constraints (no files, no models)."""
    s = p.studies[NAME]
    need(bool(s.datasets) and len(set(s.datasets)) == len(s.datasets) and set(s.datasets) <= set(rules.SOURCES),
         where, "policy.datasets", f"a non-empty list without repeats of {', '.join(rules.SOURCES)}", s.datasets)
    sp = s.split
    need(0 < sp.train < 1, where, "policy.split.train", "a number in (0, 1)", sp.train)
    need(0 <= sp.validation < 1 and sp.train + sp.validation < 1, where, "policy.split.validation",
         "a number >= 0 with train + validation < 1 (benchmark rows are the rest)", sp.validation)
    need(sp.max_per_dataset >= 0, where, "policy.split.max_per_dataset", "an integer >= 0", sp.max_per_dataset)
    for key in ("student", "teacher"):
        f = getattr(s, key)
        for k in ("hidden", "epochs", "batch_size"):
            need(getattr(f, k) >= 1, where, f"policy.{key}.{k}", "an integer >= 1", getattr(f, k))
        need(f.lr > 0 and f.weight_decay >= 0, where, f"policy.{key}.lr", "lr > 0 and weight_decay >= 0", f.lr)
    need(s.head.epochs >= 1 and s.head.batch_size >= 1 and s.head.lr > 0, where, "policy.head",
         "epochs >= 1, batch_size >= 1, lr > 0", asdict(s.head))
    need(s.kd.tau > 0, where, "policy.kd.tau", "a number > 0", s.kd.tau)
    need(0 <= s.kd.alpha <= 1, where, "policy.kd.alpha", "a number in [0, 1]", s.kd.alpha)
    need(s.kd.weighting in ("rows", "hard"), where, "policy.kd.weighting", "rows or hard", s.kd.weighting)
    lo = s.lora
    need(lo.r >= 1 and lo.alpha >= 1 and lo.epochs >= 1 and lo.batch_size >= 1 and lo.max_rows >= 1, where,
         "policy.lora", "r, alpha, epochs, batch_size, max_rows >= 1", asdict(lo))
    need(0 <= lo.dropout < 1 and lo.lr > 0 and lo.head_lr > 0 and bool(lo.targets), where, "policy.lora",
         "0 <= dropout < 1, lr > 0, head_lr > 0, targets non-empty", asdict(lo))
    names = [a.name for a in s.arms]
    need(len(names) >= 2 and len(set(names)) == len(names), where, "policy.arms",
         "at least two arms with distinct names", names)
    for i, a in enumerate(s.arms):
        key = f"policy.arms[{i}]"
        need(bool(a.name) and "|" not in a.name, where, f"{key}.name", "a non-empty name without '|'", a.name)
        need(0 <= a.hard_a <= 1, where, f"{key}.hard_a", "a number in [0, 1]", a.hard_a)
        need(a.teacher in ("none", "a", "b"), where, f"{key}.teacher", "none, a or b", a.teacher)
        need(a.recalibrate in ("none", "head", "lora"), where, f"{key}.recalibrate", "none, head or lora",
             a.recalibrate)
        need(a.calibration_policy in ("a", "b"), where, f"{key}.calibration_policy", "a or b", a.calibration_policy)
        if a.recalibrate == "none":
            need(a.base is None, where, f"{key}.base", "no base (only a recalibrated arm has one)", a.base)
        else:
            earlier = {b.name: b for b in s.arms[:i]}
            need(a.base in earlier and earlier[a.base].recalibrate == "none", where, f"{key}.base",
                 f"an earlier arm trained from scratch ({[n for n, b in earlier.items() if b.recalibrate == 'none']})",
                 a.base)
            need(0 < a.calibration <= 1, where, f"{key}.calibration", "a number in (0, 1]", a.calibration)
    lasts = [arms.last_signal(a) for a in s.arms]
    need(0 < lasts.count("a") < len(lasts), where, "policy.arms",
         "at least one arm whose last supervision signal is policy A and one whose is not (the rank test)",
         dict(zip(names, lasts)))
    need(bool(s.seed_recipes) and set(s.seed_recipes) <= set(names) and len(set(s.seed_recipes)) == len(s.seed_recipes),
         where, "policy.seed_recipes", f"a non-empty list of distinct arm names ({names})", s.seed_recipes)
    ranked = [a for a in s.arms if a.name in s.rank_arms] if s.rank_arms else list(s.arms)
    need(set(s.rank_arms) <= set(names) and len(set(s.rank_arms)) == len(s.rank_arms), where, "policy.rank_arms",
         f"distinct arm names ({names}); empty = every arm", s.rank_arms)
    need(0 < [arms.last_signal(a) for a in ranked].count("a") < len(ranked), where, "policy.rank_arms",
         "at least one arm whose last supervision signal is policy A and one whose is not", s.rank_arms)
    need(s.n_seeds >= 2, where, "policy.n_seeds", "an integer >= 2 (the seed floor)", s.n_seeds)
    need(isinstance(s.calibration_draws, int) and s.calibration_draws >= 20, where, "policy.calibration_draws",
         "an integer >= 20 (simulated guards per profile)", s.calibration_draws)
    need(bool(s.thresholds) and all(0 < t < 1 for t in s.thresholds), where, "policy.thresholds",
         "a non-empty list of numbers in (0, 1)", s.thresholds)
    need(0 < s.policy_loaded <= 1, where, "policy.policy_loaded", "a number in (0, 1]", s.policy_loaded)
    for i, g in enumerate(s.guards):
        key = f"policy.guards[{i}]"
        need(g.model in p.models, where, f"{key}.model", f"a model named under models ({sorted(p.models)})", g.model)
        need(g.convention in conventions.RELEASED, where, f"{key}.convention",
             f"one of {', '.join(conventions.RELEASED)}", g.convention)
        need(g.max_new_tokens >= 1 and g.batch_size >= 1 and g.per_benchmark >= 0, where, key,
             "max_new_tokens >= 1, batch_size >= 1, per_benchmark >= 0", asdict(g))
        need(g.risk_name is None or g.convention == "granite_guardian", where, f"{key}.risk_name",
             "no risk_name unless the convention is granite_guardian", g.risk_name)
    models = [g.model for g in s.guards]
    need(len(set(models)) == len(models), where, "policy.guards", "each model at most once", models)
