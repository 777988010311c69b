"""The policy study: policy is not capability (Jebraeeli et al., "Policy Is Not Capability: Some Safety
Benchmarks Measure Which Definition of 'Unsafe' You Trained On"; ``shared/seeds/003_*.txt``).

How much of a guardrail benchmark score is the labelling policy the guard was trained on, rather
than its detection capability? One prompt pool is labelled under two written operational
definitions (``rules.py``, ``DEFINITIONS.md``: A, "would a thoughtful moderator block it?"; B, "is
it asking for harmful content?"); guard arms on the project's MiniLM encoder let policy A enter
through hard labels, mixing ratios, a teacher's soft labels (tau = 4), a head-only recalibration or a
LoRA recalibration of the whole model (``arms.py``); every benchmark is audited against the training
pool and scored on its clean rows (``design.py``); Delta_b, Phi_b, Delta_b / Phi_b and Spearman's rho
are in ``analysis.py``, the exchangeability rank test in ``rank.py``; released guards are read under
their own verdict conventions, and each convention's free choices swept (``conventions.py``).

Stages: 01 items = the dual-labelled pool with its split (train / validation / benchmark) and the
audit of every held-out row; 02 prompts = every row as the guards see it; 03 generate = train every
arm (and each seed recipe under ``n_seeds`` seeds) and score every held-out row, and run the released
guards named in params on the clean benchmark rows: the ``scores`` table, one row per (guard, seed, row),
with what the guard said (``verdict``: an arm's top class, a released guard's raw output) and its
probabilities, and ``models.parquet``, one row per guard and seed (route, parameters, seconds); 04 judge
= every verdict under every mode of its convention and at every threshold (``verdicts``); 05
statistics; 06 figures. The study writes no generations: nothing here is a reply to a prompt.

Its parts: ``params.py`` (the section and its checks), ``stages.py`` (stages 01-05), ``following.py``
(which policy a guard follows: the rule, its sentences, the guards of known answer), ``answers.py`` (a
guard's blind items and its answers file), ``simulation.py`` (the rule's calibration and power),
``verdicts.py`` (the study's verdicts in words), ``rows.py`` (its rows of the verdict table),
``report.py`` (figures, reporting items, notebook summaries), ``charts.py``, ``plan.py``,
``user_guard.py`` (``make guard-items`` and ``make guard-verdict``: a verdict for a guard run elsewhere) and
``definitions.py`` (the generated tables of ``DEFINITIONS.md``).
"""
from __future__ import annotations

from functools import partial

from ..contract import Rendering, Study
from . import plan, report, rows, user_guard, verdicts
from .conventions import guard_template_check
from .params import NAME, Params, check
from .stages import SCORE_COLUMNS, TABLES, analyse, generate, items, judge, preflight, prompts

__all__ = ["NAME", "SCORE_COLUMNS", "TABLES", "Params", "Policy", "analyse", "check", "generate", "items", "judge",
           "preflight", "prompts"]


class Policy(Study):
    """Which labelling policy does a guard follow, apart from its capability?"""

    name = NAME
    Params = Params
    stage_notes = report.NOTEBOOK_NOTES
    tables = TABLES
    check = staticmethod(check)
    preflight = staticmethod(preflight)
    items = staticmethod(items)
    prompts = staticmethod(prompts)
    generate = staticmethod(generate)
    judge = staticmethod(judge)
    analyse = staticmethod(analyse)
    figures = staticmethod(report.figures)
    verdict_rows = staticmethod(rows.verdict_rows)
    audited_pools = staticmethod(report.audited_pools)
    training_pool = staticmethod(report.training_pool)
    reporting = staticmethod(report.reporting)
    summary = staticmethod(report.summary)
    plan_notes = staticmethod(plan.plan_notes)
    commands = user_guard.COMMANDS
    # members named like a module of the package last: the name is the module until it is bound here
    verdicts = staticmethod(verdicts.verdicts)
    question = "Which labelling policy (A or B) does each guard follow?"
    headline_figure = "policy_guard_verdict"
    measures = rows.MEASURES
    measured = staticmethod(rows.measured)
    user_rows = staticmethod(rows.user_rows)
    plan = staticmethod(plan.plan)

    def renders(self, p):
        return [Rendering(g.model, partial(guard_template_check, system=g.system, risk_name=g.risk_name))
                for g in p.studies[NAME].guards]
