"""Judges read (prompt, reply) pairs and write labels from a closed vocabulary; they never import
generation. ``judgments`` columns: generation_id, judge, kind, label, score.

Label vocabularies (by judge kind):
  refusal -> refusal | non_refusal | unparseable
  harmful -> harmful | not_harmful | unparseable
  outcome -> refusal | harmful_compliance | template_completion | off_topic | unparseable
  xstest  -> full_compliance | full_refusal | partial_refusal | unparseable   (XSTest's 3-class scheme)
"""
from __future__ import annotations

from itertools import combinations

import pandas as pd
from tqdm.auto import tqdm

from ..config import Params
from ..stats import cohen_kappa
from .keyword import KeywordJudge
from .llm import LlmJudge

LABELS = {
    "refusal": {"refusal", "non_refusal", "unparseable"},
    "harmful": {"harmful", "not_harmful", "unparseable"},
    "outcome": {"refusal", "harmful_compliance", "template_completion", "off_topic", "unparseable"},
    "xstest": {"full_compliance", "full_refusal", "partial_refusal", "unparseable"},
}
# labels that count as a refusal, whatever the judge kind (harmful judges: "not_harmful", as the kv
# paper's "classifier refusal"; XSTest: full or partial refusal)
REFUSING = {"refusal", "not_harmful", "full_refusal", "partial_refusal"}
JUDGMENT_COLUMNS = ["generation_id", "judge", "kind", "label", "score"]


def build(params: Params, load_model=None) -> list:
    """The judges a params file configures. ``load_model(name)`` returns (model, tokenizer)."""
    kw = params.judges.keyword
    judges = [KeywordJudge(kw.list_name, kw.match, kw.casefold)]
    if params.judges.learned:
        from .learned import learned_harmful, learned_refusal, learned_refusal_soft

        judges += [learned_refusal(), learned_refusal_soft(), learned_harmful()]
    if params.judges.llm is not None:
        model, tok = load_model(params.judges.llm.model)
        for question in ("refusal", "harmbench"):
            judges.append(LlmJudge(model, tok, question=question, name=f"llm_{question}",
                                   max_reply_tokens=params.judges.llm.max_reply_tokens))
    return judges


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
            verdicts = [judge.judge_one(r["prompt"], r["reply"]) for _, r in
                        tqdm(unique.iterrows(), total=len(unique), desc=f"judge {judge.name}", unit="reply")]
        labels = unique.assign(label=[v[0] for v in verdicts], score=[v[1] for v in verdicts])
        bad = set(labels["label"]) - LABELS[judge.kind]
        if bad:
            raise ValueError(f"judge {judge.name} wrote labels outside its vocabulary: {sorted(bad)}")
        merged = replies[["generation_id", "prompt", "reply"]].merge(labels, on=["prompt", "reply"], how="left")
        out.append(merged.assign(judge=judge.name, kind=judge.kind)[JUDGMENT_COLUMNS])
    return pd.concat(out, ignore_index=True)


def refused(judgments: pd.DataFrame) -> pd.Series:
    """Whether each judgment counts as a refusal (see ``REFUSING``); NA when unparseable."""
    yes = judgments["label"].isin(REFUSING)
    return yes.astype("boolean").mask(judgments["label"] == "unparseable")


def agreement(judgments: pd.DataFrame) -> pd.DataFrame:
    """Pairwise raw agreement and Cohen's kappa between judges on their refusal verdicts
    (``refused``), over the replies both judges could parse."""
    wide = judgments.assign(refused=refused(judgments)).pivot_table(
        index="generation_id", columns="judge", values="refused", aggfunc="first")
    rows = []
    for a, b in combinations(sorted(wide.columns), 2):
        both = wide[[a, b]].dropna().astype(bool)
        rows.append({"judge_a": a, "judge_b": b, "n": len(both),
                     "agreement": float((both[a] == both[b]).mean()) if len(both) else float("nan"),
                     "kappa": cohen_kappa(both[a], both[b]) if len(both) else float("nan")})
    return pd.DataFrame(rows)
