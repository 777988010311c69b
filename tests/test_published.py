"""The repository's figures/ is written by ``make figures`` only (``published``), from a finished run, with
the provenance that says which run and commit drew each file; ``make all`` leaves the checkout as it was."""
import json
import re

import pytest
import yaml

from refusal_audit import config, published
from refusal_audit.paths import FIGURES_DIR, PARAMS_DIR


def finished_run(tmp_path, commit="a" * 40):
    run = tmp_path / "results" / "default"
    (run / "figures").mkdir(parents=True)
    for name in ("kv_a.png", "kv_a.pdf", "frames_b.png"):
        (run / "figures" / name).write_bytes(name.encode())
    (run / "manifest.json").write_text(json.dumps({"params": {}, "git_commit": commit}))
    return run


def test_publishing_copies_the_runs_figures_and_records_where_they_come_from(tmp_path):
    run, folder = finished_run(tmp_path), tmp_path / "figures"
    folder.mkdir()
    (folder / "stale_old.png").write_bytes(b"from an older run")
    published.publish(run, folder)
    record = json.loads((folder / published.PROVENANCE).read_text())
    assert record["run"] == "default" and record["git_commit"] == "a" * 40
    assert sorted(f.name for f in folder.glob("*.p*")) == sorted(record["files"]) == ["frames_b.png", "kv_a.pdf", "kv_a.png"]
    assert published.check(folder) == []
    (folder / "kv_a.png").write_bytes(b"redrawn by hand")
    (folder / "frames_b.png").unlink()
    (folder / "extra.png").write_bytes(b"?")
    assert published.check(folder) == ["extra.png: not in PROVENANCE.json",
                                       "frames_b.png: recorded in PROVENANCE.json, missing",
                                       "kv_a.png: changed since it was published (sha256 differs)"]


def test_an_unfinished_run_is_not_published(tmp_path):
    run = finished_run(tmp_path)
    (run / "manifest.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"manifest.json: not found; the run is not finished"):
        published.publish(run, tmp_path / "figures")


def test_the_committed_figures_are_the_ones_a_committed_run_drew():
    """Every file of figures/ is the one its recorded run drew, at a commit with no uncommitted change."""
    record = json.loads((FIGURES_DIR / published.PROVENANCE).read_text())
    assert re.fullmatch(r"[0-9a-f]{40}", record["git_commit"]), record["git_commit"]
    assert published.check() == []


def test_no_params_file_writes_into_the_repository():
    """The key that let a run write into figures/ is gone: a params file that still has it is refused by name."""
    raw = yaml.safe_load((PARAMS_DIR / "ci.yaml").read_text()) | {"publish_figures": True}
    with pytest.raises(config.ParamsError, match="x.yaml: publish_figures: unknown key"):
        config.from_dict(raw, "x.yaml")
