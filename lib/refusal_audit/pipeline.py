"""The stages of a run, each reading the previous stages' tables from ``results/<run_name>/``.

``items`` (01) -> ``prompts`` (02) -> ``generations`` (03) -> ``judgments`` (04) -> ``stats/`` (05)
-> ``figures/`` + ``manifest.json`` (06). Notebooks narrate these calls; the CLI reuses them for
``make generate`` and ``make judge``.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import config, datasets, judges, kv, models, store
from .paths import FIGURES_DIR, ROOT, run_dir
from .prompts import FILLER_FILE

NOTEBOOKS = sorted((ROOT / "notebooks").glob("0*.ipynb"))


def table(p: config.Params, name: str) -> pd.DataFrame:
    """A stage table of this run; a missing one names the stage that writes it."""
    path = run_dir(p.run_name) / f"{name}.parquet"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found; run the earlier notebooks first (make all PARAMS={p.source_file})")
    return pd.read_parquet(path)


def save(p: config.Params, name: str, df: pd.DataFrame) -> Path:
    return store.write_atomic(df, run_dir(p.run_name) / f"{name}.parquet")


def spec(p: config.Params, name: str) -> config.ModelSpec:
    """A model by params name, or any other string taken as a source (HF id, directory, .gguf)."""
    return p.models.get(name) or config.ModelSpec(source=name)


def preflight(p: config.Params) -> None:
    """Everything that can be checked without a model: stops before any work, naming what is wrong."""
    for name, m in p.models.items():
        try:
            models.resolve(m.source)
            models.check_runnable(m, models.default_device())
        except (FileNotFoundError, RuntimeError) as e:
            raise type(e)(f"{p.source_file}: models.{name}.source: {e}") from None
        if m.adapter and not (ROOT / m.adapter).is_dir():
            raise FileNotFoundError(f"{p.source_file}: models.{name}.adapter: {m.adapter} not found")
    judges.KeywordJudge(p.judges.keyword.list_name, p.judges.keyword.match, p.judges.keyword.casefold)
    datasets.assemble_items(p.data, p.seed)
    context = models.context_window(p.models[p.kv.model])
    for key in ("filler_tokens", "mmlu_filler_tokens"):
        filler = getattr(p.kv, key)
        if context and filler + p.kv.max_new_tokens >= context:
            raise ValueError(f"{p.source_file}: kv.{key}: {filler} filler tokens + {p.kv.max_new_tokens} new tokens do "
                             f"not fit the context window of {p.kv.model} ({context} positions)")


# --- 01 dataset assembly -------------------------------------------------------------------------
def assemble(p: config.Params) -> pd.DataFrame:
    preflight(p)
    items = datasets.assemble_items(p.data, p.seed)
    save(p, "items", items)
    return items


# --- 02 frame construction -----------------------------------------------------------------------
def build_prompts(p: config.Params, items: pd.DataFrame, tokenizer, context_window: int | None) -> pd.DataFrame:
    from .prompts import build_prompts as build

    parts = []
    for c in kv.conditions(p.kv, set(items["role"])):
        subset = items[items["role"] == c.role]
        system = p.kv.system_prompt if c.system_prompt else None
        new = 1 if c.role == "mmlu" else p.kv.max_new_tokens
        parts.append(build(subset, tokenizer, [(c.filler_tokens, system)], context_window, new))
    prompts = pd.concat(parts, ignore_index=True)
    save(p, "prompts", prompts)
    return prompts


# --- 03 generation under retention ---------------------------------------------------------------
def generate(p: config.Params, prompts: pd.DataFrame, model, tokenizer) -> pd.DataFrame:
    from . import generation
    from .prompts import MMLU_CUE

    shards = store.ShardStore(run_dir(p.run_name) / "shards" / "generations")

    def policies_of(row):
        return kv.policies(p.kv, row["role"], int(row["filler_tokens"]), bool(row["system_prompt"]))

    harmful = prompts[prompts["role"] != "mmlu"]
    mmlu = prompts[prompts["role"] == "mmlu"]
    # check both plans before generating anything
    context = getattr(model.config, "max_position_embeddings", None)
    generation.check_plan(harmful, policies_of, context, p.kv.max_new_tokens)
    generation.check_plan(mmlu, policies_of, context, 1)
    greedy = [generation.Decoding(0.0, p.seed, p.kv.max_new_tokens)]
    parts = [generation.run(model, tokenizer, p.kv.model, harmful, policies_of, shards, greedy,
                            batch_rows=p.kv.batch_rows)]
    if len(mmlu):
        cue = tokenizer.encode(MMLU_CUE, add_special_tokens=False)
        parts.append(generation.run(model, tokenizer, p.kv.model, mmlu, policies_of, shards, greedy,
                                    answer_cue=(cue, ["A", "B", "C", "D"])))
    gens = pd.concat(parts, ignore_index=True)
    save(p, "generations", gens)
    return gens


# --- 04 judging -----------------------------------------------------------------------------------
def model_loader(p: config.Params):
    """``load(name) -> (model, tokenizer)``, loading each model once."""
    loaded: dict[str, tuple] = {}

    def load(name):
        if name not in loaded:
            loaded[name] = models.load(spec(p, name))
        return loaded[name]

    return load


def judge(p: config.Params, generations: pd.DataFrame) -> pd.DataFrame:
    """Every configured judge on every reply to a harmful prompt (the judge sees the request, not the filler)."""
    replies = generations[generations["role"] != "mmlu"].rename(columns={"query": "prompt"})
    out = judges.judge_replies(judges.build(p, model_loader(p)), replies)
    save(p, "judgments", out)
    return out


def annotation_sheet(p: config.Params, judgments: pd.DataFrame, generations: pd.DataFrame,
                     truncate: int | None = 600) -> Path | None:
    """The blind sheet of replies on which the keyword monitor and the learned judges disagree, for
    human annotation (``annotation/sheet.csv``; the key to generation ids in ``annotation/key.csv``)."""
    from .judges import human

    others = [j for j in ("learned_refusal", "learned_refusal_soft", "learned_harmful") if j in set(judgments["judge"])]
    if not others:
        return None
    replies = generations.rename(columns={"query": "prompt"})
    sheet, key = human.disagreement_sheet(judgments, replies, "keyword", others, p.seed, truncate)
    folder = run_dir(p.run_name) / "annotation"
    folder.mkdir(parents=True, exist_ok=True)
    sheet.to_csv(folder / "sheet.csv", index=False)
    key.to_csv(folder / "key.csv", index=False)
    return folder / "sheet.csv"


# --- 05 statistics ---------------------------------------------------------------------------------
def statistics(p: config.Params, generations, judgments, items) -> dict[str, pd.DataFrame]:
    from . import kv_analysis as ka

    out = ka.outcomes(generations, judgments, p.kv.sink)
    tables = {
        "refusal_rates": ka.refusal_rates(out, p.stats.alpha),
        "paired_tests": ka.paired_drops(out, p.stats.n_bootstrap, p.seed, p.stats.alpha),
        "judge_agreement": judges.agreement(judgments),
    }
    scored = ka.mmlu_scores(generations, items, p.kv.sink)
    if len(scored):
        tables["mmlu_accuracy"], tables["mmlu_tests"] = ka.mmlu_accuracy(scored, p.stats.n_bootstrap, p.seed,
                                                                         p.stats.alpha)
    folder = run_dir(p.run_name) / "stats"
    folder.mkdir(parents=True, exist_ok=True)
    for name, df in tables.items():
        df.to_csv(folder / f"{name}.csv", index=False)
    return tables


def read_stats(p: config.Params) -> dict[str, pd.DataFrame]:
    folder = run_dir(p.run_name) / "stats"
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: not found; run notebook 05 first")
    return {f.stem: pd.read_csv(f) for f in sorted(folder.glob("*.csv"))}


# --- 06 figures and manifest --------------------------------------------------------------------------
def figure_folders(p: config.Params) -> list[Path]:
    return [run_dir(p.run_name) / "figures"] + ([FIGURES_DIR] if p.publish_figures else [])


def inputs(p: config.Params, items: pd.DataFrame) -> list[Path]:
    """Every input file a run read: params, prompt sets, filler, refusal lists, model weights."""
    from .judges.keyword import LISTS_FILE

    files = {Path(p.source_file).resolve(), FILLER_FILE, LISTS_FILE}
    files |= {datasets.DATA_DIR / f for f in items["source_file"].unique()}
    for m in p.models.values():
        where = models.resolve(m.source)
        if where.gguf_file:
            files.add(Path(where.directory) / where.gguf_file)
        if m.adapter:
            files |= {f for f in (ROOT / m.adapter).iterdir() if f.is_file()}
    return sorted(files)


def write_manifest(p: config.Params, items: pd.DataFrame) -> Path:
    return store.write_manifest(run_dir(p.run_name), config.to_dict(p), inputs(p, items))


# --- whole runs and user entry points ------------------------------------------------------------------
def run_notebooks(params_file: str) -> None:
    """Check the params, then execute every numbered notebook into ``results/<run>/notebooks/``."""
    import papermill as pm

    p = config.load(params_file)
    preflight(p)
    out = run_dir(p.run_name) / "notebooks"
    out.mkdir(parents=True, exist_ok=True)
    for nb in NOTEBOOKS:
        print(f"[{p.run_name}] {nb.name}", flush=True)
        pm.execute_notebook(str(nb), str(out / nb.name), parameters={"params_file": str(Path(params_file).resolve())},
                            cwd=str(ROOT / "notebooks"), progress_bar=False, log_output=False)


def generate_user(prompts_csv: str, model_name: str, run_name: str, params_file: str, policy_names: list[str],
                  filler_tokens: int) -> Path:
    """``make generate``: replies to a user's prompts under the chosen retention policies."""
    from . import generation
    from .prompts import build_prompts as build

    p = config.load(params_file)
    items = datasets.read_user_prompts(prompts_csv)
    m = spec(p, model_name)
    models.resolve(m.source)
    policy_list = [kv.policy(p.kv, n) for n in policy_names]
    model, tok = models.load(m)
    context = getattr(model.config, "max_position_embeddings", None)
    parts = [build(items.iloc[[i]], tok, [(filler_tokens, items.iloc[i]["system"] or None)], context,
                   p.kv.max_new_tokens) for i in range(len(items))]
    prompts = pd.concat(parts, ignore_index=True).assign(prompt_id=items["item_id"].values)
    shards = store.ShardStore(run_dir(run_name) / "shards" / "generations")
    gens = generation.run(model, tok, model_name, prompts, lambda row: policy_list, shards,
                          [generation.Decoding(0.0, p.seed, p.kv.max_new_tokens)], batch_rows=p.kv.batch_rows)
    return store.write_atomic(gens, run_dir(run_name) / "generations.parquet")


def read_replies(path: str | Path) -> pd.DataFrame:
    """A replies file for ``make judge``: CSV (prompt, reply[, id]) or a generations table
    (generation_id, query, reply). Returns generation_id, prompt, reply; checks before any work."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: replies file not found")
    if path.suffix == ".parquet":
        df = pd.read_parquet(path)
        need = ["generation_id", "query", "reply"]
        df = df.rename(columns={"query": "prompt"}) if all(c in df for c in need) else df
    else:
        try:
            df = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: not UTF-8 text ({e})") from None
        need = ["prompt", "reply"]
        if "id" in df:
            df = df.rename(columns={"id": "generation_id"})
    missing = [c for c in ("prompt", "reply") if c not in df]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing}; expected columns {need}, got {list(df)}")
    if "generation_id" not in df:
        df["generation_id"] = [f"row-{i:05d}" for i in range(len(df))]
    dup = df["generation_id"].duplicated()
    if dup.any():
        raise ValueError(f"{path}: row {int(dup.idxmax())}: duplicate id {df.loc[dup.idxmax(), 'generation_id']!r}")
    return df[["generation_id", "prompt", "reply"]].astype(str)


def judge_user(replies_file: str, run_name: str, params_file: str) -> Path:
    """``make judge``: every configured judge on replies produced elsewhere, plus the agreement table."""
    p = config.load(params_file)
    replies = read_replies(replies_file)
    out = judges.judge_replies(judges.build(p, model_loader(p)), replies)
    path = store.write_atomic(out, run_dir(run_name) / "judgments.parquet")
    judges.agreement(out).to_csv(run_dir(run_name) / "judge_agreement.csv", index=False)
    return path
