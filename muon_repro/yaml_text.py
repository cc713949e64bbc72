"""YAML in a dataset: the card's front matter and ``CITATION.cff``, written plainly and read as a stranger's.

A downloaded dataset is untrusted text. PyYAML's safe loader still expands aliases, so a few hundred bytes of
chained anchors grow into gigabytes, and it recurses once per nesting level. :func:`load_yaml` refuses aliases,
caps the size, and turns deep nesting into a :class:`ValueError` naming the file; :func:`dump_yaml` never writes
an alias (a value used twice is written twice), so that what we write we can read back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MAX_YAML_BYTES = 1 << 20  # ours are under 10 KB: a card's front matter or a citation


class _NoAliasLoader(yaml.SafeLoader):
    """The safe loader, refusing anchors' aliases (``*name``) where they occur."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "an alias (*name), which a dataset's YAML may not use", mark)
        return super().compose_node(parent, index)


class _NoAliasDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def load_yaml(text: str, source: str) -> Any:
    """``text`` parsed as YAML without aliases; ValueError naming ``source`` and why otherwise (too large, not
    YAML, an alias, nested too deeply)."""
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_YAML_BYTES:
        raise ValueError(f"{source}: {size:,} bytes of YAML, more than the {MAX_YAML_BYTES >> 20} MiB a card or citation may be")
    try:
        return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader that also refuses aliases
    except yaml.MarkedYAMLError as exc:  # one line: where, then what
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ValueError(f"{source}: the YAML does not parse{where}: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{source}: the YAML does not parse: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise ValueError(f"{source}: the YAML is nested too deeply to be a card or citation") from None


def read_yaml(path: str | Path, source: str | None = None) -> Any:
    """The YAML file at ``path`` as :func:`load_yaml` reads it; a ValueError naming ``source`` (default: the path)
    for a file that cannot be read or is not UTF-8 too."""
    source = source or str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{source}: not UTF-8 text ({exc})") from None
    except OSError as exc:
        raise ValueError(f"{source}: unreadable ({exc})") from None
    return load_yaml(text, source)


def dump_yaml(doc: Any) -> str:
    """``doc`` as block YAML, keys in order, Unicode kept, no alias."""
    return yaml.dump(doc, Dumper=_NoAliasDumper, sort_keys=False, allow_unicode=True, width=1000)
