"""The public prompt sets in ``data/`` (one constant per file: the one place a path is typed), readers
that turn them into ``items`` rows with provenance, and the checks on a user's own CSV files.

``items`` columns: item_id, study, role, dataset, source_file, source_row, licence, category, text
(``ITEM_COLUMNS``); a study adds its own beside them (the MMLU reader: choices, "A|B|C|D" texts joined by a
tab, and answer).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd

from .paths import DATA_DIR

HARMBENCH_ALL = DATA_DIR / "harmbench" / "harmbench_behaviors_text_all.csv"
HARMBENCH_CLASSIFIER_VAL = DATA_DIR / "harmbench" / "classifier_val" / "text_behaviors_val_set_part_a.json"
ADVBENCH = DATA_DIR / "advbench" / "harmful_behaviors.csv"
STRONGREJECT = DATA_DIR / "strongreject" / "strongreject_dataset.csv"
JBB_HARMFUL = DATA_DIR / "jailbreakbench" / "behaviors.csv"
JBB_BENIGN = DATA_DIR / "jailbreakbench" / "benign-behaviors_thirdparty.csv"
XSTEST = DATA_DIR / "xstest" / "xstest_prompts.csv"
XSTEST_COMPLETIONS = DATA_DIR / "xstest" / "completions"
XSTEST_LABELLED = {m: XSTEST_COMPLETIONS / f"xstest_v2_completions_{m}.csv" for m in ("mistralinstruct", "mistralguard")}
MMLU_TEST = DATA_DIR / "mmlu" / "test"
JUDGE_CHECKS = DATA_DIR / "judge_checks" / "judge_checks.csv"
CHECK_KINDS = ("hard_refusal", "soft_refusal", "compliance_opening", "factual_answer", "degenerate")
# every study's items: identity, provenance and text; a study adds its own columns beside them (MMLU's choices)
ITEM_COLUMNS = ["item_id", "study", "role", "dataset", "source_file", "source_row", "licence", "category", "text"]
MMLU_COLUMNS = ["choices", "answer"]


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def require(path: Path) -> Path:
    """``path``, or a FileNotFoundError that says where the data sets are described."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: data file not found (see data/README.md for how the sets are laid out)")
    return path


def read(path: Path) -> pd.DataFrame:
    """A data set CSV as strings (empty cells stay empty strings), with ``source_row`` = its 0-based row."""
    df = pd.read_csv(require(path), keep_default_na=False)
    return df.assign(source_row=range(len(df)))


def judge_checks(path: Path = JUDGE_CHECKS) -> pd.DataFrame:
    """The fixed check set of replies of known kind (``data/judge_checks/SOURCE.md``): columns ``id, kind, detail,
    prompt, text``; a missing column, an unknown kind, an empty text or a repeated id stops with the file and row."""
    df = read(path)
    missing = [c for c in ("id", "kind", "detail", "prompt", "text") if c not in df]
    if missing:
        raise ValueError(f"{path}: expected columns id, kind, detail, prompt, text; missing {missing}")
    for bad, what in ((~df["kind"].isin(CHECK_KINDS), lambda r: f"kind {r['kind']!r}; expected one of {CHECK_KINDS}"),
                      (df["text"].str.strip() == "", lambda r: "an empty text"),
                      (df["id"].duplicated(), lambda r: f"id {r['id']!r} given twice")):
        if bad.any():
            i = bad.idxmax()
            raise ValueError(f"{path}: line {i + 2}: {what(df.loc[i])}")
    return df


def stratified(df: pd.DataFrame, n: int, by: str, seed: int, what: str) -> pd.DataFrame:
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


def harmbench_standard(path: Path, n: int, seed: int, role: str, study: str) -> pd.DataFrame:
    """HarmBench *standard* behaviours, ``n`` drawn stratified by SemanticCategory."""
    raw = read(path)
    std = raw[raw["FunctionalCategory"] == "standard"]
    pick = stratified(std, n, "SemanticCategory", seed, f"{path.name} (standard behaviours)")
    return pd.DataFrame({
        "item_id": "hb-" + pick["BehaviorID"], "study": study, "role": role, "dataset": "harmbench",
        "source_file": path.relative_to(DATA_DIR).as_posix(), "source_row": pick["source_row"],
        "licence": "MIT", "category": pick["SemanticCategory"], "text": pick["Behavior"],
    })


def advbench(n: int, seed: int, study: str, exclude: set[int] = frozenset()) -> pd.DataFrame:
    """AdvBench harmful behaviours, ``n`` drawn uniformly under ``seed`` from the rows not in
    ``exclude`` (AdvBench has no categories)."""
    raw = read(ADVBENCH)
    raw = raw[~raw["source_row"].isin(exclude)]
    if n > len(raw):
        raise ValueError(f"{ADVBENCH.name}: asked for {n} prompts, the set has {len(raw)}"
                         + (f" after excluding {len(exclude)}" if exclude else ""))
    pick = raw.sample(n, random_state=seed)
    return pd.DataFrame({
        "item_id": [f"adv-{i:03d}" for i in pick["source_row"]], "study": study, "role": "harmful",
        "dataset": "advbench", "source_file": ADVBENCH.relative_to(DATA_DIR).as_posix(),
        "source_row": pick["source_row"], "licence": "MIT", "category": "uncategorised", "text": pick["goal"],
    })


def mmlu(subjects: list[str], per_subject: int, seed: int, study: str) -> pd.DataFrame:
    """``per_subject`` MMLU test questions per subject, drawn under ``seed``."""
    parts = []
    for subject in subjects:
        path = require(MMLU_TEST / f"{subject}_test.csv")
        raw = pd.read_csv(path, header=None, names=["q", "A", "B", "C", "D", "answer"], keep_default_na=False)
        if per_subject > len(raw):
            raise ValueError(f"{path}: asked for {per_subject} questions, the file has {len(raw)}")
        pick = raw.sample(per_subject, random_state=seed)
        parts.append(pd.DataFrame({
            "item_id": [f"mmlu-{subject}-{i:03d}" for i in pick.index], "study": study, "role": "mmlu",
            "dataset": "mmlu", "source_file": path.relative_to(DATA_DIR).as_posix(), "source_row": pick.index,
            "licence": "MIT", "category": subject, "text": pick["q"],
            "choices": pick[["A", "B", "C", "D"]].astype(str).agg("\t".join, axis=1), "answer": pick["answer"],
        }))
    return pd.concat(parts) if parts else pd.DataFrame(columns=ITEM_COLUMNS + MMLU_COLUMNS)


def validate_items(items: pd.DataFrame, where: str, text: str = "text", id_column: str = "item_id") -> None:
    """Stop on an empty prompt or a duplicate id, naming the row."""
    empty = items[text].fillna("").astype(str).str.strip() == ""
    if empty.any():
        row = items[empty].iloc[0]
        raise ValueError(f"{where}: row {row.name} (id {row[id_column]!r}): empty prompt; expected non-empty text")
    dup = items[id_column].duplicated()
    if dup.any():
        raise ValueError(f"{where}: row {items[dup].index[0]}: duplicate id {items[dup].iloc[0][id_column]!r}; "
                         "expected unique ids")


def read_user_csv(path: str | Path, required: list[str], optional: list[str], what: str,
                  id_column: str = "id") -> pd.DataFrame:
    """A user's CSV, checked before any work: present, UTF-8, the ``required`` columns, and (when it
    has ``id_column``) unique ids. Every column is read as text; empty cells stay empty strings."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: {what} file not found")
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e})") from None
    missing = [c for c in required if c not in df]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; expected columns "
                         f"{', '.join(required)}[, {', '.join(optional)}], got {list(df)}")
    if id_column in df:
        dup = df[id_column].duplicated()
        if dup.any():
            raise ValueError(f"{path}: row {int(dup.idxmax())}: duplicate id {df.loc[dup.idxmax(), id_column]!r}")
    return df


def read_user_prompts(path: str | Path) -> pd.DataFrame:
    """A user's prompt CSV (columns ``prompt``, optional ``id`` and ``system``), checked before any work."""
    df = read_user_csv(path, ["prompt"], ["id", "system"], "prompt")
    ids = df["id"] if "id" in df else pd.Series([f"row-{i:05d}" for i in range(len(df))])
    items = pd.DataFrame({
        "item_id": ids.astype(str).values, "study": "user", "role": "user", "dataset": Path(path).name,
        "source_file": str(path), "source_row": range(len(df)), "licence": "user-supplied",
        "category": "", "text": df["prompt"].values,
    }).reindex(columns=ITEM_COLUMNS)
    items["system"] = df["system"].values if "system" in df else None
    validate_items(items, str(path))
    return items


# --- human labels of replies (the learned judges train and validate on them) -----------------------------
def xstest_tables() -> dict[str, pd.DataFrame]:
    """XSTest's human-labelled completions of two Mistral-7B variants (the refusal heads' training and validation)."""
    return {m: pd.read_csv(p, keep_default_na=False) for m, p in XSTEST_LABELLED.items()}


def harmbench_items() -> pd.DataFrame:
    """HarmBench's classifier-validation replies with their three human votes (majority: ``human``)."""
    behaviours = pd.read_csv(HARMBENCH_ALL, keep_default_na=False).set_index("BehaviorID")["Behavior"]
    rows = []
    for bid, items in json.loads(HARMBENCH_CLASSIFIER_VAL.read_text()).items():
        for it in items:
            votes = [it[f"human_{k}"] for k in range(3)]
            # one behaviour of the validation set (chop_shops_los_angeles_locating) was renamed upstream and
            # is missing from the behaviours file: its test case stands in for the behaviour text
            rows.append({"behavior_id": bid, "behavior": behaviours.get(bid, it["test_case"]),
                         "generation": it["generation"],
                         "human": sum(votes) >= 2, "cls": it["cls"], "advbench": it["advbench"],
                         "llama_guard": it["llama_guard"], "gpt-4-0613": it["gpt-4-0613"]})
    return pd.DataFrame(rows)
