"""A verdict for a guard run elsewhere, the user's route into the study: ``make guard-items`` writes the
blind items a guard must score (``answers.guard_items``), ``make guard-verdict`` reads its answers and says
which policy it follows, beside the run's arms (``following``), with the rule's calibration on the rows it
scored (``simulation``)."""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from ... import config, paths, store
from ...config import ParamsError
from ...plots import save
from ..contract import Command
from . import charts, design, following, simulation
from .answers import SCOPES, answered_scope, benchmark_scores, guard_items, guard_key, read_answers, scope_rows
from .params import NAME
from .stages import split_items


def write_guard_items(params_file: str, out: str, scope: str = "benchmark") -> Path:
    """``make guard-items OUT=file.csv [SCOPE=all]``: every prompt a guard must score
    (``answers.guard_items``): the clean benchmark split, or with ``all`` every row of the pool (a
    guard never trained on the arms' pool)."""
    if scope not in SCOPES:
        raise ParamsError(f"make guard-items: SCOPE={scope!r}; expected one of {', '.join(SCOPES)}")
    p = config.load(params_file)
    if NAME not in p.studies:
        raise ParamsError(f"{params_file}: no policy section; the guard items are the policy study's")
    items = split_items(p)
    table = guard_items(items, p.seed, scope)
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False)
    key = paths.run_dir(p.run_name) / NAME / KEY_FILE  # the map back from the blind ids, kept with the run
    key.parent.mkdir(parents=True, exist_ok=True)
    guard_key(items, p.seed).to_csv(key, index=False)
    return path


KEY_FILE = "guard_items_key.csv"


def guard_verdict_files(verdicts_file: str, run_name: str, params_file: str, guard: str | None = None) -> list[str]:
    """``make guard-verdict VERDICTS=file.csv RUN=name [GUARD=label]``: the guard's verdict (``following``)
    beside the run's arms (``stats/policy/guard_verdict.csv``), written to ``results/<run>/``:
    ``guard_verdict.csv`` (one row per guard), ``guard_scores.csv`` (per benchmark) and
    ``guard_verdict.png``. Returns the verdict sentences."""
    p = config.load(params_file)
    folder = paths.run_dir(run_name)
    store.check_layout(folder)
    items_file, arms_file = folder / NAME / "items.parquet", folder / "stats" / NAME / "guard_verdict.csv"
    for f in (items_file, arms_file):
        if not f.is_file():
            raise FileNotFoundError(f"{f}: not found; run the policy study first (make all PARAMS=... STUDIES=policy)")
    items = design.own(pd.read_parquet(items_file))
    # blind ids back to the items' own: the map make guard-items kept, else the same hash from the run's seed
    key_file = folder / NAME / KEY_FILE
    key = pd.read_csv(key_file, dtype=str) if key_file.is_file() else guard_key(items, p.seed)
    answers = read_answers(verdicts_file, items["item_id"].tolist(), guard, key)
    # a guard that scored the items of `make guard-items SCOPE=all` (never trained on the arms' pool, so nothing
    # to decontaminate) is read on every row of the pool; otherwise on the clean benchmark split, as the arms are
    scope = answered_scope(answers, items)
    rows = scope_rows(items, scope)
    alpha = p.stats.alpha
    theirs = following.verdicts(answers, rows, alpha, p.seed, scope)
    run_table = pd.read_csv(arms_file)
    arms_at_seed = run_table[(run_table["kind"] == "arm") & ~run_table["guard"].str.contains("|", regex=False)]
    floor = float(run_table["seed_floor"].iloc[0])
    theirs = following.position(theirs, arms_at_seed, floor)
    theirs.to_csv(folder / "guard_verdict.csv", index=False)
    pairs = following.rule_pair_positions(answers, rows, alpha, p.seed)
    pairs.to_csv(folder / "guard_positions.csv", index=False)
    benchmark_scores(answers, rows, alpha).to_csv(folder / "guard_scores.csv", index=False)
    # the run's calibration (on the clean benchmark split); a run analysed before the study wrote one, or a guard
    # scored on every row of the pool, gets the rule simulated on the rows it scored
    # scored on the items the guard answered: a guard that skipped items gets the rule simulated on those it answered
    cal_file = folder / "stats" / NAME / "verdict_calibration.csv"
    answered = rows[rows["item_id"].isin(set(answers["id"]))].reset_index(drop=True)
    run_cal = pd.read_csv(cal_file) if cal_file.is_file() else None
    draws = int(run_cal["draws"].iloc[0]) if run_cal is not None else p.studies[NAME].calibration_draws
    cal = (run_cal if run_cal is not None and scope == "benchmark" and len(answered) == len(rows) else
           simulation.run_calibration(answered, alpha, p.seed, draws))  # at the run's draws
    shown = pd.concat([arms_at_seed, theirs], ignore_index=True)
    fig = charts.guard_position(
        shown, f"Run {run_name!r}: {len(arms_at_seed)} trained arms at the run seed (seed floor of their agreement "
               f"with A {floor:.2f}) and the guard(s) of {Path(verdicts_file).name}; {int(theirs['n_disputed'].max())} "
               f"disputed {'clean benchmark items' if scope == 'benchmark' else 'items of the whole pool'} "
               "(binary labels of A and B differ); position between the guard's own "
               f"flag rates on the undisputed items of the same dataset and format; {1 - alpha:.0%} Jeffreys-posterior "
               "intervals.", following.MARGIN)
    save(fig, "guard_verdict", [folder])
    plt.close(fig)
    return following.sentences(theirs, alpha, pairs) + [simulation.trust_line(cal)]


def _guard_items_command(args) -> list[str]:
    return [f"wrote {write_guard_items(args.params, args.out, args.scope or 'benchmark')}"]


def _guard_verdict_command(args) -> list[str]:
    return guard_verdict_files(args.verdicts, args.run, args.params, args.guard or None) + [
        f"wrote results/{args.run}/guard_verdict.csv, guard_scores.csv, guard_verdict.png"]


COMMANDS = {
    "guard-items": Command(
        "every prompt a guard must score for the policy study's verdict (CSV: id, prompt)",
        ((("--out",), {"required": True}),
         (("--scope",), {"default": "benchmark", "help": "benchmark (the clean benchmark split) or all (every "
                                                         "row of the pool: a guard never trained on the arms' "
                                                         "pool)"}),
         (("--params",), {"default": "params/default.yaml"})),
        _guard_items_command),
    "guard-verdict": Command(
        "which policy a guard follows, from its answers (CSV: id, verdict or p_unsafe[, guard])",
        ((("--verdicts",), {"required": True}), (("--run",), {"required": True}),
         (("--guard",), {"default": "", "help": "the guard's name (a file without a guard column), or the one "
                                                "guard to read"}),
         (("--params",), {"default": "params/default.yaml"})),
        _guard_verdict_command)}
