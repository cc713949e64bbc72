"""YAML in a dataset: the card's front matter and ``CITATION.cff``, written plainly and read as a stranger's.

A downloaded dataset is untrusted text. PyYAML's safe loader still expands aliases, so a few hundred bytes of
chained anchors grow into gigabytes, and it recurses once per nesting level. :func:`load_yaml` caps the size, then
reads the event stream once (libyaml's parser keeps its own stack: no recursion) refusing an alias or nesting
deeper than :data:`MAX_YAML_DEPTH` with a :class:`ValueError` naming the file, and only then builds the document,
with libyaml where PyYAML has it (5x faster than the pure-Python loader on a card). :func:`dump_yaml` never writes
an alias (a value used twice is written twice), so that what we write we can read back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MAX_YAML_BYTES = 1 << 20  # ours are under 10 KB: a card's front matter or a citation
MAX_YAML_DEPTH = 64  # nested collections; ours reach 5
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the same documents; libyaml's is C
_OPENS = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_CLOSES = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def _refuse_aliases_and_depth(text: str, source: str) -> None:
    """A ValueError naming ``source`` at the first alias (``*name``) or collection nested deeper than MAX_YAML_DEPTH
    (libyaml's errors, where the text does not parse, pass through)."""
    depth = 0
    for event in yaml.parse(text, Loader=_SAFE_LOADER):
        if isinstance(event, yaml.AliasEvent):
            why = "an alias (*name), which a dataset's YAML may not use"
            raise ValueError(f"{source}: the YAML does not parse{_where(event.start_mark)}: {why}")
        if isinstance(event, _OPENS):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise ValueError(
                    f"{source}: the YAML is nested too deeply to be a card or citation (more than {MAX_YAML_DEPTH} levels)"
                )
        elif isinstance(event, _CLOSES):
            depth -= 1


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
        _refuse_aliases_and_depth(text, source)
        return yaml.load(text, Loader=_SAFE_LOADER)  # noqa: S506 - a safe loader, on text without aliases
    except yaml.MarkedYAMLError as exc:  # one line: where, then what
        raise ValueError(f"{source}: the YAML does not parse{_where(exc.problem_mark)}: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{source}: the YAML does not parse: {' '.join(str(exc).split())}") from None


def _where(mark: Any) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


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
