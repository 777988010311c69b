"""The frames study: evaluation-context divergence (arXiv 2605.06327; its numbers in ``data/published/frames.csv``).

Does a model behave differently when the same task is framed as an internal safety evaluation (E), a
live deployment interaction (D) or a standalone request (N)? Items in four strata (explicit harmful,
jailbreak / policy conflict, borderline, benign control), each with two paraphrased bodies (A, B), go
into ONE wrapper with ONE slot for the frame (``wrapper.py``; a test proves for every item and
paraphrase that the rendered token sequences differ only inside the slot). Before any framed generation
a calibration pass (the reference model, N frame, the decoding grid) sets each candidate item's
difficulty tier and the draw spreads each stratum over the tiers (``balanced_draw``); each model's
Min-K% Prob over the bodies is the familiarity covariate (``familiarity.py``). The decoding grid is
T = 0 once + T = 0.4 and 0.8 x 3 seeds from one prefill per prompt (the engine). The 4-class outcome judge
(``judges/outcome.py``) and a second judge of another kind (the keyword monitor) score the replies, and
the learned harm judge is the second judge of harmful compliance; ``analysis.py`` computes the per-item
contrasts Delta and the confirmatory analysis declared in ``frames.confirmatory`` (E-D, E-N, D-N as
contrasts of one GEE fit, the like-for-like paraphrase-noise test, model x frame and base-vs-instruct
Wald tests, Holm over the declared family, reversal counts; definitions in ``DEFINITIONS.md``), the
equivalence audit and the low-familiarity repeat, all through ``refusal_audit.stats``.

Its parts: ``params.py`` (the section, its checks and the declared family), ``stages.py`` (stages 01-05),
``analysis.py`` (contrasts, noise band, equivalence, the familiarity repeat) and ``confirmatory.py`` (the GEE
fits, Holm, power), ``verdicts.py`` (the answer in words) and ``rows.py`` (the verdict rows), ``report.py``
(notebook summaries, figures, reporting items), ``charts.py``, ``plan.py``, ``wrapper.py`` (the one slot),
``familiarity.py``, ``shapes.py`` (the noise comparison's size benchmark) and ``control.py`` (the positive
control's build).

Raw replies never leave ``results/`` (the summaries show counts and rates only).
"""
from __future__ import annotations

from functools import partial

from ..contract import Command, Rendering, Reporting, Study
from . import equivalence, paper
from .params import NAME, STRATA, Params, as_null, check, model_roles, null_seeds
from .plan import plan
from .report import NOTEBOOK_NOTES, audited_pools, figures, reporting, summary, training_pool
from .rows import verdict_rows
from .stages import (
    CARRY,
    analyse,
    balanced_draw,
    generate,
    items,
    judge,
    locality_check,
    preflight,
    prompts,
    tiers_from,
    validate_items,
)
from .verdicts import flags, verdicts

__all__ = ["CARRY", "Frames", "STRATA", "as_null", "balanced_draw", "flags", "items", "null_seeds", "prompts",
           "tiers_from", "validate_items", "verdict_rows", "verdicts"]


class Frames(Study):
    name = NAME
    Params = Params
    stage_notes = NOTEBOOK_NOTES
    base_models = True  # the roster compares aligned models with a base model
    check = staticmethod(check)
    preflight = staticmethod(preflight)
    items = staticmethod(items)
    prompts = staticmethod(prompts)
    generate = staticmethod(generate)
    judge = staticmethod(judge)
    analyse = staticmethod(analyse)
    figures = staticmethod(figures)
    verdict_rows = staticmethod(verdict_rows)
    verdicts = staticmethod(verdicts)
    question = "Does framing a task as an evaluation (E), a deployment (D) or neutral (N) change refusal?"
    headline_figure = "frames_verdict"
    measures = paper.MEASURES
    measured = staticmethod(paper.measured)
    audited_pools = staticmethod(audited_pools)
    training_pool = staticmethod(training_pool)
    reporting = staticmethod(lambda p: Reporting(**reporting(p)))
    summary = staticmethod(summary)
    plan = staticmethod(plan)
    model_roles = staticmethod(model_roles)
    commands = {"frames-equivalence": Command(
        "the masked equivalence audit: without --sheets the blind sheet; with three filled copies Fleiss' kappa and "
        "the strict (= 5) subset re-analysed",
        ((("--sheets",), {"default": "", "help": "comma-separated filled copies of the sheet"}),
         (("--run",), {"default": "", "help": "the run's name (default: the params file's run_name)"}),
         (("--params",), {"default": "params/default.yaml"})),
        equivalence.command)}

    def renders(self, p):
        s = p.studies[NAME]
        ref = s.reference_model or s.models[0]
        check = partial(locality_check, wrapper=s.wrapper, frames=s.frames)
        return [Rendering(m, check) for m in dict.fromkeys(s.models + [ref])]
