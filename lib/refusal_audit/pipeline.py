"""A run: the studies its params file switches on, driven stage by stage.

``items`` (01) -> ``prompts`` (02) -> ``generations`` (03) -> ``judgments`` (04) -> ``stats/<study>/``
(05) -> ``figures/<study>_*`` + ``manifest.json`` (06). Each stage calls the same-named function of
every enabled study (``studies/<name>``) and writes that study's table into the study's own folder,
``results/<run>/<study>/<table>.parquet``, with only the columns the study writes; a study may name its
tables otherwise (``TABLES``: the policy study's classifiers write ``scores``, judged into ``verdicts``).
A run on a subset of studies reads and writes only those studies' folders. Run-wide files stay at the
run's root: ``contamination.csv``, ``stats/``, ``figures/``, ``notebooks/``, ``report.html``,
``manifest.json``. The notebooks narrate these calls; the CLI reuses them for ``make check``,
``make generate`` and ``make judge``.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd

from . import (
    config,
    contamination,
    datasets,
    executor,
    generation,
    judges,
    models,
    progress,
    registration,
    report,
    store,
    studies,
    verdict_table,
)
from .errors import ParamsError
from .judges.keyword import LISTS_FILE
from .paths import ROOT, run_dir, study_dir
from .prompts import FILLER_FILE, build_prompts
from .studies.contract import Study

NOTEBOOKS = sorted((ROOT / "notebooks").glob("0*.ipynb"))
TABLES = {"items": "items", "prompts": "prompts", "generate": "generations", "judge": "judgments"}
NOTEBOOK_OF = {"items": "01", "prompts": "02", "generate": "03", "judge": "04"}
ID_COLUMN = {"generations": "generation_id", "scores": "score_id"}  # what a judgment row points at


def tables_of(study: Study) -> dict[str, str]:
    """Stage -> the file stem of the study's table for it: ``TABLES``, or the study's own names."""
    return {**TABLES, **study.tables}


def preflight(p: config.Params, pool: models.Pool | None = None, names: list[str] | None = None) -> None:
    """Everything that can be checked without model weights (for the studies ``names``, default all):
    stops before any work, naming what is wrong."""
    pool = pool or models.Pool(p.models, device=p.device)
    models.check_models(p, pool)  # sources, GPU-only settings on this machine, adapters
    judges.registry.make("keyword", p)  # its refusal list exists and its match mode is known
    for name in p.studies if names is None else names:
        studies.get(name).preflight(p, pool)


class Run:
    """One params file and the studies to run (``only``: a subset, e.g. ``"kv,frames"``; empty = all)."""

    def __init__(self, params_file: str | Path, only: str | list[str] | None = None):
        path = Path(params_file)
        self.p = config.load(path if path.is_absolute() or path.exists() else ROOT / path)
        self.names = studies.select(list(self.p.studies), only)
        self.models = models.Pool(self.p.models, device=self.p.device)
        self.dir = run_dir(self.p.run_name)
        store.check_layout(self.dir)

    def __repr__(self) -> str:
        return f"run {self.p.run_name!r} from {self.p.source_file}: {', '.join(self.names)}; outputs in {self.dir}"

    def study(self, name: str) -> Study:
        return studies.get(name)

    def folder(self, name: str) -> Path:
        """The study's own folder: its stage tables, extra tables, shards and sheets."""
        return study_dir(self.p.run_name, name)

    # --- each study's stage tables -------------------------------------------------------------------------
    def table(self, name: str, study: str) -> pd.DataFrame:
        """The study's table ``name`` (``items``, ``generations``, ``scores``, ...); a missing stage table
        names the notebook (and ``make`` call) that writes it."""
        path = self.folder(study) / f"{name}.parquet"
        if not path.is_file():
            stage = next((s for s, t in tables_of(self.study(study)).items() if t == name), None)
            writer = f"notebook {NOTEBOOK_OF[stage]} ({stage})" if stage else "its stages"
            raise FileNotFoundError(f"{path}: not found: the {study} study's {name} table, written by {writer}, "
                                    f"has not run for this run; run make all PARAMS={self.p.source_file} "
                                    f"STUDIES={study}")
        return pd.read_parquet(path)

    def output(self, stage: str, study: str) -> pd.DataFrame:
        """What ``stage`` wrote for ``study`` (its table under the study's name for it)."""
        return self.table(tables_of(self.study(study))[stage], study)

    def _stage(self, stage: str, compute) -> dict[str, pd.DataFrame]:
        """Each study's part of ``stage``, written to its folder as soon as it is computed."""
        out = {}
        for name in self.names:
            out[name] = compute(name, self.study(name))
            store.write_atomic(out[name], self.folder(name) / f"{tables_of(self.study(name))[stage]}.parquet")
        return out

    # --- the six stages ----------------------------------------------------------------------------------
    def items(self) -> dict[str, pd.DataFrame]:
        """Every study's items, then the contamination check of all of them (``contamination.csv``)."""
        preflight(self.p, self.models, self.names)
        out = self._stage("items", lambda name, s: s.items(self.p))
        self.audit()
        return out

    def audit(self) -> pd.DataFrame:
        """This run's studies' items against every training pool the project uses: per item (each study's
        ``contamination.parquet``) and per (study:dataset, pool) in the run-wide ``contamination.csv``,
        where only these studies' rows are replaced."""
        items = pd.concat([self.table("items", n).assign(study=n) for n in self.names], ignore_index=True)
        rows, overlap = report.audit(self.p, items)
        for n in self.names:
            store.write_atomic(rows[rows["id"].str.startswith(f"{n}:")].reset_index(drop=True),
                               self.folder(n) / "contamination.parquet")
        path = self.dir / "contamination.csv"
        if path.is_file():
            old = pd.read_csv(path)
            overlap = pd.concat([old[~old["benchmark"].str.split(":").str[0].isin(self.names)], overlap],
                                ignore_index=True)
        overlap.to_csv(path, index=False)
        return overlap

    def contamination(self) -> pd.DataFrame:
        """The contamination check of this run's studies (``audit`` writes it with the items)."""
        overlap = pd.read_csv(self.dir / "contamination.csv")
        mine = overlap["benchmark"].str.split(":").str[0].isin(self.names)
        return overlap[mine & (overlap["pool"] != "(any)")].reset_index(drop=True)

    def prompts(self) -> dict[str, pd.DataFrame]:
        return self._stage("prompts", lambda name, s: s.prompts(self.p, self.output("items", name), self.models))

    def generate(self) -> dict[str, pd.DataFrame]:
        return self._stage("generate", lambda name, s: s.generate(
            self.p, self.output("prompts", name), self.models,
            store.ShardStore(self.folder(name) / "shards" / "generations")))

    def judge(self) -> dict[str, pd.DataFrame]:
        return self._stage("judge", lambda name, s: s.judge(self.p, self.output("generate", name), self.models,
                                                            self.folder(name)))

    def decontaminated(self, name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(the study's items without contaminated ones, the exclusion per dataset). An item is
        contaminated when the audit (the study's ``contamination.parquet``) finds it, exactly or nearly, in a
        pool the study's scores rest on (``audited_pools``: the training requests of the models it
        measures; for kv, which measures the monitors, also the learned judges'); a study whose unit of analysis
        groups items (``contamination_unit``: a confusion cluster) loses the whole unit. A dataset
        left with no item is reported as excluded, never divided by."""
        study, items = self.study(name), self.output("items", name)
        pools = study.audited_pools(self.p)
        rows = self.table("contamination", name)
        rows = rows[rows["pool"].isin(pools)]
        audited = items[items["role"] != "train"]
        evaluation = pd.DataFrame({"id": name + ":" + audited["item_id"].astype(str), "prompt": audited["text"]})
        clean = contamination.decontaminate(evaluation, rows) if pools else evaluation
        unit = study.contamination_unit
        dirty_items = set(audited["item_id"][~evaluation["id"].isin(clean["id"]).to_numpy()])
        dirty_units = set(items.loc[items["item_id"].isin(dirty_items), unit])
        dropped = items[unit].isin(dirty_units) & (items["role"] != "train")
        table = (audited.assign(excluded=dropped[audited.index], contaminated=audited["item_id"].isin(dirty_items))
                 .groupby("dataset").agg(n_items=("item_id", "size"), contaminated=("contaminated", "sum"),
                                         excluded=("excluded", "sum")).reset_index())
        table["n_clean"] = table["n_items"] - table["excluded"]
        table["status"] = table["n_clean"].map(lambda n: "excluded: entirely contaminated" if n == 0 else "used")
        table["pools"] = ", ".join(pools) or "(the study audits its own rows)"
        table["unit"] = unit
        return items[~dropped].reset_index(drop=True), table

    def analyse(self) -> dict[str, dict[str, pd.DataFrame]]:
        """Every study's statistics on its decontaminated items (``decontaminated``), with the
        exclusion table as ``stats/<study>/decontamination.csv``."""
        out = {}
        for name in self.names:
            items, excluded = self.decontaminated(name)
            gens = self.output("generate", name)
            key = ID_COLUMN[tables_of(self.study(name))["generate"]]
            out_ids = set(gens[key][~gens["item_id"].isin(set(items["item_id"])) & gens["item_id"].notna()])
            gens = gens[~gens[key].isin(out_ids)].reset_index(drop=True)
            judged = self.output("judge", name)
            judged = judged[~judged[key].isin(out_ids)].reset_index(drop=True)
            tables = {**self.study(name).analyse(self.p, items, gens, judged), "decontamination": excluded}
            folder = self.dir / "stats" / name
            folder.mkdir(parents=True, exist_ok=True)
            for stem, df in tables.items():
                df.to_csv(folder / f"{stem}.csv", index=False)
            out[name] = tables
        return out

    def read_stats(self, name: str) -> dict[str, pd.DataFrame]:
        folder = self.dir / "stats" / name
        if not folder.is_dir():
            raise FileNotFoundError(f"{folder}: not found; run notebook 05 first")
        return store.read_tables(folder)

    def verdicts(self) -> pd.DataFrame:
        """The verdict table of the run's studies (``verdict_table``), written as ``stats/verdicts.csv``."""
        return verdict_table.write(self.p, self.names, self.dir / "stats")

    def figures(self) -> dict[str, list[str]]:
        folders = [self.dir / "figures"]  # the repository's figures/ only through make figures (published.py)
        return {name: self.study(name).figures(self.p, self.read_stats(name), folders) for name in self.names}

    def describe(self, stage: str):
        """What each of the run's studies does at ``stage`` (its ``stage_notes``), as notebook markdown; at the
        judging stage, first the run's judges with their operational definitions (the judge registry)."""
        from IPython.display import Markdown  # lazy: only a notebook kernel shows tables

        lines = []
        if stage == "judge":
            lines += [f"* `{s.name}` ({s.kind}): {s.definition}" for s in judges.registry.configured(self.p, None)]
            lines.append("")
        lines += [f"* **{n}**: {self.study(n).stage_notes.get(stage, '(nothing at this stage)')}" for n in self.names]
        return Markdown("\n".join(lines))

    def show(self, stage: str, results: dict) -> None:
        """Display each study's summary of a stage (tables and short texts) in the notebook."""
        from IPython.display import Markdown, display  # lazy: only a notebook kernel shows tables

        for name, table in results.items():
            display(Markdown(f"### {name}"))
            if stage == "analyse" and "decontamination" in table:
                display(Markdown("Items left out of every statistic below as contaminated (found, exactly or "
                                 "nearly, in a training pool the scores rest on):"), table["decontamination"])
            for thing in self.study(name).summary(self.p, stage, table):
                display(Markdown(thing) if isinstance(thing, str) else thing)

    # --- the run's record -----------------------------------------------------------------------------------
    def inputs(self) -> list[Path]:
        """Every input file the run read: params, prompt sets, filler, refusal lists, model weights."""
        files = {Path(self.p.source_file).resolve(), FILLER_FILE, LISTS_FILE}
        written = [self.folder(n) / "items.parquet" for n in self.p.studies]  # every study of the run folder
        sources = pd.concat([pd.read_parquet(f, columns=["source_file"])["source_file"] for f in written
                             if f.is_file()]).dropna().unique()
        files |= {datasets.DATA_DIR / f for f in sources if (datasets.DATA_DIR / f).is_file()}
        for m in self.p.models.values():
            where = models.resolve(m.source)
            if where.gguf_file:
                files.add(Path(where.directory) / where.gguf_file)
            if m.adapter:
                files |= {f for f in (ROOT / m.adapter).iterdir() if f.is_file()}
        return sorted(files)

    def write_manifest(self) -> Path:
        record = registration.record(Path(self.p.source_file)) if Path(self.p.source_file).is_file() else {}
        return store.write_manifest(self.dir, config.to_dict(self.p), self.inputs(), record)


# --- whole runs and user entry points ------------------------------------------------------------------
def run_notebooks(params_file: str, only: str = "") -> None:
    """Check the params, then execute every numbered notebook into ``results/<run>/notebooks/``.
    Progress bars go to this process's standard error (the terminal), not into the notebooks."""
    import papermill as pm  # lazy: only a whole run executes notebooks

    run = Run(params_file, only)
    preflight(run.p, run.models, run.names)
    out = run.dir / "notebooks"
    out.mkdir(parents=True, exist_ok=True)
    os.environ[progress.ENV] = f"/proc/{os.getpid()}/fd/2"
    for nb in NOTEBOOKS:
        print(f"[{run.p.run_name}] {nb.name} ({', '.join(run.names)})", flush=True)
        start = time.perf_counter()
        pm.execute_notebook(str(nb), str(out / nb.name),
                            parameters={"params_file": str(Path(params_file).resolve()), "studies": only},
                            cwd=str(ROOT / "notebooks"), progress_bar=False, log_output=False)
        print(f"[{run.p.run_name}] {nb.name}: {time.perf_counter() - start:.0f} s", flush=True)
    print(f"[{run.p.run_name}] report: {report.write(run)}", flush=True)


def add_user_rows(name: str, run_name: str, params_file: str) -> list[str]:
    """What a user brought to the study ``name``'s command (``Study.user_rows``: a guard's verdict, a corpus) added
    to ``results/<run_name>/stats/verdicts.csv``, each system replacing its own earlier row, every other row kept;
    the run's report rendered again when the run is the params file's and has one. Returns what it wrote."""
    p = config.load(params_file)
    folder = run_dir(run_name)
    rows = studies.get(name).user_rows(p, folder)
    if not rows:
        return []
    verdict_table.add(p, rows, folder / "stats")
    lines = [f"added {len(rows)} row(s) to {folder / 'stats' / verdict_table.FILE} ({', '.join(r.system for r in rows)})"]
    page = folder / "report.html"
    if run_name == p.run_name and page.is_file() and report.TITLE in page.read_text(encoding="utf-8")[:2000]:
        lines.append(f"wrote {report.write(Run(params_file, name), refresh=False)}")
    elif run_name == p.run_name:  # e.g. make confusion's own report in the run's folder: left as it is
        lines.append(f"{page}: not the run's report; the run's report shows the row when it is next rendered")
    return lines


USER = "user"  # the user routes' material: results/<RUN>/user/ (make generate, make judge)
USER_COLUMNS = ("role", "filler_tokens", "system_prompt", "query")  # beside the core: the condition, the request


def user_generation(p: config.Params):
    """The decoding settings ``make generate`` uses: those of the first study of ``p`` that decodes under
    retention (``Study.user_generation``)."""
    for name in p.studies:
        settings = studies.get(name).user_generation(p)
        if settings is not None:
            return settings
    raise ParamsError(f"{p.source_file}: no study section gives make generate its retention settings and "
                      f"max_new_tokens (the file enables {', '.join(p.studies)}; none decodes under retention)")


def generate_user(prompts_csv: str, model_name: str, run_name: str, params_file: str, policy_names: list[str],
                  filler_tokens: int) -> Path:
    """``make generate``: replies to a user's prompts under the chosen retention policies (greedy), with
    the retention settings and ``max_new_tokens`` of the params file's study that decodes under retention,
    written to ``results/<RUN>/user/generations.parquet`` (its shards beside it)."""
    p = config.load(params_file)
    settings = user_generation(p)
    items = datasets.read_user_prompts(prompts_csv)
    pool = models.Pool(p.models, device=p.device)
    models.resolve(pool.spec(model_name).source)
    policy_list = [settings.policy(n) for n in policy_names]
    tok, context = pool.tokenizer(model_name), pool.context_window(model_name)  # the model loads where it runs
    new = settings.max_new_tokens
    parts = [build_prompts(items.iloc[[i]], tok, [(filler_tokens, items.iloc[i]["system"] or None)], context, new)
             for i in range(len(items))]
    prompts = pd.concat(parts, ignore_index=True).assign(prompt_id=items["item_id"].values)
    folder = study_dir(run_name, USER)
    gens = executor.generate(p, pool, model_name, prompts, lambda row: policy_list,
                             store.ShardStore(folder / "shards" / "generations"),
                             [generation.Decoding(0.0, p.seed, new)], carry=USER_COLUMNS)
    return store.write_atomic(gens, folder / "generations.parquet")


def read_replies(path: str | Path) -> pd.DataFrame:
    """A replies file for ``make judge``: CSV (prompt, reply[, id]) or a generations table
    (generation_id, query, reply). Returns generation_id, prompt, reply; checks before any work."""
    path = Path(path)
    if path.suffix == ".parquet":
        if not path.is_file():
            raise FileNotFoundError(f"{path}: replies file not found")
        df = pd.read_parquet(path).rename(columns={"query": "prompt"})
        missing = [c for c in ("generation_id", "prompt", "reply") if c not in df]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; expected a generations table "
                             f"(generation_id, query, reply), got {list(df)}")
    else:
        df = datasets.read_user_csv(path, ["prompt", "reply"], ["id"], "replies").rename(columns={"id": "generation_id"})
    if "generation_id" not in df:
        df["generation_id"] = [f"row-{i:05d}" for i in range(len(df))]
    dup = df["generation_id"].duplicated()
    if dup.any():
        raise ValueError(f"{path}: row {int(dup.idxmax())}: duplicate id {df.loc[dup.idxmax(), 'generation_id']!r}")
    return df[["generation_id", "prompt", "reply"]].astype(str)


def judge_user(replies_file: str, run_name: str, params_file: str) -> Path:
    """``make judge``: every configured judge on replies produced elsewhere, plus the agreement table, in
    ``results/<RUN>/user/`` (``judgments.parquet``, ``judge_agreement.csv``)."""
    p = config.load(params_file)
    replies = read_replies(replies_file)
    out = judges.judge_replies(judges.build(p, models.Pool(p.models, device=p.device).load), replies)
    folder = study_dir(run_name, USER)
    path = store.write_atomic(out, folder / "judgments.parquet")
    judges.agreement(out).to_csv(folder / "judge_agreement.csv", index=False)
    return path
