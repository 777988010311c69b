"""One verdict type for every study: a row of the run's verdict table (``verdict_table``), and the words its
cells share across studies (the controls' states, a value that could not be computed).

A study fills ``Verdict`` rows from its statistics tables (``Study.verdict_rows``); the verdict table checks them,
marks testbeds and writes ``stats/verdicts.csv``; the report shows them. The text cells are the study's own
sentences; the numbers behind them sit beside them as typed fields (``None`` where a row has no such number).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

# what a row is
PRIMARY, POSITIVE, NULL, CALIBRATION = "primary", "positive control", "null control", "calibration"
USER = "user's system"  # what a user brought (a guard's verdicts, a corpus), measured by a study's own command
ROLES = (PRIMARY, POSITIVE, NULL, CALIBRATION, USER)

# a control's state, in the words every study uses
RECOVERED, NOT_RECOVERED, CLEAN, REJECTED, NOT_RUN = "recovered", "not recovered", "clean", "rejected", "not run"
WORDS = {RECOVERED: "recovered", NOT_RECOVERED: "NOT recovered", CLEAN: "not rejected (as expected)",
         REJECTED: "REJECTED (not as expected)", NOT_RUN: "not run"}


def not_computed(why: str) -> str:
    """The cell of a value the run could not compute, with the reason."""
    return f"not computed: {why}"


def not_applicable(why: str) -> str:
    """The cell of a value that has no meaning for this row, with the reason."""
    return f"not applicable: {why}"


@dataclass(frozen=True)
class ControlState:
    """One control of a study: a planted effect (``positive``) that must be recovered, or a control with no
    effect (``null``) that must stay silent; ``state`` one of ``WORDS``; ``detail`` what was measured;
    ``words`` the study's own words for the state where its cells have always said it otherwise (the cell
    keeps them; the state stays typed)."""

    name: str
    kind: str  # "positive" | "null"
    state: str
    detail: str = ""
    words: str = ""

    def __post_init__(self):
        if self.kind not in ("positive", "null"):
            raise ValueError(f"control {self.name!r}: kind {self.kind!r}; expected positive or null")
        allowed = (RECOVERED, NOT_RECOVERED, NOT_RUN) if self.kind == "positive" else (CLEAN, REJECTED, NOT_RUN)
        if self.state not in allowed:
            raise ValueError(f"control {self.name!r} ({self.kind}): state {self.state!r}; expected one of {allowed}")

    @classmethod
    def positive(cls, name: str, recovered: bool | None, detail: str = "", words: str = "") -> ControlState:
        """A planted control: recovered, not recovered, or not run (``None``)."""
        return cls(name, "positive", NOT_RUN if recovered is None else RECOVERED if recovered else NOT_RECOVERED,
                   detail, words)

    @classmethod
    def null(cls, name: str, called: bool | None, detail: str = "", words: str = "") -> ControlState:
        """A control with no effect: clean (not called), rejected (called: the test fired), or not run (``None``)."""
        return cls(name, "null", NOT_RUN if called is None else REJECTED if called else CLEAN, detail, words)

    @property
    def ok(self) -> bool:
        return self.state in (RECOVERED, CLEAN)

    def text(self, separator: str = " ") -> str:
        return f"{self.name}{separator}{self.words or WORDS[self.state]}{self.detail}"


@dataclass(frozen=True)
class Controls:
    """A study's controls as one cell: each state, then any flag that qualifies the row (a judge unvalidated,
    a stratum near-empty); "not run" when there is neither. ``separator`` goes between a control's name and
    its state."""

    states: tuple[ControlState, ...] = ()
    flags: tuple[str, ...] = ()
    separator: str = " "

    def with_flags(self, *flags: str) -> Controls:
        return Controls(self.states, self.flags + tuple(f for f in flags if f), self.separator)

    def text(self) -> str:
        return "; ".join([s.text(self.separator) for s in self.states] + list(self.flags)) or WORDS[NOT_RUN]

    def summary(self) -> str:
        """The controls in one short line, for a study's first screen: each positive control's state, then the
        null controls counted by state ("3 null controls not rejected"), then each flag's first clause (the whole
        flag stays in ``text``)."""
        parts = [f"{s.name} {s.words or WORDS[s.state]}" for s in self.states if s.kind == "positive"]
        nulls = [s for s in self.states if s.kind == "null"]
        for state in dict.fromkeys(s.state for s in nulls):
            same = [s for s in nulls if s.state == state]
            word = WORDS[state].replace(" (as expected)", "").replace(" (not as expected)", "")
            names = same[0].name if len(same) == 1 else f"{len(same)} null controls"
            parts.append(f"{names} {word}" + (f" ({', '.join(s.name for s in same)})" if state != CLEAN and
                                              len(same) > 1 else ""))
        return "; ".join(parts + [f.split(":")[0] for f in self.flags]) or WORDS[NOT_RUN]


@dataclass(frozen=True)
class Verdict:
    """One row of the verdict table. The text cells are what a reader sees (each non-empty: a cell that
    cannot be given says why, ``not_computed``); the typed fields are the numbers behind them."""

    study: str
    system: str          # the model or guard (or simulation) the row is about
    role: str            # one of ROLES
    question: str
    answer: str          # the answer in a word or two
    estimate: str        # the estimate with its interval and corrected p, in words
    fpr: str             # the simulated false-positive rate, in words
    power: str           # power at a stated effect, or for a null answer the smallest detectable effect
    controls: Controls = field(default_factory=Controls)
    effect: float | None = None     # the estimate ...
    ci_low: float | None = None     # ... its interval
    ci_high: float | None = None
    p: float | None = None          # the corrected p-value
    fpr_rate: float | None = None   # the simulated false-positive rate, a share
    power_rate: float | None = None  # the power at the stated effect, a share
    mde: float | None = None        # the smallest detectable effect (a null answer)
    n: int | None = None            # the units the estimate rests on
    testbed: bool = False           # the system is a model organism or a guard trained here (the study, or the
    #                                 verdict table from params, sets it)
    headline: bool = False          # the row answers the study's primary question on the first screen (when no
    #                                 row of a study is marked: its primary rows)
    label: str = ""                 # a short qualifier of the system on the first screen (a judge, an outcome)

    TEXT = ("study", "system", "role", "question", "answer", "estimate", "fpr", "power", "controls")
    NUMBERS = ("effect", "ci_low", "ci_high", "p", "fpr_rate", "power_rate", "mde", "n")

    def numbers(self) -> dict[str, float | int | None]:
        """The typed fields, in the table's order (``NUMBERS``)."""
        return {"effect": self.effect, "ci_low": self.ci_low, "ci_high": self.ci_high, "p": self.p,
                "fpr_rate": self.fpr_rate, "power_rate": self.power_rate, "mde": self.mde, "n": self.n}

    def cells(self) -> dict[str, str]:
        """The text cells, in the table's order (the system marked TESTBED where it is one)."""
        return {"study": self.study, "system": f"{self.system} (TESTBED)" if self.testbed else self.system,
                "role": self.role, "question": self.question, "answer": self.answer, "estimate": self.estimate,
                "fpr": self.fpr, "power": self.power, "controls": self.controls.text()}


def missing(study: str, why: str) -> Verdict:
    """The row of a study whose verdicts cannot be read: every cell says why."""
    cell = not_computed(why)
    return Verdict(study, "(none)", PRIMARY, "(not available)", "not computed", cell, cell, cell,
                   Controls(flags=(cell,)))


# --- a null answer held to what the run could have seen ------------------------------------------------------------
CANNOT_TELL = "cannot tell"


@dataclass(frozen=True)
class Bound:
    """An effect a null answer is held against: the largest effect the run's own rates allow (a drop cannot exceed
    the rate it drops from), or the effect the study's seed reports. ``what`` names it in words."""

    value: float | None
    what: str


def undetectable(mde: float | None, bounds: Sequence[Bound]) -> str:
    """Why a null answer cannot be told from "the run could not have seen it" ("" when it can): the smallest
    detectable effect ``mde`` exceeds the smallest of ``bounds`` (``math.inf``: no effect whatever could have
    been detected at the run's n; ``None``: not known, nothing is said). Bounds without a value are skipped."""
    known = [b for b in bounds if b.value is not None and math.isfinite(b.value)]
    if mde is None or (isinstance(mde, float) and math.isnan(mde)) or not known:
        return ""
    tight = min(known, key=lambda b: b.value)
    if mde <= tight.value:
        return ""
    if math.isinf(mde):
        return f"{CANNOT_TELL}: no effect up to {tight.what} ({tight.value:.2f}) could have been detected at this n"
    return f"{CANNOT_TELL}: the smallest detectable effect {mde:.2f} exceeds {tight.what} ({tight.value:.2f})"


def held_to(v: Verdict, mde: float | None, bounds: Sequence[Bound], nulls: Sequence[str]) -> Verdict:
    """A primary (or user's) row whose answer is one of the study's null words (``nulls``), with ``undetectable``
    applied: the answer becomes "cannot tell" and its reason leads the power cell. Controls are judged against
    their own plant (their state), so their rows are returned as they are, as is every row the run could see."""
    why = undetectable(mde, bounds) if v.role in (PRIMARY, USER) and v.answer in nulls else ""
    return replace(v, answer=CANNOT_TELL, power=f"{why}; {v.power}") if why else v
