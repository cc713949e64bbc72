"""Python sources parsed once per test process: the static checks (import walls, declared levels, module docstrings,
the constants of the explanations' writers) each read every module of the package, and parsing them all takes ~1 s."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


def tree_of(path: Path) -> ast.Module:
    """The syntax tree of the file at ``path``, as it reads now (a changed file is parsed again)."""
    return parsed(Path(path).read_text(encoding="utf-8"))


def nodes_of(path: Path) -> tuple[ast.AST, ...]:
    """Every node of the file at ``path``, in :func:`ast.walk`'s order."""
    return _walked(Path(path).read_text(encoding="utf-8"))


@functools.cache
def parsed(source: str) -> ast.Module:
    """``source`` parsed, once per process for each text (read-only: every caller shares the tree)."""
    return ast.parse(source)


@functools.cache
def _walked(source: str) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(parsed(source)))
