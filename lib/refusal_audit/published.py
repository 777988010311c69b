"""The repository's ``figures/``: the committed copies of one finished run's figures (the default run's), put
there by ``make figures`` and never by ``make all`` (a rerun leaves the checkout as it was).

``figures/PROVENANCE.json`` says which run drew them, at which commit (the run's ``manifest.json``), and the
sha256 of each file, so that a reader can tell which code a committed figure belongs to and a test can tell
a figure changed by hand or left over from an older run (``check``).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from .paths import FIGURES_DIR
from .store import sha256_file

PROVENANCE = "PROVENANCE.json"


def publish(run_dir: Path, folder: Path = FIGURES_DIR) -> Path:
    """Replace ``folder``'s figures by the finished run's (``run_dir/figures``) and write their provenance."""
    manifest_file = run_dir / "manifest.json"
    if not manifest_file.is_file():
        raise FileNotFoundError(f"{manifest_file}: not found; the run is not finished (make all writes it last)")
    drawn = sorted((run_dir / "figures").glob("*.p[nd][gf]"))
    if not drawn:
        raise FileNotFoundError(f"{run_dir / 'figures'}: no figure to publish")
    manifest = json.loads(manifest_file.read_text())
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.p[nd][gf]"):
        old.unlink()
    for f in drawn:
        shutil.copy2(f, folder / f.name)
    record = {"run": run_dir.name, "git_commit": manifest["git_commit"],
              "files": {f.name: sha256_file(folder / f.name) for f in drawn}}
    (folder / PROVENANCE).write_text(json.dumps(record, indent=1) + "\n")
    return folder / PROVENANCE


def check(folder: Path = FIGURES_DIR) -> list[str]:
    """What does not match ``PROVENANCE.json`` in ``folder`` (a figure changed, missing or not recorded);
    empty when every figure is the one the recorded run drew."""
    record = json.loads((folder / PROVENANCE).read_text())["files"]
    present = {f.name for f in folder.glob("*.p[nd][gf]")}
    problems = [f"{name}: not in {PROVENANCE}" for name in sorted(present - set(record))]
    problems += [f"{name}: recorded in {PROVENANCE}, missing" for name in sorted(set(record) - present)]
    problems += [f"{name}: changed since it was published (sha256 differs)" for name in sorted(present & set(record))
                 if sha256_file(folder / name) != record[name]]
    return problems
