"""The module map of docs/architecture.md, generated from the docstrings so that it cannot drift.

Two blocks, each between its :func:`markers`: ``packages``, one table row per package and top-level
module of ``muon_repro`` (a package's first docstring paragraph, a module's first sentence), and
``modules``, every module of each package with the first sentence of its docstring. Regenerated with
``python -m muon_repro.module_map [docs/architecture.md]``; ``--check`` only says whether the file is
up to date. The package is read with :mod:`ast`, never imported (no torch, nothing heavy), and a
module without a docstring is refused: the map would have a hole.
"""

from __future__ import annotations

import argparse
import ast
import re
from dataclasses import dataclass
from pathlib import Path

from muon_repro.tables.files import with_block, write_atomic

PACKAGE = Path(__file__).resolve().parent
COMMAND = "python -m muon_repro.module_map docs/architecture.md"
BLOCKS = ("packages", "modules")


def markers(name: str) -> tuple[str, str]:
    """The begin and end lines of block ``name``."""
    return (
        f"<!-- module map ({name}): generated from the docstrings by `{COMMAND}` -->",
        f"<!-- module map ({name}): end -->",
    )


@dataclass(frozen=True)
class Entry:
    """One package (its ``__init__.py``) or module, and its docstring as written (``""`` when it has none)."""

    name: str  # dotted: muon_repro.analysis, muon_repro.analysis.reader
    path: Path
    doc: str
    is_package: bool


def docstring(path: Path) -> str:
    """The docstring of the module at ``path``, read with :mod:`ast` (``""`` when it has none)."""
    return ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))) or ""


def entries(package: Path = PACKAGE) -> list[Entry]:
    """Every package under ``package`` (itself included) and every module, sorted by dotted name."""
    found = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        if any(not (package.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(1, len(parts))):
            continue  # in a folder that is no package (templates, data)
        is_package = parts[-1] == "__init__"
        name = ".".join((package.name, *(parts[:-1] if is_package else parts)))
        found.append(Entry(name, path, docstring(path), is_package))
    return sorted(found, key=lambda e: e.name)


def undocumented(package: Path = PACKAGE, found: list[Entry] | None = None) -> list[str]:
    """The packages and modules under ``package`` (or of its ``found`` entries) that have no docstring."""
    found = entries(package) if found is None else found
    return [f"{e.name} ({e.path.relative_to(package.parent).as_posix()})" for e in found if not e.doc.strip()]


_ROLE = re.compile(r":[a-z]+:`(~?)([^`<]*?)(?:\s*<[^`>]*>)?`")  # :class:`~a.b.C` -> `C`, :mod:`a.b` -> `a.b`


def _role(match: re.Match) -> str:
    target = match.group(2).strip()
    return f"`{target.rsplit('.', 1)[-1] if match.group(1) else target}`"


def markdown(text: str) -> str:
    """Docstring text (reST) as one line of Markdown: ``code`` and :role:`target` become `code`."""
    text = _ROLE.sub(_role, text)
    return " ".join(text.replace("``", "`").split())


def first_paragraph(doc: str) -> str:
    """The first paragraph of a docstring, as one line of Markdown."""
    return markdown(doc.strip().split("\n\n", 1)[0])


_SENTENCE_END = re.compile(r"[.!?](?=\s+[A-Z`(\"'])")
_ABBREVIATIONS = ("e.g.", "i.e.", "vs.", "etc.", "cf.")


def first_sentence(doc: str) -> str:
    """The first sentence of a docstring (of its first paragraph), as one line of Markdown."""
    paragraph = first_paragraph(doc)
    for match in _SENTENCE_END.finditer(paragraph):
        head = paragraph[: match.end()]
        if head.count("`") % 2 == 0 and not head.endswith(_ABBREVIATIONS):
            return head
    return paragraph


def cell(text: str) -> str:
    """Text for one cell of a Markdown table: a ``|`` would end the cell."""
    return text.replace("|", "\\|")


def _children(pkg: Entry, found: list[Entry]) -> list[Entry]:
    """The modules and subpackages directly in package ``pkg``."""
    depth = pkg.name.count(".") + 1
    return [e for e in found if e.name.startswith(pkg.name + ".") and e.name.count(".") == depth]


def packages_block(found: list[Entry]) -> str:
    """The ``packages`` block: a table of every subpackage and top-level module of the root package."""
    root = min(found, key=lambda e: e.name.count("."))
    lines = ["| module | what it holds |", "|---|---|"]
    for e in _children(root, found):
        if e.is_package:
            count = sum(1 for m in _children(e, found) if not m.is_package)
            lines.append(f"| `{e.name}` ({count} module{'' if count == 1 else 's'}) | {cell(first_paragraph(e.doc))} |")
        else:
            lines.append(f"| `{e.name}` | {cell(first_sentence(e.doc))} |")
    return "\n".join(lines)


def modules_block(found: list[Entry]) -> str:
    """The ``modules`` block: under a heading per package below the root, each of its modules and its first sentence."""
    lines: list[str] = []
    for pkg in (e for e in found if e.is_package and "." in e.name):
        lines += ["", f"### `{pkg.name}`", ""]
        for e in _children(pkg, found):
            kind = " (package)" if e.is_package else ""
            lines.append(f"- `{e.name.rsplit('.', 1)[-1]}`{kind}: {first_sentence(e.doc)}")
    return "\n".join(lines).strip("\n")


def with_module_map(text: str, package: Path = PACKAGE) -> str:
    """``text`` (docs/architecture.md) with the lines between each block's markers replaced by the block."""
    found = entries(package)
    missing = undocumented(package, found)
    if missing:
        raise ValueError(f"no docstring, so no line in the module map: {', '.join(missing)}")
    made = {"packages": packages_block(found), "modules": modules_block(found)}
    for name in BLOCKS:
        text = with_block(text, *markers(name), f"\n\n{made[name]}\n\n", f"the module map's {name}")
    return text


def main(argv: list[str] | None = None) -> int:
    """``python -m muon_repro.module_map [DOC] [--check]``: regenerate DOC's module map (default docs/architecture.md)."""
    parser = argparse.ArgumentParser(prog="python -m muon_repro.module_map", description=__doc__.splitlines()[0])
    parser.add_argument("doc", nargs="?", default=Path("docs/architecture.md"), type=Path, help="default: docs/architecture.md")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if DOC's module map is out of date")
    args = parser.parse_args(argv)
    text = args.doc.read_text(encoding="utf-8")
    try:
        new = with_module_map(text)
    except ValueError as exc:
        parser.exit(2, f"{parser.prog}: {exc}\n")
    if args.check:
        if new != text:
            print(f"{args.doc}'s module map is out of date: run `{COMMAND}`")
            return 1
        print(f"{args.doc}'s module map is up to date")
        return 0
    if new != text:
        write_atomic(args.doc, new)
    print(f"{'updated' if new != text else 'already up to date:'} the module map in {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
