"""The scripts in analysis_scripts/ read their arguments as the command they run does (in process: the command
lines they build, nothing run), and tools/ names every tool it holds."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from muon_repro.bench.configs import STUDY_CONFIGS

REPO = Path(__file__).resolve().parents[1]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(f"analysis_scripts_{name}", REPO / "analysis_scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


performance_comparison = _script("performance_comparison")
muon_vs_adam = _script("muon_vs_adam")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], ["analyze", "traces", "--out", "metrics"]),
        (["--max-trace-bytes", "4G", "--json"], ["analyze", "traces", "--out", "metrics", "--max-trace-bytes", "4G", "--json"]),
        (
            ["runs", "--max-trace-events", "10", "--max-event-bytes", "1M", "--max-event-names", "5"],
            [
                "analyze",
                "--out",
                "metrics",
                "/typed/runs",
                "--max-trace-events",
                "10",
                "--max-event-bytes",
                "1M",
                "--max-event-names",
                "5",
            ],
        ),
        (["--out=m2", "runs"], ["analyze", "--out=/typed/m2", "/typed/runs"]),
        (
            ["--out", "m2", "--rank", "1", "--workers", "2"],
            ["analyze", "traces", "--out", "/typed/m2", "--rank", "1", "--workers", "2"],
        ),
        (["--ou", "m2", "/abs/run"], ["analyze", "--ou", "/typed/m2", "/abs/run"]),  # argparse's abbreviation
        (["--no-write", "--", "-odd"], ["analyze", "--out", "metrics", "--no-write", "--", "/typed/-odd"]),
    ],
)
def test_performance_comparison_reads_its_arguments_as_analyze_does(args, expected):
    command, _ = performance_comparison.analyze_command(args, Path("/typed"))
    assert command == expected


def test_every_value_option_of_analyze_is_known_to_performance_comparison():
    options = performance_comparison.analyze_options()
    limits = {o for o in options if o.startswith("--max-")}
    assert len(limits) == 4 and all(options[o] for o in limits) and options["--out"] and not options["--json"]


@pytest.mark.parametrize(
    ("args", "configs"),
    [
        ([], True),
        (["--scale", "gpu"], True),
        (["--protocol", "benchmark", "--out", "d"], True),  # bench's default, named: it records CONFIGs
        (["--protocol=benchmark"], True),
        (["--protocol", "study", "--out", "d"], False),
        (["--protocol=study-equal-work"], False),
        (["--proto", "study-both"], False),  # argparse's abbreviation
        (["--protocol", "nonsense"], False),  # bench refuses it by name, CONFIGs or not
        (["--help"], False),
    ],
)
def test_muon_vs_adam_keeps_the_study_configs_unless_the_protocol_takes_none(args, configs):
    expected = ["bench", *STUDY_CONFIGS, *args] if configs else ["bench", *args]
    assert muon_vs_adam.bench_command(args) == expected


def test_the_tools_package_names_every_tool():
    listed = ast.get_docstring(ast.parse((REPO / "tools" / "__init__.py").read_text()))
    names = [p.stem for p in (REPO / "tools").glob("*.py") if p.stem != "__init__"]
    names += [p.name for p in (REPO / "tools").glob("*.sh")]
    assert [n for n in names if n not in listed.split()] == []
