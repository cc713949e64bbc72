"""The table reference as Markdown, from the schemas: the dataset card's column tables and the part
of docs/method.md after :data:`DOC_MARKER`, regenerated with
``python -m muon_repro.tables.reference [docs/method.md]``."""

from __future__ import annotations

from pathlib import Path

from muon_repro.tables.files import write_atomic
from muon_repro.tables.schemas import SCHEMAS


def schema_markdown() -> str:
    """The schemas as Markdown (for the dataset card and docs)."""
    lines = []
    for s in SCHEMAS.values():
        key = ", ".join(f"`{k}`" for k in s.key)
        lines += [
            f"### `{s.name}`",
            "",
            s.description,
            "",
            f"Key: {key}.",
            "",
            "| column | type | unit | meaning |",
            "|---|---|---|---|",
        ]
        lines += [f"| `{c.name}` | {c.dtype} | {c.unit} | {c.description} |" for c in s.columns]
        lines.append("")
    return "\n".join(lines)


DOC_MARKER = "<!-- tables: generated below -->"


def doc_with_tables(doc: str) -> str:
    """``doc`` (docs/method.md) with everything after :data:`DOC_MARKER` replaced by the table reference."""
    head, marker, _ = doc.partition(DOC_MARKER)
    if not marker:
        raise ValueError(f"the document has no line {DOC_MARKER!r} to put the table reference after")
    return (
        f"{head}{DOC_MARKER}\n\n## Tables\n\nEvery table under `metrics/`, its key and its "
        f"columns.\n\n{schema_markdown().rstrip()}\n"
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m muon_repro.tables.reference [DOC]``: regenerate the table reference of DOC (default docs/method.md)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m muon_repro.tables.reference",
        description=f"Rewrite the table reference of DOC: everything after its line {DOC_MARKER!r}, from the schemas.",
    )
    parser.add_argument("doc", nargs="?", default=Path("docs/method.md"), type=Path, help="default: docs/method.md")
    doc = parser.parse_args(argv).doc
    if not doc.is_file():
        parser.error(f"{doc} is not a file: give the document to rewrite (docs/method.md)")
    try:
        text = doc_with_tables(doc.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        parser.error(f"{doc}: {e}")
    write_atomic(doc, text)
    print(f"updated the table reference in {doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
