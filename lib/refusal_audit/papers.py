"""The papers' numbers beside the run's: each study's seed states headline numbers, stored once as data in
``data/published/<study>.csv`` (``COLUMNS``: the quantity, the system the paper measured it on, its value or the
range it states, its unit, the seed and the place in it; ``data/published/README.md`` names each seed by its
arXiv id and title). The report prints each beside the same quantity measured by this run (``Study.measured``)
on the matching system; a paper params file's row says whether the run's interval holds the paper's value, a
run on a testbed says TESTBED, not comparable, and still shows its own figure.

``check`` (``make check``) refuses a file of an unknown study, a row without a value, or a quantity the study
does not measure (``Study.measures``), naming the file and the row.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from . import studies
from .paths import DATA_DIR, PARAMS_DIR
from .verdict import Bound

FOLDER = DATA_DIR / "published"
COLUMNS = ("quantity", "system", "value", "low", "high", "unit", "seed", "place")
NOT_COMPARABLE = "TESTBED, not comparable"


class PublishedError(ValueError):
    """A published-numbers file that cannot be used: the message names the file and the row."""


def _number(text: str) -> float | None:
    text = str(text).strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return math.nan
    return value


def problems(path: Path) -> list[str]:
    """What is wrong with one published-numbers file (empty when nothing is): its study unknown, a column
    missing, a row without a value (or a range), a quantity its study does not measure, a unit that is not
    the study's for that quantity, a seed or place not given."""
    path = Path(path)
    if path.stem not in studies.REGISTRY:
        return [f"{path}: unknown study {path.stem!r} (the file is named after a registered study: "
                f"{', '.join(studies.REGISTRY)})"]
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    absent = [c for c in COLUMNS if c not in table]
    if absent:
        return [f"{path}: missing column(s) {absent}; expected {list(COLUMNS)}"]
    measures = studies.get(path.stem).measures
    out = []
    for i, r in table.iterrows():
        where = f"{path}: row {i + 2} ({r['quantity'] or 'no quantity'})"  # row 1 is the header
        value, low, high = (_number(r[k]) for k in ("value", "low", "high"))
        if any(v is not None and math.isnan(v) for v in (value, low, high)):
            out.append(f"{where}: value, low and high must be numbers")
        elif value is None and (low is None or high is None):
            out.append(f"{where}: no value (give the value, or the range the paper states as low and high)")
        if r["quantity"] not in measures:
            out.append(f"{where}: quantity {r['quantity']!r} is not one the {path.stem} study measures "
                       f"({', '.join(measures) or 'none'})")
        elif r["unit"] != measures[r["quantity"]]:
            out.append(f"{where}: unit {r['unit']!r}; the {path.stem} study measures it in {measures[r['quantity']]!r}")
        for key in ("system", "seed", "place"):
            if not r[key].strip():
                out.append(f"{where}: {key} is empty")
    return out


def check(folder: Path | None = None) -> list[str]:
    """Every published-numbers file's problems (``problems``; ``folder``: default ``FOLDER``)."""
    return [line for f in sorted(Path(folder or FOLDER).glob("*.csv")) for line in problems(f)]


def read(study: str, folder: Path | None = None) -> pd.DataFrame:
    """The study's published numbers (no row when its seed states none it measures)."""
    path = Path(folder or FOLDER) / f"{study}.csv"
    if not path.is_file():
        return pd.DataFrame(columns=list(COLUMNS))
    bad = problems(path)
    if bad:
        raise PublishedError("; ".join(bad))
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    for key in ("value", "low", "high"):
        table[key] = pd.to_numeric(table[key].replace("", None), errors="coerce")
    return table


def value(study: str, quantity: str) -> float | None:
    """One published value of the study's seed (None when the seed states none)."""
    t = read(study)
    v = t.loc[t["quantity"] == quantity, "value"]
    return float(v.iloc[0]) if len(v) and pd.notna(v.iloc[0]) else None


def seed_bound(p, effect: float | None, what: str) -> Bound:
    """The seed's headline effect as a ``verdict.Bound`` for the study's null answers; no value when the run's
    params hold its nulls to its own rates only (``stats.seed_effect_bound``) or the seed states none."""
    on = p.stats.seed_effect_bound and effect is not None
    return Bound(effect if on else None, f"the seed's headline effect, {what}")


def is_paper_run(p) -> bool:
    """Whether the run's params file is one of the published settings (``params/paper/``)."""
    try:
        return Path(p.source_file).resolve().is_relative_to((PARAMS_DIR / "paper").resolve())
    except (OSError, ValueError):
        return False


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(text).lower())


def _matches(p, system: str, paper_system: str) -> bool:
    """A run's system is the paper's when its name, or its model's source, contains the paper's name."""
    want = _key(paper_system)
    if not want:
        return False
    spec = p.models.get(system) if hasattr(p, "models") else None
    names = [system] + ([str(spec.source)] if spec is not None else [])
    return any(want in _key(n) for n in names)


def _shown(value, low, high, unit: str) -> str:
    def fmt(x):
        return f"{x:.3g}" if unit == "p" else f"{x:g}" if float(x).is_integer() else f"{x:.3g}"
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return f"{fmt(low)} to {fmt(high)} {unit}".strip()
    interval = "" if low is None or high is None or any(math.isnan(x) for x in (low, high)) else \
        f" [{fmt(low)}, {fmt(high)}]"
    return f"{fmt(value)}{interval} {'' if unit == 'p' else unit}".strip()


def compare(p, study: str, measured: list, testbeds: set[str]) -> pd.DataFrame:
    """Each published number of ``study`` beside this run's measurement of the same quantity (``measured``: the
    study's ``Measurement`` list) on the system that matches the paper's (else the run's first), with what the
    comparison says: for a paper params file whether the run's interval holds the paper's value (or its range
    meets the paper's), on a testbed or a run of other settings that it is not comparable."""
    published = read(study)
    paper_run = is_paper_run(p)
    out = []
    for r in published.to_dict("records"):
        mine = [m for m in measured if m.quantity == r["quantity"]]
        match = next((m for m in mine if _matches(p, m.system, r["system"])), mine[0] if mine else None)
        paper = _shown(r["value"], r["low"], r["high"], r["unit"])
        if match is None:
            run_cell, verdict = "not computed by this run", "not computed"
        else:
            run_cell = _shown(match.value, match.low, match.high, r["unit"]) + (f" ({match.note})" if match.note else "")
            testbed = match.testbed or match.system in testbeds
            if testbed or not paper_run:
                verdict = (NOT_COMPARABLE if testbed else
                           "not comparable (not a paper params file: other models and settings)")
            elif match.low is None or match.high is None:
                verdict = "no interval to hold it"
            else:
                lo, hi = (r["value"], r["value"]) if not pd.isna(r["value"]) else (r["low"], r["high"])
                verdict = "holds the paper's value" if match.low <= hi and lo <= match.high else "outside"
        out.append({"quantity": r["quantity"], "paper": paper, "paper's system": r["system"],
                    "this run": run_cell, "run's system": match.system if match else "(none)",
                    "comparison": verdict, "source": f"{r['seed']}, {r['place']}"})
    return pd.DataFrame(out, columns=["quantity", "paper", "paper's system", "this run", "run's system",
                                      "comparison", "source"])


def plan_lines(p) -> list[str]:
    """``make plan``: the paper's quantities each study of the run will compare."""
    lines = []
    for name in p.studies:
        table = read(name)
        lines += [f"  {name}: {r['quantity']} = {_shown(r['value'], r['low'], r['high'], r['unit'])} ({r['system']})"
                  for r in table.to_dict("records")]
    if not lines:
        return []
    head = ("the papers' numbers this run will print beside its own (data/published/; "
            + ("a paper params file: each says whether the run's interval holds it):" if is_paper_run(p)
               else "not a paper params file: shown, not compared):"))
    return ["", head] + lines
