"""The library's shape, as the design states it: no import circles; an import inside a function only where it
keeps a heavy dependency off a module that does not already load it, and says so; shared modules never name a
study and never probe one; no study module over about 400 lines; the tracker's numbers stay out of the code and
docs; docs/usage.md's "Adding a study" is the study interface's own table."""
from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from refusal_audit import studies
from refusal_audit.paths import ROOT
from refusal_audit.studies import contract

LIB = ROOT / "lib" / "refusal_audit"
# third-party packages whose import costs seconds or pulls a GPU stack: what a lazy import may keep off a path
HEAVY = {"torch", "transformers", "peft", "ray", "sentence_transformers", "sklearn", "matplotlib", "seaborn",
         "papermill", "nbconvert", "IPython", "statsmodels", "datasketch", "gguf", "accelerate", "bitsandbytes",
         "awq", "scipy"}
STUDY_PACKAGES = {p.name for p in (LIB / "studies").iterdir() if (p / "__init__.py").is_file()}
MAX_STUDY_MODULE_LINES = 400


def module_name(path: Path) -> str:
    rel = path.relative_to(LIB.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


MODULES = {module_name(f): f for f in sorted(LIB.rglob("*.py"))}


def resolve(importer: str, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The modules an import statement names: library modules by full name, third-party by top-level name."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    package = importer if MODULES[importer].name == "__init__.py" else importer.rsplit(".", 1)[0]
    if node.level:
        base = package.split(".")
        base = base[:len(base) - node.level + 1]
        stem = ".".join(base + ([node.module] if node.module else []))
    else:
        stem = node.module
    # `from . import x` imports the module x when x is one (the package itself is its parent, not an import)
    subs = [f"{stem}.{a.name}" for a in node.names if f"{stem}.{a.name}" in MODULES]
    return subs + ([stem] if len(subs) < len(node.names) else [])


def is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


@cache
def imports(name: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """(modules imported at module level, (line, modules) of each import inside a function) of library module
    ``name``; imports under ``if TYPE_CHECKING`` are types only and count as neither."""
    tree = ast.parse(MODULES[name].read_text())
    top, inner = [], []

    def walk(body, in_function):
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                (inner.append((node.lineno, resolve(name, node))) if in_function else top.extend(resolve(name, node)))
            elif isinstance(node, ast.If) and is_type_checking(node):
                continue
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                walk(node.body, True)
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    walk(getattr(node, field, []) or [], in_function)
    walk(tree.body, False)
    return top, inner


def library(mods: list[str]) -> list[str]:
    return [m for m in mods if m in MODULES]


@cache
def closure(name: str) -> frozenset[str]:
    """Every module (library and third-party top-level) loaded by importing ``name``, its packages included."""
    seen, todo = set(), [name]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        parts = m.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in MODULES]
        if m in MODULES:
            todo += imports(m)[0]
    return frozenset(x if x in MODULES else x.split(".")[0] for x in seen)


def test_no_import_circles():
    graph = {m: set(library(imports(m)[0])) - {m} for m in MODULES}
    state: dict[str, int] = {}
    circles = []

    def visit(m, path):
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                circles.append(" -> ".join(path[path.index(n):] + [n]))
            elif n not in state:
                visit(n, path + [n])
        state[m] = 2
    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not circles, circles


def test_an_import_inside_a_function_keeps_something_heavy_off_its_module_and_says_so():
    """Allowed only where the imported module loads a heavy package (``HEAVY``) that the importing module does
    not load already, with the reason in a comment on the line (``# lazy: ...``)."""
    bad = []
    for name, path in MODULES.items():
        lines = path.read_text().splitlines()
        mine = closure(name)
        for line, mods in imports(name)[1]:
            heavy = set().union(*(closure(m) if m in MODULES else {m.split(".")[0]} for m in mods)) & HEAVY
            why = [] if heavy - mine else ["keeps nothing heavy off the module" + (
                f" ({', '.join(sorted(heavy))} already loaded)" if heavy else "")]
            if "# lazy:" not in lines[line - 1]:
                why.append("no '# lazy:' reason on the line")
            if why:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {'; '.join(why)}")
    assert not bad, "\n".join(bad)


def shared_modules() -> dict[str, Path]:
    """Every library module that is not a study's own (the registry and the interface included)."""
    return {n: f for n, f in MODULES.items() if not any(n.startswith(f"refusal_audit.studies.{s}") for s in
                                                        STUDY_PACKAGES)}


def test_shared_modules_never_name_a_study():
    """No shared module imports a study, compares a value with a study's name or indexes by one (the registry's
    own ``register`` lines aside); no study imports another study."""
    bad = []
    for name, path in MODULES.items():
        own = next((s for s in STUDY_PACKAGES if name.startswith(f"refusal_audit.studies.{s}")), None)
        for m in imports(name)[0] + [x for _, ms in imports(name)[1] for x in ms]:
            other = re.match(r"refusal_audit\.studies\.(\w+)", m)
            if other and other.group(1) in STUDY_PACKAGES and other.group(1) != own:
                bad.append(f"{path.relative_to(ROOT)}: imports {m}")
        if own or name == "refusal_audit.studies":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            named = []
            if isinstance(node, ast.Compare):
                named = [c for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                named = [node.slice]
            bad += [f"{path.relative_to(ROOT)}:{c.lineno}: {c.value!r}" for c in named if c.value in STUDY_PACKAGES]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("module", ["pipeline", "report", "verdict_table", "plan", "families", "__main__", "config"])
def test_the_pipeline_calls_the_interface_and_never_probes_a_study(module):
    text = (LIB / f"{module}.py").read_text()
    assert not re.search(r"\b(hasattr|getattr)\(", text), module


def test_no_study_module_is_over_about_400_lines():
    long = {str(f.relative_to(ROOT)): n for f in (LIB / "studies").rglob("*.py")
            if (n := len(f.read_text().splitlines())) > MAX_STUDY_MODULE_LINES}
    assert not long, long


def test_code_and_docs_cite_reasons_not_the_tracker():
    """A reader of the repository cannot open a tracker's numbered entries: the reason is written where it applies,
    the chronology in CHANGELOG.md. Code, tests, docs, params, notebooks and every data set's SOURCE.md."""
    where = [LIB, ROOT / "docs", ROOT / "params", ROOT / "notebooks", ROOT / "data", ROOT / "tests", ROOT / "benchmarks",
             ROOT / "organism", ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "Makefile"]
    files = [f for w in where for f in ([w] if w.is_file() else w.rglob("*")) if f.is_file()
             and (f.suffix in (".py", ".md", ".yaml", ".ipynb", ".txt") or f.name == "Makefile")]
    hits = [f"{f.relative_to(ROOT)}:{i}" for f in files for i, line in enumerate(f.read_text().splitlines(), 1)
            if re.search(r"\bissues? #?[0-9]+", line, re.I)]
    assert not hits, hits


def test_usage_md_adding_a_study_is_the_interface():
    """docs/usage.md's table of members is ``contract.members_table()``: a member added, renamed or made
    optional in the interface fails here until the docs say so."""
    text = (ROOT / "docs" / "usage.md").read_text()
    block = re.search(r"<!-- begin study-interface -->\n(.*?)\n<!-- end study-interface -->", text, re.S)
    assert block, "docs/usage.md: no <!-- begin study-interface --> ... <!-- end study-interface --> block"
    assert block.group(1) == contract.members_table()


def test_every_registered_study_implements_the_interface():
    for name in studies.REGISTRY:
        study = studies.get(name)
        assert isinstance(study, contract.Study) and contract.missing_member(type(study)) is None, name
