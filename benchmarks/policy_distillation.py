"""Why does distillation from the policy-A teacher barely move the student?

Trains the distilled arms of params/default.yaml (E7: hard labels B + A teacher; E8: half A, half B
+ A teacher) on the default split, frozen MiniLM embeddings, seed 0, under each combination of the
knobs that weigh the teacher against the hard labels: where the balanced class weights apply
(``hard``: the hard-label term only, the study's first recipe; ``rows``: both terms, as a
class-balanced sampler does), the distillation weight alpha and the temperature tau. Prints, per
variant, the share of the clean held-out HarmBench-copyright rows (the largest disputed class: A
HARMFUL, B GENERIC_SAFE) the student flags, its binary agreement with A on every disputed clean
held-out row, and the teacher's. Usage (the 16 fits take about a minute on two cores after every text
is embedded once; 15 min in all measured here, on a machine shared with three other jobs):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/policy_distillation.py [params/default.yaml]
"""
from __future__ import annotations

import sys
import time
from dataclasses import replace

import numpy as np
import torch

from refusal_audit import config
from refusal_audit.encoder import embed
from refusal_audit.studies.policy import arms
from refusal_audit.studies.policy.stages import split_items


def main(params_file: str = "params/default.yaml") -> None:
    start = time.perf_counter()
    p = config.load(params_file)
    s = p.studies["policy"]
    items = split_items(p)
    train = items[items["role"] == "train"].reset_index(drop=True)
    held = items[(items["role"] == "benchmark") & items["clean"]].reset_index(drop=True)
    x = torch.as_tensor(np.asarray(embed(train["text"].tolist()), dtype=np.float32))
    xh = torch.as_tensor(np.asarray(embed(held["text"].tolist()), dtype=np.float32))
    copy_rows = (held["benchmark"] == "harmbench_copyright").to_numpy()
    disputed = held["disputed_binary"].to_numpy(bool)
    ua = held["unsafe_a"].to_numpy(bool)
    print(f"embedded {len(train)} training and {len(held)} clean benchmark rows in {time.perf_counter() - start:.0f} s; "
          f"{copy_rows.sum()} copyright rows, {disputed.sum()} disputed rows")

    def flags(model) -> np.ndarray:
        with torch.no_grad():
            prob = torch.softmax(model(xh), 1).numpy()
        return prob[:, arms.UNSAFE_INDEX].sum(1) >= 0.5

    teacher = arms.train_guard(x, arms.labels_of(train["label_a"]), s.teacher.hidden, 0 + 104729, s.teacher)
    with torch.no_grad():
        soft = teacher(x)
    f = flags(teacher)
    print(f"teacher A (hidden {s.teacher.hidden}): copyright {f[copy_rows].mean():.2f}, "
          f"agreement with A on disputed {np.mean(f[disputed] == ua[disputed]):.2f}")
    w = arms.class_weights(arms.labels_of(train["label_b"])).numpy()
    print("balanced class weights under B's hard labels: " + ", ".join(f"{c} {v:.2f}" for c, v in zip(arms.CLASSES, w)))
    print(f"{'arm':<16}{'weighting':<10}{'alpha':>6}{'tau':>5}{'copyright':>11}{'agree_A_disputed':>18}")
    for name, hard_a in (("E7_teacher_a", 0.0), ("E8_reverse_mix", 0.5)):
        y = arms.mixed_labels(train, hard_a, 0)
        for weighting in ("hard", "rows"):
            for alpha in (0.5, 0.9):
                for tau in (1.0, 4.0):
                    m = arms.train_guard(x, y, s.student.hidden, 0, replace(s.student), soft=soft, tau=tau, alpha=alpha,
                                         kd_weighting=weighting)
                    f = flags(m)
                    print(f"{name:<16}{weighting:<10}{alpha:>6.1f}{tau:>5.0f}{f[copy_rows].mean():>11.2f}"
                          f"{np.mean(f[disputed] == ua[disputed]):>18.2f}")
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main(*sys.argv[1:])
