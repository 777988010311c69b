"""The written definitions: the generated blocks of ``DEFINITIONS.md`` (both policies' rule tables and the
measured A/B disagreement on the pool built from data/). ``python -m refusal_audit.studies.policy.definitions``
rewrites them; ``tests/test_policy_rules.py`` fails while they differ from the rules and the data.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .rules import CLASSES, POLICY_A, POLICY_B, Policy, RuleError, apply_policies, build_pool, crosstab, disagreement


def _md_table(df: pd.DataFrame) -> str:
    cells = [[str(v) for v in df.columns]] + [[str(v) for v in row] for row in df.itertuples(index=False)]
    lines = ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in cells]
    lines.insert(1, "|" + "|".join("---" for _ in df.columns) + "|")
    return "\n".join(lines)


def rules_markdown(policy: Policy) -> str:
    """The policy's rule table in Markdown (read in order; the first matching rule labels a row)."""
    rows = [{"rule": policy.rule_id(i), "dataset": r.dataset, "field": r.field or "(every row)",
             "values": ", ".join(f"`{v}`" for v in r.values), "class": r.label, "why": r.why}
            for i, r in enumerate(policy.rules)]
    return _md_table(pd.DataFrame(rows))


def definitions_tables(labelled: pd.DataFrame) -> str:
    """The measured tables DEFINITIONS.md prints: rows per dataset and class, the A x B cross-table,
    the disagreement per class, and per dataset."""
    def fmt(x) -> str:
        return "" if pd.isna(x) else f"{x:.3f}" if isinstance(x, float) else str(x)

    counts = (labelled.groupby(["dataset", "label_a", "label_b"], sort=False).size().rename("rows").reset_index())
    per_class = disagreement(labelled)
    overall = per_class[per_class["class"].isin(["4-class", "binary"])][["class", "n", "n_both", "disagree_either"]]
    overall = overall.rename(columns={"class": "labels", "n_both": "agree", "disagree_either": "disagreement"})
    per_class = per_class[per_class["class"].isin(CLASSES)].drop(columns="n")
    per_ds = disagreement(labelled, by="dataset")
    per_ds = per_ds[per_ds["class"].isin(["4-class", "binary"])].pivot(index="dataset", columns="class",
                                                                        values="disagree_either")
    per_ds.insert(0, "n", labelled.groupby("dataset", sort=False).size())
    per_ds = per_ds.reset_index()
    ct = crosstab(labelled).reset_index()
    parts = [("Rows per dataset and label pair", counts), ("A (rows) x B (columns)", ct),
             ("Overall disagreement", overall), ("Disagreement per class", per_class),
             ("Disagreement per dataset", per_ds)]
    return "\n\n".join(f"**{title}**\n\n{_md_table(t.map(fmt))}" for title, t in parts)


DEFINITIONS = Path(__file__).with_name("DEFINITIONS.md")
_BLOCKS = ("rules-a", "rules-b", "measured")


def definitions_text(text: str, labelled: pd.DataFrame) -> str:
    """``text`` (DEFINITIONS.md) with its generated blocks (between ``<!-- begin NAME -->`` and
    ``<!-- end NAME -->``) rewritten from the rules and the dual-labelled pool."""
    content = {"rules-a": rules_markdown(POLICY_A), "rules-b": rules_markdown(POLICY_B),
               "measured": definitions_tables(labelled)}
    for name in _BLOCKS:
        begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
        if begin not in text or end not in text:
            raise RuleError(f"DEFINITIONS.md: missing the markers {begin} ... {end}")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = f"{head}{begin}\n{content[name]}\n{end}{tail}"
    return text


def main() -> None:
    """Rewrite the generated tables of DEFINITIONS.md from the rules and the pool built from data/."""
    DEFINITIONS.write_text(definitions_text(DEFINITIONS.read_text(), apply_policies(build_pool())))
    print(f"wrote {DEFINITIONS}")


if __name__ == "__main__":
    main()
