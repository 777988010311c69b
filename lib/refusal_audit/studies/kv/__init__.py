"""The kv study: soft refusals under KV-cache compression (Chen et al., "When Keywords Drop but Classifiers Hold",
arXiv 2609.31678).

Each harmful prompt (system safety text + neutral filler + query) is prefilled once and decoded under full retention
and under matched eviction (sinks + trailing positions, SnapKV at the same budget); every configured judge scores the
same replies; MMLU-math checks task accuracy under the same retention.

Its parts: ``params.py`` (the section and its checks), ``design.py`` (conditions and the policies that decode each),
``stages.py`` (stages 01-05), ``analysis.py`` and ``simulation.py`` (the statistics and the test's calibration),
``verdicts.py`` (the answer in words and the verdict rows), ``report.py`` (notebook summaries, figures, reporting
items), ``charts.py``, ``plan.py``, ``humans.py`` (human labels), ``control.py`` (the positive control's build) and
``classifier.py`` (the HarmBench classifier wrapper's validation).
"""
from __future__ import annotations

from functools import partial

from ..contract import Command, Rendering, Study, UserGeneration
from . import design, humans, paper, plan, report, rows, verdicts
from .params import NAME, Params, check, family, model_names
from .stages import CARRY, analyse, annotation_sheet, filler_check, generate, items, judge, preflight, prompts

__all__ = ["CARRY", "NAME", "Kv", "Params", "analyse", "annotation_sheet", "check", "family", "filler_check",
           "generate", "items", "judge", "model_names", "preflight", "prompts"]


def _humans_command(args) -> list[str]:
    return humans.run(args.sheets, args.run, args.params)


class Kv(Study):
    """Does KV-cache eviction soften refusals (the keyword monitor falls while a learned judge holds)?"""

    name = NAME
    Params = Params
    stage_notes = report.NOTEBOOK_NOTES
    check = staticmethod(check)
    preflight = staticmethod(preflight)
    items = staticmethod(items)
    prompts = staticmethod(prompts)
    generate = staticmethod(generate)
    judge = staticmethod(judge)
    analyse = staticmethod(analyse)
    figures = staticmethod(report.figures)
    verdict_rows = staticmethod(rows.rows)
    verdict_tables = staticmethod(rows.tables)
    question = rows.QUESTION
    headline_figure = "kv_monitor_difference"
    measures = paper.MEASURES
    measured = staticmethod(paper.measured)
    audited_pools = staticmethod(report.audited_pools)
    training_pool = staticmethod(report.training_pool)
    reporting = staticmethod(report.reporting)
    summary = staticmethod(report.summary)
    # members named like a module of the package last: the name is the module until it is bound here
    verdicts = staticmethod(verdicts.verdicts)
    plan = staticmethod(plan.grid)
    commands = {"kv-humans": Command(
        "filled kv annotation sheets against the run's judges (stats/kv/human_agreement.csv)",
        ((("--sheets",), {"default": "", "help": "comma-separated filled sheets (default: those in the run's "
                                                 "annotation folder)"}),
         (("--run",), {"default": "", "help": "the run's name (default: the params file's run_name)"}),
         (("--params",), {"default": "params/default.yaml"})),
        _humans_command)}

    def renders(self, p):
        s = p.studies[NAME]
        return [Rendering(m, partial(filler_check, system=s.system_prompt or None)) for m in model_names(s)]

    def user_generation(self, p):
        s = p.studies[NAME]
        return UserGeneration(lambda n: design.policy(s, n), s.max_new_tokens)
