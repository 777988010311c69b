"""The confusion study: semantic stability of refusal boundaries (ParaGuard, Anonto et al., arXiv
2512.01037; its numbers in ``data/published/confusion.csv``; no public code exists).

Question: does a model accept one phrasing of an intent and reject a meaning-preserving paraphrase
of it? A global false-rejection rate scores each prompt alone and cannot see this.

01 items: paraphrase clusters (``data/confusion/clusters.csv``: seeds from XSTest safe and
   JailbreakBench benign, HarmBench as harmful contrast, 5 hand-written paraphrases each; or seeds
   paraphrased by a params-named LLM, ``paraphrase.py``), every paraphrase gated against its seed
   (cosine >= tau, Jaccard distance >= delta, safety ensemble not on the other side of the intended
   label, or of the seed's read for a class validated below ``min_accuracy``; near-duplicates collapse;
   ``clusters.py``, ``safety.py``); failures kept with their reason.
02 prompts: each included prompt in each model's chat template, with the span of the user's text.
03 generate: per model, FIRST the token signals of every prompt (one batched forward pass each,
   cached per (model, prompt); ``signals.py``) and from them drift and next-token shift of the pairs
   the metrics may need (``neighbours.signal_pairs``: every same-meaning pair, and each prompt with its
   ``cover`` nearest prompts that may share its meaning, so that N_k(r) is covered), added once to the run's Parquet
   pair table keyed by content hash
   (``pairs.py``); THEN greedy replies from the shared engine.
04 judge: the refusal judges named in ``confusion.judges``; each gives its own ACCEPT / REJECT set.
05 analyse: per arm (model x judge), neighbourhoods over the model's whole corpus (blocked exact
   search; cluster scope as an option): Confusion Rate, Confusion Index (and each signal alone),
   Confusion Depth, FRR, with bootstrap CIs over intents; FRR vs Confusion Rate and where they
   disagree; gate pass rates, drops per rule and the safety gate's validated accuracy; the planted
   control (``analysis.py``).
06 figures: the per-cluster confusion map, the CI distribution, FRR vs Confusion Rate (``charts.py``).

Definitions and the choices the paper leaves open: ``DEFINITIONS.md``.
"""
from __future__ import annotations

from functools import partial
from pathlib import Path

from ..contract import Command, Rendering, Reporting, Study
from . import paper, user_run
from .params import NAME, GateParams, Params, check, confusion_params, decision_judges, refusal_judges
from .plan import plan, plan_notes
from .report import CONTAMINATION_UNIT, NOTEBOOK_NOTES, audited_pools, figures, reporting, summary
from .rows import QUESTION, user_rows, verdict_rows
from .stages import (
    analyse,
    build_items,
    generate,
    items,
    judge,
    known_labels,
    pairs_path,
    preflight,
    prompts,
    seed_rows,
    user_span,
    user_turn_check,
)
from .verdicts import controls_words, gate_verdict, verdicts

__all__ = ["Confusion", "GateParams", "_confusion_command", "controls_words", "analyse", "build_items",
           "confusion_params", "decision_judges", "gate_verdict", "generate", "items", "judge", "known_labels",
           "pairs_path", "plan_notes", "preflight", "prompts", "refusal_judges", "run_user_clusters", "seed_rows",
           "user_span", "user_turn_check", "verdict_rows", "verdicts"]


# --- make confusion: a user's own clusters ---------------------------------------------------------------
def run_user_clusters(clusters_csv: str, model_names: list[str], run_name: str, params_file: str,
                      decisions_csv: str | None = None, pool=None, pairs_csv: str | None = None) -> Path:
    """``make confusion CLUSTERS=file.csv MODELS=a,b RUN=name [DECISIONS=file.csv]``: the study's answer
    on a user's clusters (columns ``cluster_id``, ``prompt``, optional ``id``; a cluster's first row is
    its seed), with the settings of the params file's confusion section: gates, then per model the
    decisions of every decision judge, the token signals and the metrics, or, with ``decisions_csv``
    (``id``, ``decision`` ACCEPT/REJECT, from a guard or any system run elsewhere), those decisions
    alone: no generation, the token signals (CI, drift, shift, contrast) marked not available.
    ``pairs_csv`` (``id_a``, ``id_b``, ``label`` same | different): known labels of pairs of clusters, which
    decide same meaning where they exist (DEFINITIONS.md, "Known labels").
    Every input is checked before any model is loaded. Writes ``results/<RUN>/`` (``user_run.py``)."""
    return user_run.run(clusters_csv, model_names, run_name, params_file, decisions_csv, pool, pairs_csv)


def _confusion_command(args) -> list[str]:
    names = [m for m in (args.models or args.model).split(",") if m.strip()]
    folder = run_user_clusters(args.clusters, names, args.run, args.params, args.decisions or None,
                               pairs_csv=args.pairs or None)
    return [f"wrote {folder}"]


class Confusion(Study):
    name = NAME
    Params = Params
    stage_notes = NOTEBOOK_NOTES
    contamination_unit = CONTAMINATION_UNIT
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
    question = QUESTION
    headline_figure = "confusion_rate_vs_null"
    measures = paper.MEASURES
    measured = staticmethod(paper.measured)
    user_rows = staticmethod(user_rows)
    audited_pools = staticmethod(audited_pools)
    reporting = staticmethod(lambda p: Reporting(**reporting(p)))
    summary = staticmethod(summary)
    plan = staticmethod(plan)
    plan_notes = staticmethod(plan_notes)
    commands = {"confusion": Command(
        "the confusion study on your own clusters (CSV: cluster_id, prompt[, id])",
        ((("--clusters",), {"required": True}),
         (("--models",), {"default": "", "help": "comma-separated model names from params, Hugging Face ids or "
                                                 "local paths"}),
         (("--model",), {"default": "", "help": "one model (an alias of --models)"}),
         (("--decisions",), {"default": "", "help": "CSV (id, decision ACCEPT/REJECT): skip generation, decisions "
                                                    "only"}),
         (("--pairs",), {"default": "", "help": "CSV (id_a, id_b, label same/different): known labels of pairs of "
                                                "clusters"}),
         (("--run",), {"required": True}),
         (("--params",), {"default": "params/default.yaml"})),
        _confusion_command)}

    def renders(self, p):
        s = p.studies[NAME]
        return [Rendering(m, partial(user_turn_check, system=s.system_prompt or None)) for m in s.models]
