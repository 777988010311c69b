"""Public prompt sets in ``data/``, assembled into one ``items`` table with provenance.

``items`` columns: item_id, study, role, dataset, source_file, source_row, licence, category,
text, choices (MMLU only, "A|B|C|D" texts joined by a tab), answer (MMLU only).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd

from .config import DataParams
from .paths import DATA_DIR

HARMBENCH_ALL = DATA_DIR / "harmbench" / "harmbench_behaviors_text_all.csv"
HARMBENCH_TEST = DATA_DIR / "harmbench" / "harmbench_behaviors_text_test.csv"
ADVBENCH = DATA_DIR / "advbench" / "harmful_behaviors.csv"
MMLU_TEST = DATA_DIR / "mmlu" / "test"
ITEM_COLUMNS = ["item_id", "study", "role", "dataset", "source_file", "source_row", "licence",
                "category", "text", "choices", "answer"]


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _require(path: Path) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: data file not found (see data/README.md for how the sets are laid out)")
    return path


def _stratified(df: pd.DataFrame, n: int, by: str, seed: int, what: str) -> pd.DataFrame:
    """``n`` rows drawn without replacement, allocated to strata of ``by`` in proportion to their
    size (largest remainders), each stratum shuffled under ``seed``. Row order is by stratum."""
    if n > len(df):
        raise ValueError(f"{what}: asked for {n} prompts, the set has {len(df)}")
    sizes = df[by].value_counts().sort_index()
    quota = sizes * n / len(df)
    alloc = quota.astype(int)
    rest = n - int(alloc.sum())
    order = (quota - alloc).sort_values(ascending=False, kind="stable").index[:rest]
    alloc[order] += 1
    parts = [df[df[by] == cat].sample(int(k), random_state=seed) for cat, k in alloc.items() if k]
    return pd.concat(parts)


def harmbench_standard(path: Path, n: int, seed: int, role: str) -> pd.DataFrame:
    """HarmBench *standard* behaviours, ``n`` drawn stratified by SemanticCategory."""
    raw = pd.read_csv(_require(path), keep_default_na=False)
    raw["source_row"] = range(len(raw))
    std = raw[raw["FunctionalCategory"] == "standard"]
    pick = _stratified(std, n, "SemanticCategory", seed, f"{path.name} (standard behaviours)")
    return pd.DataFrame({
        "item_id": "hb-" + pick["BehaviorID"], "study": "kv", "role": role, "dataset": "harmbench",
        "source_file": path.relative_to(DATA_DIR).as_posix(), "source_row": pick["source_row"],
        "licence": "MIT", "category": pick["SemanticCategory"], "text": pick["Behavior"],
    })


def advbench(n: int, seed: int) -> pd.DataFrame:
    """AdvBench harmful behaviours, ``n`` drawn uniformly under ``seed`` (AdvBench has no categories)."""
    raw = pd.read_csv(_require(ADVBENCH), keep_default_na=False)
    if n > len(raw):
        raise ValueError(f"{ADVBENCH.name}: asked for {n} prompts, the set has {len(raw)}")
    pick = raw.sample(n, random_state=seed)
    return pd.DataFrame({
        "item_id": [f"adv-{i:03d}" for i in pick.index], "study": "kv", "role": "harmful",
        "dataset": "advbench", "source_file": ADVBENCH.relative_to(DATA_DIR).as_posix(),
        "source_row": pick.index, "licence": "MIT", "category": "uncategorised", "text": pick["goal"],
    })


def mmlu(subjects: list[str], per_subject: int, seed: int) -> pd.DataFrame:
    """``per_subject`` MMLU test questions per subject, drawn under ``seed``."""
    parts = []
    for subject in subjects:
        path = _require(MMLU_TEST / f"{subject}_test.csv")
        raw = pd.read_csv(path, header=None, names=["q", "A", "B", "C", "D", "answer"], keep_default_na=False)
        if per_subject > len(raw):
            raise ValueError(f"{path}: asked for {per_subject} questions, the file has {len(raw)}")
        pick = raw.sample(per_subject, random_state=seed)
        parts.append(pd.DataFrame({
            "item_id": [f"mmlu-{subject}-{i:03d}" for i in pick.index], "study": "kv", "role": "mmlu",
            "dataset": "mmlu", "source_file": path.relative_to(DATA_DIR).as_posix(), "source_row": pick.index,
            "licence": "MIT", "category": subject, "text": pick["q"],
            "choices": pick[["A", "B", "C", "D"]].astype(str).agg("\t".join, axis=1), "answer": pick["answer"],
        }))
    return pd.concat(parts) if parts else pd.DataFrame(columns=ITEM_COLUMNS)


def assemble_items(p: DataParams, seed: int) -> pd.DataFrame:
    """The kv study's items: the harmful set, the official robustness set, MMLU-math."""
    if p.harmful_source == "harmbench":
        harmful = harmbench_standard(HARMBENCH_ALL, p.n_harmful, seed, "harmful")
    else:
        harmful = advbench(p.n_harmful, seed)
    parts = [harmful]
    if p.n_official:
        parts.append(harmbench_standard(HARMBENCH_TEST, p.n_official, seed, "harmful_official"))
    if p.mmlu_per_subject:
        parts.append(mmlu(p.mmlu_subjects, p.mmlu_per_subject, seed))
    items = pd.concat(parts, ignore_index=True).reindex(columns=ITEM_COLUMNS)
    items["item_id"] = items["role"].map({"harmful_official": "official-"}).fillna("") + items["item_id"]
    validate_items(items, "items")
    return items


def validate_items(items: pd.DataFrame, where: str) -> None:
    """Stop on an empty prompt or a duplicate id, naming the row."""
    empty = items["text"].fillna("").str.strip() == ""
    if empty.any():
        row = items[empty].iloc[0]
        raise ValueError(f"{where}: row {row.name} (id {row['item_id']!r}): empty prompt; expected non-empty text")
    dup = items["item_id"].duplicated()
    if dup.any():
        raise ValueError(f"{where}: row {items[dup].index[0]}: duplicate id {items[dup].iloc[0]['item_id']!r}; "
                         "expected unique ids")


def read_user_prompts(path: str | Path) -> pd.DataFrame:
    """A user's prompt CSV (columns ``prompt``, optional ``id`` and ``system``), checked before any work."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: prompt file not found")
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e})") from None
    if "prompt" not in df:
        raise ValueError(f"{path}: missing column 'prompt'; expected columns prompt[, id, system], got {list(df)}")
    ids = df["id"] if "id" in df else pd.Series([f"row-{i:05d}" for i in range(len(df))])
    items = pd.DataFrame({
        "item_id": ids.astype(str).values, "study": "user", "role": "user", "dataset": path.name,
        "source_file": str(path), "source_row": range(len(df)), "licence": "user-supplied",
        "category": "", "text": df["prompt"].values,
    }).reindex(columns=ITEM_COLUMNS)
    items["system"] = df["system"].values if "system" in df else None
    validate_items(items, str(path))
    return items
