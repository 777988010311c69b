"""environment.yml (conda users) and pyproject.toml (pip, the Makefile) declare the same dependencies."""
import re

import tomllib
import yaml

from refusal_audit.paths import ROOT


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[ ]", req, maxsplit=1)[0].lower()


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pip = {r for r in project["dependencies"]} | set(project["optional-dependencies"]["test"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    (pip_section,) = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    conda = {r for r in pip_section if not r.startswith(("-", "--"))}
    assert {_name(r): r for r in conda} == {_name(r): r for r in pip}


def test_torch_is_pinned_to_the_cpu_build_everywhere():
    assert (ROOT / "constraints.txt").read_text().count("torch==2.13.0") == 1
    assert "torch==2.13.0" in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "-c constraints.txt" in (ROOT / "Makefile").read_text()
