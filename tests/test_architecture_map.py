"""docs/architecture.md's module map cannot drift: it is generated from the docstrings
(:mod:`muon_repro.module_map`), the committed one must be what the package says today, and every package and
module must be in it, with a docstring to put there."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from support.syntax_trees import tree_of

from muon_repro.module_map import COMMAND, markers, undocumented, with_module_map

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "muon_repro"
DOC = REPO / "docs" / "architecture.md"


def _block(text: str, name: str) -> str:
    begin, end = markers(name)
    assert begin in text and end in text, f"docs/architecture.md has lost its {name} markers: {begin!r} ... {end!r}"
    return text.partition(begin)[2].partition(end)[0]


def test_the_module_map_is_up_to_date():
    text = DOC.read_text(encoding="utf-8")
    assert text == with_module_map(text), f"docs/architecture.md's module map is out of date: run `{COMMAND}`"


def _is_package(folder: Path) -> bool:
    return (folder / "__init__.py").is_file()


def test_every_package_and_module_is_in_the_map():
    text = DOC.read_text(encoding="utf-8")
    table, lists = _block(text, "packages"), _block(text, "modules")
    top = [p for p in PACKAGE.iterdir() if (p.suffix == ".py" and p.name != "__init__.py") or (p.is_dir() and _is_package(p))]
    assert top, "no package found"
    names = [f"muon_repro.{p.name.removesuffix('.py')}" for p in top]
    missing = [name for name in names if f"| `{name}`" not in table]
    assert not missing, f"not in docs/architecture.md's module map: {missing}; run `{COMMAND}`"
    sections = {s.split("`", 1)[0]: s for s in lists.split("\n### `muon_repro.")[1:]}
    absent = []
    for init in sorted(PACKAGE.rglob("*/__init__.py")):
        folder = init.parent
        if not all(_is_package(PACKAGE / p) for p in folder.relative_to(PACKAGE).parents[:-1]):
            continue
        dotted = ".".join(folder.relative_to(PACKAGE).parts)
        section = sections.get(dotted, "")
        for child in sorted(folder.iterdir()):
            if (child.suffix == ".py" and child.name != "__init__.py") or (child.is_dir() and _is_package(child)):
                if f"\n- `{child.name.removesuffix('.py')}`" not in section:
                    absent.append(f"muon_repro.{dotted}.{child.name.removesuffix('.py')}")
    assert not absent, f"not in docs/architecture.md's module map: {absent}; run `{COMMAND}`"


def test_every_module_has_a_docstring():
    bare = [str(p.relative_to(REPO)) for p in sorted(PACKAGE.rglob("*.py")) if not (ast.get_docstring(tree_of(p)) or "").strip()]
    assert bare == [], f"modules without a docstring (the module map would have a hole): {bare}"


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "muon_repro"
    for name, source in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(source)
    return root


def test_the_map_is_made_from_the_docstrings_alone(tmp_path):
    root = _package(
        tmp_path,
        {
            "__init__.py": '"""Root."""\n',
            "tool.py": '"""A tool: ``run`` it. Then more."""\nimport torch\n',  # read, never imported
            "pkg/__init__.py": '"""The package | pipe.\n\nNot this paragraph."""\n',
            "pkg/mod.py": '"""Uses :class:`~muon_repro.pkg.mod.Thing`, e.g. a thing. More."""\n',
            "pkg/templates/x.py": "",  # a folder that is no package: not in the map
        },
    )
    doc = "head\n" + "\n".join(markers("packages")) + "\nmiddle\n" + "\n".join(markers("modules")) + "\ntail\n"
    made = with_module_map(doc, root)
    assert "| `muon_repro.pkg` (1 module) | The package \\| pipe. |" in made
    assert "| `muon_repro.tool` | A tool: `run` it. |" in made
    assert "### `muon_repro.pkg`\n\n- `mod`: Uses `Thing`, e.g. a thing." in made
    assert made.startswith("head\n") and "\nmiddle\n" in made and made.endswith("\ntail\n")
    assert "templates" not in made and "Not this paragraph" not in made
    assert with_module_map(made, root) == made  # regenerating changes nothing


def test_the_map_refuses_a_module_without_a_docstring_or_its_markers(tmp_path):
    root = _package(tmp_path, {"__init__.py": '"""Root."""\n', "bare.py": "x = 1\n"})
    doc = "\n".join((*markers("packages"), *markers("modules")))
    assert undocumented(root) == ["muon_repro.bare (muon_repro/bare.py)"]
    with pytest.raises(ValueError, match="no docstring.*muon_repro.bare"):
        with_module_map(doc, root)
    (root / "bare.py").write_text('"""Documented."""\n')
    with pytest.raises(ValueError, match="module map's modules"):
        with_module_map("\n".join(markers("packages")), root)
