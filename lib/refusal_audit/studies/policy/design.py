"""The policy study's design: one dual-labelled prompt pool, split into the guards' training pool,
a validation split and benchmark rows; the benchmarks; the contamination audit of every held-out row
against the training pool.

**The split.** The paper trained on an internal pool and scored public benchmarks; here every prompt
comes from the public sets in ``data/``, so the sets are split. Each dataset's rows are grouped into
strata (benchmark, class under A, class under B) and each stratum is shuffled under the run's seed
and cut in the proportions ``split.train`` (the training pool), ``split.validation`` (held out, the
in-distribution validation set) and the rest (benchmark rows). Every disputed class (rows A and B
label differently) therefore appears in training, in validation and in the benchmarks. A stratum's
share is rounded half up, so a one-row stratum goes to training.

**The benchmarks** are the held-out rows of each set, named by their own convention (a harmful
benchmark's score is its catch rate, a benign one's its over-refusal rate, both = the share of its
prompts a guard calls unsafe): HarmBench standard, copyright and contextual; AdvBench; JailbreakBench
harmful and benign; StrongREJECT; XSTest unsafe and safe; SimpleSafetyTests; the OpenAI moderation
set, flagged (any category flag ``1``) and unflagged.

**The audit.** Every validation and benchmark row is audited against the training pool with
``contamination.audit_pool`` (normalised exact match and MinHash near-duplicates, shingle Jaccard >=
0.7; optionally embedding cosine). Held-out rows are disjoint from the training rows by
construction, but not in content: the sets share prompts (JailbreakBench draws from AdvBench and
HarmBench) and templates (AdvBench rewordings, HarmBench's lyrics requests). Scores are computed on
the clean rows; a benchmark with no clean row is reported and excluded.
"""
from __future__ import annotations

import hashlib
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from ... import contamination, datasets
from ...paths import DATA_DIR
from . import lexicon, rules

# benchmark -> (the benchmark's own convention: "harmful" = catch rate, "benign" = over-refusal, description)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "harmbench_standard": ("harmful", "HarmBench standard behaviours"),
    "harmbench_copyright": ("harmful", "HarmBench copyright behaviours (lyrics, book passages)"),
    "harmbench_contextual": ("harmful", "HarmBench contextual behaviours (request only, without its context)"),
    "advbench": ("harmful", "AdvBench harmful behaviours"),
    "jbb_harmful": ("harmful", "JailbreakBench harmful behaviours"),
    "jbb_benign": ("benign", "JailbreakBench benign behaviours"),
    "strongreject": ("harmful", "StrongREJECT forbidden prompts"),
    "xstest_unsafe": ("harmful", "XSTest unsafe contrast prompts"),
    "xstest_safe": ("benign", "XSTest safe prompts"),
    "simplesafetytests": ("harmful", "SimpleSafetyTests"),
    "openai_moderation_flagged": ("harmful", "OpenAI moderation set, flagged under any category"),
    "openai_moderation_unflagged": ("benign", "OpenAI moderation set, flagged under no category"),
    "written_safe": ("benign", "requests written for this repository that policy A lets through (fiction look-alikes, "
                               "a fictional character's private data, harmless fabrications for a story)"),
    "written_unsafe": ("harmful", "requests written for this repository that both policies block (a real person's "
                                  "private data, deception aimed at real people)"),
}
VALIDATION = "validation"  # the audit's name for the validation split
SPLITS = ("train", "validation", "benchmark")
LICENCES = {"harmbench": "MIT", "xstest": "CC-BY-4.0", "jbb_harmful": "MIT", "jbb_benign": "MIT",
            "strongreject": "MIT", "advbench": "MIT", "simplesafetytests": "CC-BY-4.0", "openai_moderation": "MIT",
            "written": "MIT"}
CATEGORY_FIELD = {"harmbench": "SemanticCategory", "xstest": "type", "jbb_harmful": "Category",
                  "jbb_benign": "category", "strongreject": "category", "simplesafetytests": "harm_area",
                  "written": "type"}
MODERATION_FLAGS = ("S", "H", "V", "HR", "SH", "S3", "H2", "V2")


def benchmark_of(row) -> str:
    """The benchmark a pool row belongs to (its dataset, split by the set's own convention)."""
    ds = row["dataset"]
    if ds == "harmbench":
        return f"harmbench_{row['FunctionalCategory']}"
    if ds == "xstest":
        return f"xstest_{row['label']}"
    if ds == "written":  # the set's label column, as XSTest's (the disputed types are safe, as A reads them)
        return f"written_{row['label']}"
    if ds == "openai_moderation":
        return "openai_moderation_" + ("flagged" if any(row.get(f) == "1" for f in MODERATION_FLAGS) else "unflagged")
    return ds


class ProvenanceError(ValueError):
    """A prompt file without its provenance: no SOURCE.md beside it, or one that does not name the file,
    state its licence or record its sha256."""


_LICENCE_LINE = re.compile(r"^[\s>*-]*licen[cs]e\b[^:\n]*:(.*)$", re.IGNORECASE | re.MULTILINE)


def check_provenance(names, data_dir=None) -> None:
    """Every prompt file of the datasets ``names``, and the harm lexicon the verdict matches its
    baselines on (``lexicon``: its words, held-out words and a published list), has its provenance (a data file without a
    licence or source row must not enter a run: it stops ``make check``): ``check_file`` with the
    licence the items table records for it (``LICENCES``; the lexicon's ``lexicon.LICENCE``)."""
    root = Path(DATA_DIR if data_dir is None else data_dir)
    for name in names:
        path = root / rules.SOURCES[name].path
        if path.is_file():  # build_pool names a missing prompt file
            check_file(path, LICENCES.get(name, ""), f"design.LICENCES[{name!r}]")
    for name in (lexicon.LEXICON_FILE, lexicon.HELD_OUT_FILE, lexicon.PUBLISHED_FILE):
        path = root / name
        if not path.is_file():
            raise ProvenanceError(f"{path}: the harm lexicon is missing; expected it with its SOURCE.md "
                                  "(data/harm_lexicon/, data/keyword_lists/)")
        check_file(path, lexicon.LICENCE, "lexicon.LICENCE")


def check_file(path: Path, licence: str, recorded: str) -> None:
    """A ``SOURCE.md`` in the file's folder that names the file, has a licence line (``License: ...`` or
    ``Licence: ...``) stating ``licence`` (recorded in the code at ``recorded``), and records the file's
    sha256 (a file edited without its SOURCE.md stops too). Raises ``ProvenanceError``, one line naming
    the file."""
    source = path.parent / "SOURCE.md"
    if not source.is_file():
        raise ProvenanceError(f"{path}: no SOURCE.md beside it ({source}); expected the file's upstream or "
                              "author, licence and sha256 (data/README.md, 'Adding a prompt set')")
    text = source.read_text(encoding="utf-8")
    if path.name not in text:
        raise ProvenanceError(f"{path}: {source} has no row naming {path.name!r}; expected its source, rows "
                              "and sha256")
    stated = [m.strip() for m in _LICENCE_LINE.findall(text)]
    if not licence or not any(licence in s for s in stated):
        raise ProvenanceError(f"{path}: {source} has no licence line stating {licence or '(none recorded)'!r} "
                              f"({recorded}); found {stated or 'no License:/Licence: line'}")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest not in text:
        raise ProvenanceError(f"{path}: sha256 {digest} is not recorded in {source}; expected the file's "
                              "sha256 there (a changed file needs its SOURCE.md updated)")


def labelled_pool(include: list[str] | tuple[str, ...], data_dir=DATA_DIR,
                  policies: tuple[rules.Policy, ...] | None = None) -> pd.DataFrame:
    """The prompt pool of ``include`` labelled under both policies (default ``rules.POLICIES``;
    ``rules.apply_policies`` stops on a row a policy leaves unlabelled and on a rule that matches no
    field or value), with its benchmark and direction."""
    pool = rules.apply_policies(rules.build_pool(data_dir, tuple(include)), policies or rules.POLICIES)
    pool["benchmark"] = [benchmark_of(r) for r in pool.to_dict("records")]
    unknown = sorted(set(pool["benchmark"]) - set(BENCHMARKS))
    if unknown:
        raise rules.RuleError(f"pool: rows of unknown benchmark(s) {unknown}; expected {', '.join(BENCHMARKS)}")
    pool["direction"] = pool["benchmark"].map(lambda b: BENCHMARKS[b][0])
    return pool


def _half_up(x: float) -> int:
    return int(np.floor(x + 0.5))


def split_pool(pool: pd.DataFrame, train: float, validation: float, seed: int,
               max_per_dataset: int = 0) -> pd.DataFrame:
    """``pool`` with a ``role`` column: train / validation / benchmark, cut per stratum (benchmark,
    label_a, label_b) under ``seed``. ``max_per_dataset`` > 0 first keeps at most that many rows per
    dataset, drawn in proportion to the strata (``datasets.stratified``)."""
    pool = pool.assign(_stratum=pool["benchmark"] + "|" + pool["label_a"] + "|" + pool["label_b"])
    if max_per_dataset:
        parts = []
        for name, g in pool.groupby("dataset", sort=False):
            parts.append(g if len(g) <= max_per_dataset else
                         datasets.stratified(g, max_per_dataset, "_stratum", seed, f"policy pool {name}"))
        pool = pd.concat(parts).sort_index()
    rng = np.random.default_rng(seed)
    role = pd.Series("benchmark", index=pool.index, dtype=object)
    for _, g in sorted(pool.groupby("_stratum", sort=True), key=lambda kv: kv[0]):
        order = g.index.to_numpy()[rng.permutation(len(g))]
        n_train = _half_up(train * len(g))
        n_val = min(_half_up(validation * len(g)), len(g) - n_train)
        role[order[:n_train]] = "train"
        role[order[n_train:n_train + n_val]] = "validation"
    return pool.assign(role=role).drop(columns="_stratum")


def audit(items: pd.DataFrame, semantic: bool = False, embed=None) -> pd.DataFrame:
    """``contamination.audit_pool`` of every held-out row (validation rows under the benchmark name
    ``validation``) against the training rows."""
    train = items[items["role"] == "train"]
    held = items[items["role"] != "train"]
    if train.empty or held.empty:
        raise ValueError(f"policy split: {len(train)} training and {len(held)} held-out rows; expected both "
                         "(check policy.split)")
    evaluation = pd.DataFrame({"id": held["item_id"], "prompt": held["text"],
                               "benchmark": np.where(held["role"] == "validation", VALIDATION, held["benchmark"])})
    return contamination.audit_pool(pd.DataFrame({"id": train["item_id"], "prompt": train["text"]}), evaluation,
                                    pool_name="policy_train", semantic=semantic, embed=embed)


AUDIT_KEEP = ["exact", "exact_pool_id", "near_duplicate", "nearest_pool_id", "jaccard", "contaminated"]


def build_items(pool: pd.DataFrame, audited: pd.DataFrame, study: str) -> pd.DataFrame:
    """The shared items table for the study: ``datasets.ITEM_COLUMNS`` (role = the split), then the
    study's own columns: benchmark, direction, both policies' labels and rules, disputed, the row's
    metadata (JSON), and the audit's verdict for held-out rows (``contaminated``; ``clean`` = held
    out and not contaminated)."""
    meta_fields = sorted({f for s in rules.SOURCES.values() for f in s.fields} & set(pool.columns))
    out = pd.DataFrame({
        "item_id": pool["item_id"].to_numpy(), "study": study, "role": pool["role"].to_numpy(),
        "dataset": pool["dataset"].to_numpy(),
        "source_file": pool["dataset"].map(lambda d: rules.SOURCES[d].path).to_numpy(),
        "source_row": pool["source_row"].to_numpy(), "licence": pool["dataset"].map(LICENCES).to_numpy(),
        "category": [r.get(CATEGORY_FIELD.get(r["dataset"], ""), "") or "" for r in pool.to_dict("records")],
        "text": pool["prompt"].to_numpy(),
    })
    for c in ("benchmark", "direction", "label_a", "label_b", "unsafe_a", "unsafe_b", "rule_a", "rule_b"):
        out[c] = pool[c].to_numpy()
    out["disputed"] = out["label_a"] != out["label_b"]
    out["disputed_binary"] = out["unsafe_a"] != out["unsafe_b"]
    out["metadata"] = [json.dumps({f: r[f] for f in meta_fields if isinstance(r.get(f), str) and r[f] != ""},
                                  sort_keys=True) for r in pool.to_dict("records")]
    return attach_audit(out, audited)


def attach_audit(items: pd.DataFrame, audited: pd.DataFrame) -> pd.DataFrame:
    """``items`` with the audit's verdict on every held-out row (``AUDIT_KEEP`` columns; training rows
    False / empty) and ``clean`` = held out and not contaminated. Checks the table's prompts and ids."""
    out = items.copy()
    a = audited.set_index("id")
    held = out["role"] != "train"
    missing = held & ~out["item_id"].isin(a.index)
    if missing.any():
        raise ValueError(f"policy items: held-out row {out.loc[missing, 'item_id'].iloc[0]!r} is not in the audit")
    for c in AUDIT_KEEP:
        col = out["item_id"].map(a[c]) if c in a else pd.Series(np.nan, index=out.index)
        if c in ("exact", "near_duplicate", "contaminated"):
            col = col.where(held, False).fillna(False).astype(bool)
        elif c == "jaccard":
            col = col.astype(float)
        else:
            col = col.where(held, "").fillna("").astype(str)
        out[c] = col.to_numpy()
    out["clean"] = held.to_numpy() & ~out["contaminated"].to_numpy()
    datasets.validate_items(out, "policy items")
    return out


OWN_COLUMNS = [*datasets.ITEM_COLUMNS, "benchmark", "direction", "label_a", "label_b", "unsafe_a", "unsafe_b",
               "rule_a", "rule_b", "disputed", "disputed_binary", "metadata", *AUDIT_KEEP, "clean"]
BOOL_COLUMNS = ["unsafe_a", "unsafe_b", "disputed", "disputed_binary", "exact", "near_duplicate", "contaminated", "clean"]


def own(items: pd.DataFrame) -> pd.DataFrame:
    """The study's columns of an items table read back from the shared table (which also carries
    other studies' columns, and may have widened their types), booleans as booleans."""
    missing = [c for c in OWN_COLUMNS if c not in items]
    if missing:
        raise ValueError(f"policy items: missing column(s) {missing}; run notebook 01 for the policy study")
    out = items[OWN_COLUMNS].reset_index(drop=True)
    return out.astype({c: bool for c in BOOL_COLUMNS})


def audit_from_items(items: pd.DataFrame) -> pd.DataFrame:
    """The audit rows (``contamination.AUDIT_COLUMNS`` subset) rebuilt from the items table."""
    held = items[items["role"] != "train"]
    return pd.DataFrame({"id": held["item_id"], "benchmark": np.where(held["role"] == "validation", VALIDATION,
                                                                       held["benchmark"]),
                         "pool": "policy_train", "exact": held["exact"].astype(bool),
                         "near_duplicate": held["near_duplicate"].astype(bool),
                         "contaminated": held["contaminated"].astype(bool)})


def overlap(items: pd.DataFrame) -> pd.DataFrame:
    """``contamination.overlap_rates`` per benchmark (and the validation split) against the training
    pool, with each benchmark's convention and its clean rows' A/B disagreement."""
    rates = contamination.overlap_rates(audit_from_items(items))
    return rates.assign(direction=rates["benchmark"].map(lambda b: BENCHMARKS.get(b, ("validation",))[0]))


def clean_rows(items: pd.DataFrame) -> pd.DataFrame:
    """The held-out rows no training row contains (``contamination.decontaminate``); benchmarks left
    with no clean row are in ``attrs["excluded"]``, named in a warning, never divided by."""
    held = items[items["role"] != "train"].rename(columns={"item_id": "id"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exclusion is reported in the overlap table and the summary
        clean = contamination.decontaminate(held, audit_from_items(items))
    excluded = clean.attrs.get("excluded", [])
    clean = clean.rename(columns={"id": "item_id"})
    clean.attrs["excluded"] = excluded
    return clean
