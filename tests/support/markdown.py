"""Reading rendered Markdown in tests: the report's and the card's sections by heading."""

from __future__ import annotations


def markdown_section(md: str, heading: str) -> str:
    """The text under the level-2 heading ``## heading``, up to the next level-2 heading."""
    return md.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
