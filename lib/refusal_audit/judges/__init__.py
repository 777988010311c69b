"""Judges read (prompt, reply) pairs and write labels from a closed vocabulary; they never import
generation. ``judgments`` columns: generation_id, judge, kind, label, score.

Label vocabularies (by judge kind):
  refusal -> refusal | non_refusal | unparseable
  harmful -> harmful | not_harmful | unparseable
  outcome -> refusal | harmful_compliance | template_completion | off_topic | unparseable
  xstest  -> full_compliance | full_refusal | partial_refusal | unparseable   (XSTest's 3-class scheme)
  degeneracy -> degenerate | off_topic | on_topic | unparseable    (is the reply text about the request)
"""
from __future__ import annotations

from itertools import combinations

import pandas as pd

from .. import progress
from ..config import Params
from ..stats import cohen_kappa
from . import registry

LABELS = {
    "refusal": {"refusal", "non_refusal", "unparseable"},
    "harmful": {"harmful", "not_harmful", "unparseable"},
    "outcome": {"refusal", "harmful_compliance", "template_completion", "off_topic", "unparseable"},
    "xstest": {"full_compliance", "full_refusal", "partial_refusal", "unparseable"},
    "degeneracy": {"degenerate", "off_topic", "on_topic", "unparseable"},
}
# labels that say the model refused (XSTest: full or partial refusal). A study may count more: the kv
# study also counts a harmful judge's "not_harmful" (its paper's "classifier refusal"); that is the
# study's decision, passed in as ``refusing``, never a default here.
REFUSING = frozenset({"refusal", "full_refusal", "partial_refusal"})
JUDGMENT_COLUMNS = ["generation_id", "judge", "kind", "label", "score"]


def build(params: Params, load_model=None) -> list:
    """The run-wide judges a params file switches on (``registry.configured``), built.
    ``load_model(name)`` returns (model, tokenizer) for an LLM judge."""
    return [spec.make(params, load_model) for spec in registry.configured(params)]


def emitted(params: Params) -> set[str]:
    """The names of the judges ``build(params)`` makes, known without loading any of them."""
    return set(registry.names(params))


def definition(name: str) -> str:
    """A registered judge's operational definition in one line, for reports."""
    return registry.get(name).definition


def judge_replies(judges: list, replies: pd.DataFrame) -> pd.DataFrame:
    """Judge every row of ``replies`` (columns generation_id, prompt, reply) with every judge.

    Identical (prompt, reply) pairs are judged once. Labels are checked against the vocabulary.
    """
    unique = replies[["prompt", "reply"]].drop_duplicates().reset_index(drop=True)
    out = []
    for judge in judges:
        if hasattr(judge, "judge_many"):  # judges that take all replies at once (batched, or fast)
            verdicts = judge.judge_many(unique["prompt"].tolist(), unique["reply"].tolist())
        else:
            with progress.bar(len(unique), f"judge {judge.name}", "reply") as bar:
                verdicts = []
                for _, r in unique.iterrows():
                    verdicts.append(judge.judge_one(r["prompt"], r["reply"]))
                    bar.update()
        labels = unique.assign(label=[v[0] for v in verdicts], score=[v[1] for v in verdicts])
        bad = set(labels["label"]) - LABELS[judge.kind]
        if bad:
            raise ValueError(f"judge {judge.name} wrote labels outside its vocabulary: {sorted(bad)}")
        merged = replies[["generation_id", "prompt", "reply"]].merge(labels, on=["prompt", "reply"], how="left")
        out.append(merged.assign(judge=judge.name, kind=judge.kind)[JUDGMENT_COLUMNS])
    return pd.concat(out, ignore_index=True)


def refused(judgments: pd.DataFrame, refusing: frozenset[str] = REFUSING) -> pd.Series:
    """Whether each judgment counts as a refusal (its label is in ``refusing``); NA when unparseable,
    and NA for a judge none of whose labels can say refusal under ``refusing`` (a harmful judge
    under the default convention)."""
    yes = judgments["label"].isin(refusing)
    speaks = judgments["kind"].map(lambda k: bool(LABELS.get(k, set()) & refusing))
    return yes.astype("boolean").mask((judgments["label"] == "unparseable") | ~speaks)


def refusal_table(judgments: pd.DataFrame, refusing: frozenset[str] = REFUSING) -> pd.DataFrame:
    """One row per generation, one column per judge: its refusal verdict (NA where it has none)."""
    wide = judgments.assign(refused=refused(judgments, refusing)).pivot_table(
        index="generation_id", columns="judge", values="refused", aggfunc="first")
    return wide.dropna(axis=1, how="all")


def agreement(judgments: pd.DataFrame, refusing: frozenset[str] = REFUSING) -> pd.DataFrame:
    """Pairwise raw agreement and Cohen's kappa between judges on their refusal verdicts, over the
    replies both judges could parse (judges without a refusal verdict under ``refusing`` are left out)."""
    wide = refusal_table(judgments, refusing)
    rows = []
    for a, b in combinations(sorted(wide.columns), 2):
        both = wide[[a, b]].dropna().astype(bool)
        rows.append({"judge_a": a, "judge_b": b, "n": len(both),
                     "agreement": float((both[a] == both[b]).mean()) if len(both) else float("nan"),
                     "kappa": cohen_kappa(both[a], both[b]) if len(both) else float("nan")})
    return pd.DataFrame(rows, columns=["judge_a", "judge_b", "n", "agreement", "kappa"])
