"""What a bundle's documents promise is in it: every relative link of the card (``README.md``) and the report names a
file of the bundle, and the code that rebuilds the dataset is there. The docs are the repository's, written for the
reference dataset (docs/gpu.md shows its H200 figure): a bundle of other runs ships them as they are, so their links
are not held to its files.

A bundle drawn from an empty ``--figures`` folder, or without its code, was written and passed ``verify``: its report
linked 34 figures that were not there, its card told a reader to ``pip install`` a package it did not hold.
:func:`link_problems` and :func:`code_problems` name each such gap; ``bundle`` refuses to write a bundle that has
one, ``verify`` (:func:`check_promises`) fails one.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

from muon_repro.dataset.card import CARD_NAME

REPORT_MD = "report/report.md"
# What `pip install -c constraints.txt -e .` and `muon-repro run` in a download need; the card's "How to regenerate"
# tells every reader to run them there.
REBUILD_FILES = ("muon_repro/__init__.py", "muon_repro/cli.py", "pyproject.toml", "constraints.txt")

# [text](target) and ![alt](target), a title after the target allowed; <img src="..."> and <a href="..."> in HTML.
_MARKDOWN_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HTML_LINK = re.compile(r"""\b(?:src|href)\s*=\s*["']([^"']+)["']""")
_FENCE = re.compile(r"^(```|~~~)")
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def relative_links(text: str) -> list[str]:
    """The targets of ``text``'s links that name a file beside it (no scheme, no bare ``#anchor``), each once, in order,
    their ``#anchor`` and ``?query`` cut and their %-escapes decoded; links inside code (fenced or spans) are not links."""
    found: dict[str, None] = {}
    in_fence = False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        line = _CODE_SPAN.sub("", line)
        for match in (*_MARKDOWN_LINK.finditer(line), *_HTML_LINK.finditer(line)):
            parts = urlsplit(match.group(1))
            if parts.scheme or parts.netloc or not parts.path:
                continue
            found[unquote(parts.path)] = None
    return list(found)


def _documents(root: Path) -> list[str]:
    """The documents written for this bundle that a reader follows links from: the card and the report."""
    return [name for name in (CARD_NAME, REPORT_MD) if (root / name).is_file()]


def link_problems(root: Path) -> list[str]:
    """One line per relative link of the card or the report whose target is not in ``root`` (a file, or a folder
    holding files), naming the document and the target."""
    root = Path(root)
    problems = []
    for name in _documents(root):
        text = (root / name).read_text(encoding="utf-8", errors="replace")
        missing = []
        for target in relative_links(text):
            # joined as text, not resolved: a Hub cache snapshot's files are links to blobs elsewhere
            rel = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
            path = root / rel
            if rel == ".." or rel.startswith("../") or posixpath.isabs(rel):
                missing.append(f"{target} (outside the dataset)")
            elif not (path.is_file() or (path.is_dir() and any(p.is_file() for p in path.rglob("*")))):
                missing.append(target)
        if missing:
            shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
            problems.append(f"{name}: {len(missing)} link(s) to what the dataset does not hold: {shown}")
    return problems


def code_problems(root: Path) -> list[str]:
    """One line naming the files of :data:`REBUILD_FILES` that ``root`` lacks, if any: the card's recipe needs them."""
    missing = [name for name in REBUILD_FILES if not (Path(root) / name).is_file()]
    if not missing:
        return []
    return [
        f"no {', '.join(missing)}: the card's 'How to regenerate' installs and runs the package from the dataset's own "
        "folder, and cannot without it"
    ]


def check_promises(root: Path, report: Callable[[str, bool], None]) -> None:
    """``verify``'s two checks: :func:`link_problems` and :func:`code_problems`, a line for each problem, else one
    line saying what passed."""
    checks = [(code_problems, "code: the package, pyproject.toml and constraints.txt the card's recipe installs are here")]
    if _documents(root):  # with no card or report there is no link to check (the card's absence is said apart)
        links = "links: every relative link of the card and the report names a file of the dataset"
        checks.insert(0, (link_problems, links))
    for check, passed in checks:
        problems = check(root)
        for problem in problems:
            report(problem, False)
        if not problems:
            report(passed, True)
