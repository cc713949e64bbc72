"""Data flows one way: bench -> traces -> analysis -> tables -> report -> dataset -> hub (contrib beside).

An AST walk over every import of the package (inside functions too, and ``importlib.import_module``
with a literal name) checks the walls; a subprocess checks that commands which do not train never
import torch; no module but :mod:`muon_repro.phases` spells a phase name, none but
:mod:`muon_repro.rundir` a run file name; and no package-level import cycle exists
(:data:`KNOWN_CYCLE_EDGES` is empty, and stays the truth).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from support.syntax_trees import nodes_of

from muon_repro.phases import PHASES
from muon_repro.rundir import RUN_FILES

PACKAGE = Path(__file__).resolve().parents[1] / "muon_repro"
TRAINING = ("torch", "muon_repro.model", "muon_repro.optim", "muon_repro.parallel", "muon_repro.bench")
PUBLISHING = ("muon_repro.dataset", "muon_repro.hub", "muon_repro.contrib")
DOWNSTREAM = ("muon_repro.bench", "muon_repro.analysis", "muon_repro.report", *PUBLISHING, "muon_repro.job", "muon_repro.stages")
ORCHESTRATION = ("muon_repro.job", "muon_repro.stages")  # calls every stage: nothing calls back into it
LIGHT = (*TRAINING, "pandas", "numpy", *DOWNSTREAM)  # torch-, pandas- and numpy-free vocabularies

# module prefix (relative to muon_repro/) -> import prefixes it must never reach
WALLS: dict[str, tuple[str, ...]] = {
    "analysis": (*TRAINING, "muon_repro.report", *PUBLISHING, *ORCHESTRATION),
    "report": (*TRAINING, "pyarrow", "muon_repro.analysis", *PUBLISHING, *ORCHESTRATION),  # reads tables through tables/
    "dataset": (*TRAINING, "muon_repro.hub", "muon_repro.contrib", *ORCHESTRATION),  # the dataset is made before it travels
    "hub": (*TRAINING, "muon_repro.contrib", "muon_repro.analysis", *ORCHESTRATION),  # transport only
    "contrib": (*TRAINING, *ORCHESTRATION),  # review calls the analysis itself
    "costmodel": ("muon_repro.report", *PUBLISHING, *ORCHESTRATION),
    "optim": DOWNSTREAM,
    "parallel": DOWNSTREAM,
    "rundir.py": LIGHT,
    "phases.py": LIGHT,
    "formulas.py": LIGHT,
    "run_records.py": LIGHT,
    "model_config.py": (*TRAINING, "pandas", "numpy"),
    "stages.py": TRAINING,  # only inside bench(), which trains
    "cli.py": TRAINING,
}
ALLOWED = {("stages.py", "muon_repro.bench"), ("stages.py", "muon_repro.parallel")}  # stages.bench() records runs
# file -> the one module past its wall it may import (none today: `muon-repro report`, which cites the dataset, is
# report_cli.py, outside the report package)
ALLOWED_MODULES: set[tuple[str, str]] = set()


def imports_of(path: Path) -> list[tuple[str, int]]:
    """Every module ``path`` imports, anywhere in it, with its line number."""
    found = []
    for node in nodes_of(path):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, node.lineno))
            found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.args[0].value, node.lineno))
    return found


def _reaches(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def wall_violations(package: Path = PACKAGE) -> list[str]:
    out = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        for scope, forbidden in WALLS.items():
            if not (rel == scope or rel.startswith(scope + "/")):
                continue
            for module, line in imports_of(path):
                for prefix in forbidden:
                    exempt = (scope, prefix) in ALLOWED or any(rel == f and _reaches(module, m) for f, m in ALLOWED_MODULES)
                    if _reaches(module, prefix) and not exempt:
                        out.append(f"muon_repro/{rel}:{line} imports {module} ({scope} must not import {prefix})")
    return out


def test_import_walls_hold():
    assert wall_violations() == []


def floor_violations(package: Path = PACKAGE) -> list[str]:
    """``tables/`` is the bottom floor: it imports no other module of the package, and no torch."""
    out = []
    for path in sorted((package / "tables").rglob("*.py")):
        for module, line in imports_of(path):
            if module == "torch" or (_reaches(module, "muon_repro") and not _reaches(module, "muon_repro.tables")):
                out.append(f"muon_repro/{path.relative_to(package).as_posix()}:{line} imports {module}")
    return out


def test_the_tables_floor_imports_nothing_above_it():
    assert floor_violations() == []


def cli_imports(package: Path = PACKAGE) -> list[str]:
    """Library modules that import a command-line module (``*cli``): only command-line modules may."""
    out = []
    for path in sorted(package.rglob("*.py")):
        if path.stem.endswith("cli") or path.name == "__main__.py":  # entry points
            continue
        for module, line in imports_of(path):
            if module.rsplit(".", 1)[-1].endswith("cli") and _reaches(module, "muon_repro"):
                out.append(f"muon_repro/{path.relative_to(package).as_posix()}:{line} imports {module}")
    return out


def test_library_code_never_imports_a_command_line_module():
    assert cli_imports() == []


def parquet_access(package: Path = PACKAGE) -> list[str]:
    """Places outside ``tables/`` that read or write Parquet tables with pandas: they go through tables.io."""
    out = []
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).parts[0] == "tables":
            continue
        for node in nodes_of(path):
            if isinstance(node, ast.Attribute) and node.attr in ("read_parquet", "to_parquet"):
                out.append(f"muon_repro/{path.relative_to(package).as_posix()}:{node.lineno} {node.attr}")
    return out


def test_tables_are_read_and_written_only_through_the_tables_layer():
    assert parquet_access() == []


def test_the_floor_checks_catch_what_they_forbid(tmp_path):
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "io.py").write_text(
        "from muon_repro.rundir import TRIAL_PREFIX\nfrom muon_repro.tables.stamp import x\n"
    )
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "data.py").write_text(
        "import pandas as pd\ndf = pd.read_parquet('x')\nfrom muon_repro.report.cli import y\n"
    )
    assert floor_violations(tmp_path) == [
        "muon_repro/tables/io.py:1 imports muon_repro.rundir",
        "muon_repro/tables/io.py:1 imports muon_repro.rundir.TRIAL_PREFIX",
    ]
    assert parquet_access(tmp_path) == ["muon_repro/report/data.py:2 read_parquet"]
    assert cli_imports(tmp_path)[0].startswith("muon_repro/report/data.py:3 imports muon_repro.report.cli")


def test_the_wall_check_catches_a_lazy_import(tmp_path):
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "bad.py").write_text(
        "def draw():\n    import torch\n    from muon_repro.analysis.tables import read_table\n"
    )
    (tmp_path / "optim").mkdir()
    (tmp_path / "optim" / "bad.py").write_text("import importlib\nm = importlib.import_module('muon_repro.hub.publish')\n")
    found = wall_violations(tmp_path)
    assert any("report/bad.py:2 imports torch" in v for v in found), found
    assert any("report/bad.py:3" in v and "muon_repro.analysis" in v for v in found), found
    assert any("optim/bad.py:2 imports muon_repro.hub.publish" in v for v in found), found


# Package-level import cycles. Each package of muon_repro/ is one node, and so is each top-level module (``model``,
# ``rundir``); A -> B when any module of A imports anything of B (inside functions too). Left out, the command
# dispatchers: cli.py (``muon-repro``) imports every package's command-line module, lazily, to hand it its
# subcommand; __main__.py only runs cli.py; __init__.py is the root package, which imports nothing. Counted, they
# would join every package into one tangle, and nothing imports them back, so leaving them out hides no cycle.
# A package's own cli.py is counted: it is part of its package.
DISPATCHERS = ("__init__.py", "cli.py", "__main__.py")

# Every package-level import that may lie on a cycle, with why: none. The test fails on any import that lies on a
# cycle (a new cycle always brings one), and on an entry here that no longer lies on one, so this stays the truth.
KNOWN_CYCLE_EDGES: dict[tuple[str, str], str] = {}


def package_graph(package: Path = PACKAGE) -> dict[tuple[str, str], list[str]]:
    """The package-level import graph: (A, B) -> the imports that make A -> B, as ``"a/x.py:3 imports muon_repro.b.y"``."""
    units = {p.name.removesuffix(".py") for p in package.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()}
    units -= {d.removesuffix(".py") for d in DISPATCHERS}
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        source = rel.split("/", 1)[0].removesuffix(".py")
        if rel in DISPATCHERS or source not in units:
            continue
        for module, line in imports_of(path):
            parts = module.split(".")
            if parts[0] == "muon_repro" and len(parts) > 1 and parts[1] in units and parts[1] != source:
                where = edges.setdefault((source, parts[1]), [])
                if not any(w.startswith(f"muon_repro/{rel}:{line} ") for w in where):
                    where.append(f"muon_repro/{rel}:{line} imports {module}")
    return edges


def _path(edges: dict[tuple[str, str], list[str]], start: str, goal: str) -> list[str] | None:
    """The shortest chain of packages from ``start`` to ``goal`` (breadth first), or None."""
    before: dict[str, str | None] = {start: None}
    queue = [start]
    for node in queue:
        if node == goal:
            chain = [node]
            while before[chain[-1]] is not None:
                chain.append(before[chain[-1]])
            return chain[::-1]
        for a, b in sorted(edges):
            if a == node and b not in before:
                before[b] = node
                queue.append(b)
    return None


def cyclic_edges(edges: dict[tuple[str, str], list[str]]) -> set[tuple[str, str]]:
    """The package-level imports that lie on a cycle: A -> B where A is reachable from B."""
    return {(a, b) for a, b in edges if _path(edges, b, a) is not None}


def describe_cycle(edge: tuple[str, str], edges: dict[tuple[str, str], list[str]]) -> str:
    """One cycle through ``edge``, each step named by one import that makes it."""
    chain = [edge[0], *_path(edges, edge[1], edge[0])]
    steps = [edges[(a, b)][0] for a, b in zip(chain, chain[1:])]
    return f"{' -> '.join(chain)}: " + "; ".join(steps)


def test_no_package_level_import_cycle_but_the_known_ones():
    edges = package_graph()
    on_cycles = cyclic_edges(edges)
    new = sorted(on_cycles - KNOWN_CYCLE_EDGES.keys())
    assert not new, "package-level import cycles:\n" + "\n".join(describe_cycle(e, edges) for e in new)
    fixed = sorted(KNOWN_CYCLE_EDGES.keys() - on_cycles)
    assert not fixed, f"these imports lie on no cycle any more: remove them from KNOWN_CYCLE_EDGES: {fixed}"


def test_the_cycle_check_catches_a_cycle_and_leaves_the_dispatchers_out(tmp_path):
    files = {
        "__init__.py": '"""Root."""\n',
        "cli.py": "from muon_repro.a.x import f\nfrom muon_repro.low import g\n",  # a dispatcher: left out
        "a/__init__.py": "",
        "a/x.py": "from muon_repro.b.y import h\nfrom muon_repro import __version__\n",
        "b/__init__.py": "",
        "b/y.py": "def h():\n    from muon_repro.a import x\n",  # lazily: still an edge
        "low.py": "import muon_repro.b\nimport muon_repro.cli\n",
    }
    for name, source in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(source)
    edges = package_graph(tmp_path)
    assert set(edges) == {("a", "b"), ("b", "a"), ("low", "b")}
    assert cyclic_edges(edges) == {("a", "b"), ("b", "a")}
    assert describe_cycle(("b", "a"), edges) == (
        "b -> a -> b: muon_repro/b/y.py:2 imports muon_repro.a; muon_repro/a/x.py:1 imports muon_repro.b.y"
    )


def test_only_phases_spells_phase_names_and_only_rundir_run_files():
    # The module allowed to spell each distinctive name: phases.py the phases, rundir.py the run files.
    owner = {name: "phases.py" for name in PHASES if "_" in name} | {name: "rundir.py" for name in RUN_FILES}
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for node in nodes_of(path):
            if isinstance(node, ast.Constant) and node.value in owner and owner[node.value] != rel:
                spelled.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.value!r}")
    assert spelled == []


NO_TORCH = """
import sys
from muon_repro.cli import main
argv = sys.argv[1:]
try:
    code = main(argv)
except SystemExit as exc:  # --help
    code = exc.code
print("torch imported" if "torch" in sys.modules else "torch not imported")
sys.exit(code or 0)
"""


def _run_cli(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NO_TORCH, *argv], capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.mark.parametrize(
    "command",
    [
        "analyze",
        "figures",
        "report",
        "card",
        "bundle",
        "verify",
        "publish",
        "download",
        "contribute",
        "review",
        "bench",
        "run",
        "equivalence",
        "calibrate",
        "predict",
    ],
)
@pytest.mark.slow
def test_help_never_imports_torch(command):
    done = _run_cli(command, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("torch not imported"), done.stdout[-500:]


@pytest.mark.slow
def test_top_level_help_never_imports_torch():
    done = _run_cli("--help")
    assert done.returncode == 0 and done.stdout.rstrip().endswith("torch not imported"), done.stdout[-500:] + done.stderr


@pytest.mark.slow
def test_analyze_a_committed_run_never_imports_torch(tmp_path):
    traces = PACKAGE.parent / "traces"
    (run,) = [
        p for p in (traces / "comparison" / "muon_dp2_tp2", *traces.glob("*/comparison/muon_dp2_tp2")) if p.is_dir()
    ]  # either layout
    done = _run_cli("analyze", str(run), "--out", str(tmp_path / "metrics"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.rstrip().endswith("torch not imported"), done.stdout[-500:]
    assert (tmp_path / "metrics" / "runs.parquet").is_file()
