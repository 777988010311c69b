"""Every relative link of the documents a reader opens first (README.md, docs/, each study's README and the
papers' numbers' README) resolves inside a clone of the repository, and none of them sends the reader to a
folder only the project's own workspace has (``../shared/``: the design and the source papers live in
``docs/design.md`` and ``data/published/``)."""
import re
from pathlib import Path

import pytest

from refusal_audit.paths import ROOT

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
OUTSIDE = re.compile(r"(\.\./shared/|`shared/)")


def documents() -> list[Path]:
    return sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "lib/refusal_audit/studies").glob("*/README.md"),
                   ROOT / "data/published/README.md"])


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """The relative links of ``path`` whose target is not a file or folder under ``root`` (the checkout; web
    links, mail and in-page anchors are not checked here)."""
    out = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        where = (path.parent / target.split("#")[0]).resolve()
        if not where.exists() or not where.is_relative_to(root):
            out.append(f"{path.relative_to(root)}: {target}")
    return out


def test_the_checker_names_a_link_that_leaves_the_clone_or_points_nowhere(tmp_path):
    clone = tmp_path / "clone"
    (clone / "docs").mkdir(parents=True)
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "DESIGN.md").write_text("outside the clone")
    (clone / "docs" / "usage.md").write_text("")
    page = clone / "README.md"
    page.write_text("[design](../shared/DESIGN.md) [ok](docs/usage.md) [gone](docs/none.md) [web](https://arxiv.org) "
                    "[anchor](#x)")
    assert broken_links(page, clone) == ["README.md: ../shared/DESIGN.md", "README.md: docs/none.md"]
    assert OUTSIDE.findall("see `shared/seeds/000.txt`")


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_a_clone(path):
    assert path.is_file(), path
    assert broken_links(path) == []
    assert not OUTSIDE.findall(path.read_text(encoding="utf-8")), f"{path}: names a folder a clone does not have"
