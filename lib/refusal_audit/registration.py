"""A checkable registration for any params file (the frames control's is the first): ``<params>.sha256`` beside
the file holds the sha256 of the params as registered, committed on its own before the run that uses them. Loading
a params file that has one checks the hash (one clear error on a mismatch); ``record`` gives what the run's
manifest should hold (the params hash, the registration's commit, and whether they match)."""
from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from .errors import ParamsError


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def registration_file(params_file: Path) -> Path:
    return Path(params_file).with_suffix(".sha256")


def verify(params_file: Path) -> None:
    """Nothing when the params file has no registration or matches it; else one ParamsError naming the file, the
    key (sha256) and both hashes."""
    reg = registration_file(params_file)
    if not reg.is_file():
        return
    want = reg.read_text().split()[0] if reg.read_text().split() else ""
    got = sha256(params_file)
    if want != got:
        raise ParamsError(f"{params_file}: sha256: expected {want or '(empty)'} (the registration in {reg.name}), "
                          f"got {got}: the params changed since they were registered")


def _git(args: list[str], cwd: Path) -> str:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def record(params_file: Path) -> dict[str, str]:
    """For the manifest: ``params_sha256``; ``registration_commit`` (the last commit that wrote the
    registration file, i.e. registered the hash it holds; "" when none or uncommitted); ``registration`` =
    "matches" / "does not match" / "none"."""
    params_file = Path(params_file).resolve()
    reg = registration_file(params_file)
    out = {"params_sha256": sha256(params_file), "registration_commit": "", "registration": "none"}
    if reg.is_file():
        out["registration_commit"] = _git(["log", "-1", "--format=%H", "--", reg.name], reg.parent)
        out["registration"] = "matches" if reg.read_text().split()[:1] == [out["params_sha256"]] else "does not match"
    return out
