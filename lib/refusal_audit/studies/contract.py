"""The study interface: every member a study provides, the required ones and the optional ones with their
defaults. The pipeline, the report, the verdict table, the plan and ``make check`` call these members and
nothing else; docs/usage.md ("Adding a study") is generated from this class (``members_table``) and a test
keeps the two equal.

A study is a subclass with its members bound to the functions of its own modules (its params, stages,
verdicts, report and plan), registered by name in ``studies/__init__.py``. Stages receive the run's params
``p`` (``config.Params``; the study's own section is ``p.studies[name]``), the model pool ``models``
(``models.Pool``) and what the previous stage wrote.
"""
from __future__ import annotations

import abc
import argparse
import ast
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import pandas as pd

if TYPE_CHECKING:  # types only: the interface itself loads no model and no study
    from ..config import Params
    from ..models import Pool
    from ..retention import RetentionPolicy
    from ..store import ShardStore
    from ..verdict import Verdict


class StudyError(TypeError):
    """A study that does not implement the interface: the message names the study and the member."""


@dataclass(frozen=True)
class Reporting:
    """What the report's reporting items print for a study: the operational definition each of its scores
    rests on (markdown), and its seed floor where it trains anything."""

    definition: str
    seed_floor: str = "Nothing is trained."


@dataclass(frozen=True)
class Measurement:
    """One quantity of a study's seed as this run measured it (``Study.measured``): on which system, its value in
    the unit the study declares for it (``Study.measures``), and its interval where the run has one."""

    quantity: str
    system: str
    value: float
    low: float | None = None
    high: float | None = None
    note: str = ""
    testbed: bool = False  # measured on something trained here (a guard arm): never comparable with a paper


@dataclass(frozen=True)
class Rendering:
    """One model a study renders prompts for, and the check ``make check`` runs on that model's tokenizer
    (it raises ``ValueError`` or ``RuntimeError`` with the reason when the study's prompt cannot be built)."""

    model: str
    check: Callable[[object], None]


@dataclass(frozen=True)
class UserGeneration:
    """The decoding settings ``make generate`` takes from a study: a retention policy by name, and the
    replies' length."""

    policy: Callable[[str], RetentionPolicy]
    max_new_tokens: int


@dataclass(frozen=True)
class Command:
    """A command of a study's own (``python -m refusal_audit <name>``, a Makefile target): its help, its
    arguments (``argparse`` flags and keywords) and what it runs (the lines it prints)."""

    help: str
    arguments: tuple[tuple[tuple[str, ...], dict], ...]
    run: Callable[[argparse.Namespace], list[str]]


class Study(abc.ABC):
    """The members of a study. Required: ``name``, ``Params`` and every abstract method; the others have the
    defaults below."""

    # --- required ------------------------------------------------------------------------------------------
    name: ClassVar[str]
    """Its params section's key, its folder in a run, the prefix of its figures (``<name>_*``)."""
    Params: ClassVar[type]
    """The dataclass of its params section (config builds it, refusing unknown keys and wrong types)."""

    @abc.abstractmethod
    def check(self, p: Params, where: str) -> None:
        """Its section's constraints, without files or models (``errors.need`` names the file and key)."""

    @abc.abstractmethod
    def preflight(self, p: Params, models: Pool) -> None:
        """Everything checkable before any weights load (its data files, its models' context windows)."""

    @abc.abstractmethod
    def items(self, p: Params) -> pd.DataFrame:
        """Stage 01: its items (``item_id, study, role, dataset, text``, ...)."""

    @abc.abstractmethod
    def prompts(self, p: Params, items: pd.DataFrame, models: Pool) -> pd.DataFrame:
        """Stage 02: the prompts built from its items."""

    @abc.abstractmethod
    def generate(self, p: Params, prompts: pd.DataFrame, models: Pool, shards: ShardStore) -> pd.DataFrame:
        """Stage 03: replies (or a classifier's scores), resumable through the study's ``ShardStore``."""

    @abc.abstractmethod
    def judge(self, p: Params, table: pd.DataFrame, models: Pool, folder: Path) -> pd.DataFrame:
        """Stage 04: judgments of stage 03's table (``folder``: the study's folder, for sheets)."""

    @abc.abstractmethod
    def analyse(self, p: Params, items: pd.DataFrame, table: pd.DataFrame,
                judgments: pd.DataFrame) -> dict[str, pd.DataFrame]:
        """Stage 05: named statistics tables, written to ``stats/<name>/*.csv`` (on decontaminated items)."""

    @abc.abstractmethod
    def figures(self, p: Params, tables: dict[str, pd.DataFrame], folders: list[Path]) -> list[str]:
        """Stage 06: saves its figures (``plots.save``) into every folder; returns their names."""

    @abc.abstractmethod
    def verdict_rows(self, p: Params, tables: dict[str, pd.DataFrame]) -> list[Verdict]:
        """Its rows of the verdict table (``verdict.Verdict``), from its statistics tables."""

    @abc.abstractmethod
    def audited_pools(self, p: Params) -> list[str]:
        """The training pools its scores rest on (an item found in one leaves every statistic); [] for none."""

    @abc.abstractmethod
    def reporting(self, p: Params) -> Reporting:
        """The operational definitions its scores rest on and its seed floor, for the report."""

    @abc.abstractmethod
    def summary(self, p: Params, stage: str, table) -> list:
        """What a notebook shows after ``stage``: tables and short texts, never a reply."""

    # --- optional ------------------------------------------------------------------------------------------
    tables: ClassVar[Mapping[str, str]] = {}
    """Its own names for a stage's table, e.g. ``{"generate": "scores"}`` for a study that scores with classifiers."""
    contamination_unit: ClassVar[str] = "item_id"
    """The column whose unit leaves the statistics when one of its items is contaminated (a paraphrase cluster)."""
    base_models: ClassVar[bool] = False
    """Whether it takes a base model (a tokenizer without a chat template)."""
    stage_notes: ClassVar[Mapping[str, str]] = {}
    """What each notebook says the study does at a stage (stage name -> markdown), beside the other studies'."""
    commands: ClassVar[Mapping[str, Command]] = {}
    """Its own commands (``python -m refusal_audit <name>``): a user's route into the study."""
    question: ClassVar[str] = ""
    """Its primary question in one line, the heading of its block on the report's first screen."""
    headline_figure: ClassVar[str] = ""
    """The stem of the figure that draws its verdict's statistic, shown beside its first screen."""
    measures: ClassVar[Mapping[str, str]] = {}
    """The quantities of its seed it measures (quantity -> unit): what ``data/published/<name>.csv`` may name."""

    def renders(self, p: Params) -> list[Rendering]:
        """Each model it renders prompts for and the rendering ``make check`` proves on its tokenizer."""
        return []

    def verdicts(self, p: Params, tables: dict[str, pd.DataFrame]) -> list[str]:
        """Its verdicts in words: the sentences that end its part of notebook 05 and open the report."""
        return []

    def verdict_tables(self, p: Params, tables: dict[str, pd.DataFrame]) -> list[tuple[str, pd.DataFrame]]:
        """Tables the report shows under its verdicts, each with a title."""
        return []

    def training_pool(self, p: Params) -> pd.DataFrame | None:
        """Prompts it trains on (``id, prompt``): a pool the contamination audit checks every study against."""
        return None

    def plan(self, p: Params) -> pd.DataFrame | None:
        """Its grid for ``make plan`` (``plan.row`` per model and part), from params alone."""
        return None

    def plan_notes(self, p: Params) -> list[str]:
        """Lines ``make plan`` prints under the grid (what its verdicts will rest on)."""
        return []

    def user_generation(self, p: Params) -> UserGeneration | None:
        """The decoding settings ``make generate`` takes from it, when it decodes under retention."""
        return None

    def measured(self, p: Params, tables: dict[str, pd.DataFrame]) -> list[Measurement]:
        """This run's value of each quantity of ``measures`` per system, from its statistics tables."""
        return []

    def model_roles(self, p: Params) -> list[tuple[str, str, str]]:
        """``make check``: (role, model, validation status) of each model it runs besides those it studies and the judges."""
        return []

    def user_rows(self, p: Params, folder: Path) -> list[Verdict]:
        """The verdict rows of what a user brought to its commands (role ``verdict.USER``), from ``folder``."""
        return []


def _members() -> list[tuple[str, bool, str, str, str]]:
    """(name, required, signature, default, first docstring line) of every member, in the class's order."""
    tree = ast.parse(inspect.getsource(Study)).body[0].body
    docs, defaults = {}, {}
    for node, nxt in zip(tree, tree[1:] + [None]):
        if isinstance(node, ast.AnnAssign):
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
                docs[node.target.id] = nxt.value.value.strip().split("\n")[0]
            if node.value is not None:
                defaults[node.target.id] = ast.unparse(node.value)
        elif isinstance(node, ast.FunctionDef) and isinstance(node.body[-1], ast.Return):
            defaults[node.name] = "returns " + ast.unparse(node.body[-1].value)
    out = []
    for name, value in vars(Study).items():
        if name.startswith("_"):
            continue
        if callable(value):
            args = [a for a in inspect.signature(value).parameters if a != "self"]
            out.append((name, name in Study.__abstractmethods__, f"{name}({', '.join(args)})",
                        defaults.get(name, ""), inspect.getdoc(value).split("\n")[0]))
        elif name in docs:
            out.append((name, False, name, defaults.get(name, ""), docs[name]))
    return [(n, True, n, "", docs[n]) for n in ("name", "Params")] + out


REQUIRED = ("name", "Params") + tuple(n for n in vars(Study) if n in Study.__abstractmethods__)


def missing_member(cls: type[Study]) -> str | None:
    """The first required member the Study subclass ``cls`` lacks (an abstract method it does not bind, or
    a required attribute it does not set), or None."""
    for member in REQUIRED:
        if member in cls.__abstractmethods__ or not hasattr(cls, member):
            return member
    return None


def describe(member: str) -> str:
    """The one-line description of a member (its docstring's first line)."""
    return next(doc for n, *_, doc in _members() if n == member)


def members_table() -> str:
    """The markdown table of docs/usage.md's "Adding a study": every member, required or with its default."""
    lines = ["| member | required | default | what it is |", "|---|---|---|---|"]
    lines += [f"| `{sig}` | {'yes' if req else 'no'} | {f'`{default}`' if default else ''} | {doc} |"
              for _, req, sig, default, doc in _members()]
    return "\n".join(lines)
