"""Run text is data, not markup: a hostile command or environment reaches the card, the report and
croissant.json without changing their structure.

A contributed config.json's ``command`` and environment.json's fields pass review as any text; the
analysis copies them into the tables. Each document is rendered twice, from benign and from hostile
text, and its structure (code fences, headings, table rows and their cells, list items) must be the
same; the hostile text shows only escaped: no raw ``<script>``, no ANSI escape byte, the newline of
a command written ``\\n``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fake_figures import tiny_png
from hub_support import DATE, make_sources
from report_bundle import tables

from muon_repro.report import figures, profile_figures, regime_figures
from muon_repro.report.build import write_report
from muon_repro.tables.io import write_tables

ESC = "\x1b"
HOSTILE_COMMAND = (
    f"muon-repro bench evil\n```\n# Injected heading\n<script>alert(1)</script>\n| a | b |\n{ESC}[2J{ESC}]0;pwned\a ~~~\n- item"
)
HOSTILE_ENV = {  # environment keys the card and the report show
    "host_cpu": f"Evil CPU\n# Heading\n```\n<script>alert(2)</script> | x | y |{ESC}[31m",
    "os": "Linux ![pixel](https://evil.example/p.png) [click](javascript:alert(3)) &amp; <b>bold</b> *em* _u_",
    "python": "3.11\n\n- injected item\n> quote",
    "interconnect_topology": f"GPU0\tX\n```\n# Not a heading\n{ESC}[4m</pre><script>alert(4)</script>",
}
BENIGN_TOPOLOGY = "GPU0\tX\nGPU1\tNV4\nGPU2\tNV4\nGPU3\tNV4"  # as many lines as the hostile one (no legend: cut)
HOSTILE_SHA = "abc; rm -rf ~ `whoami`"


def _blocks_and_text(markdown: str) -> tuple[list[list[str]], list[str]]:
    """The fenced code blocks (their content lines) and the lines outside them, as CommonMark reads fences: a
    block closes at a fence of its character at least as long as the one that opened it; fails if one never closes."""
    blocks: list[list[str]] = []
    outside: list[str] = []
    opened: tuple[str, int] | None = None
    for line in markdown.splitlines():
        fence = re.match(r" {0,3}(`{3,}|~{3,})(.*)$", line)
        if opened is None and fence:
            opened = (fence.group(1)[0], len(fence.group(1)))
            blocks.append([])
        elif opened is None:
            outside.append(line)
        elif fence and fence.group(1)[0] == opened[0] and len(fence.group(1)) >= opened[1] and not fence.group(2).strip():
            opened = None
        else:
            blocks[-1].append(line)
    assert opened is None, "a code block is never closed"
    return blocks, outside


def _structure(markdown: str) -> dict[str, object]:
    """What a renderer reads as structure: code blocks and their lines; outside them headings, list items,
    quotes, table rows with their cells."""
    blocks, outside = _blocks_and_text(markdown)
    rows = [line for line in outside if line.startswith("|")]
    return {
        "block_lines": [len(b) for b in blocks],
        "headings": [line for line in outside if re.match(r" {0,3}#{1,6}( |$)", line)],
        "list_items": sum(bool(re.match(r" {0,3}([-+*]|\d{1,9}[.)]) ", line)) for line in outside),
        "quotes": sum(bool(re.match(r" {0,3}>", line)) for line in outside),
        "table_rows": len(rows),
        "cells": [len(re.findall(r"(?<!\\)\|", row)) for row in rows],  # unescaped pipes: the cell borders
    }


def _assert_escaped(markdown: str) -> None:
    """Outside code blocks (whose content a renderer shows as it is) no tag, link or image; nowhere a control byte."""
    _, outside = _blocks_and_text(markdown)
    text = "\n".join(outside)
    assert "<script" not in text and "<b>" not in text and "<img" not in text and "</pre>" not in text
    assert not re.search(r"(?<!\\)\]\((https://evil|javascript:)", text)  # no link, no image: each ']' escaped
    assert "&lt;script" in text  # the hostile text is there, escaped
    assert ESC not in markdown and "\a" not in markdown  # control characters as visible escapes


# ------------------------------------------------------------------------------------------ the report


def _report(root: Path, command: str, env: dict[str, str]) -> tuple[str, str]:
    """report.md and report.html from the synthetic tables with every run's command and environment replaced."""
    tabs = tables()
    tabs["runs"] = tabs["runs"].assign(command=command)
    environment = tabs["environment"].copy()
    for key, value in env.items():
        if key in set(environment["key"]):
            environment.loc[environment["key"] == key, "value"] = value
        else:
            extra = environment[environment["key"] == "os"].assign(key=key, value=value)
            environment = pd.concat([environment, extra], ignore_index=True)
    tabs["environment"] = environment
    write_tables(tabs, root / "metrics")
    fig_dir = root / "figures"
    fig_dir.mkdir()
    for name in (*figures.FIGURES, *regime_figures.REGIME_FIGURES, *profile_figures.PROFILE_FIGURES):
        (fig_dir / f"{name}.png").write_bytes(tiny_png(name))  # the report links the figures; their pixels do not matter
        (fig_dir / f"{name}.svg").write_text("")
    out = root / "report"
    write_report(root / "metrics", fig_dir, out, ("md", "html"), citation=["@misc{x,\n  title = {x}\n}"])
    return (out / "report.md").read_text(), (out / "report.html").read_text()


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, tuple[str, str]]:
    benign_env = {"host_cpu": "Test CPU", "os": "Linux-test", "python": "3.11.7", "interconnect_topology": BENIGN_TOPOLOGY}
    return {
        "benign": _report(tmp_path_factory.mktemp("benign"), "muon-repro bench reference --scale tiny", benign_env),
        "hostile": _report(tmp_path_factory.mktemp("hostile"), HOSTILE_COMMAND, HOSTILE_ENV),
    }


def test_hostile_run_text_leaves_the_report_markdown_structure_unchanged(reports):
    benign, hostile = reports["benign"][0], reports["hostile"][0]
    assert _structure(hostile) == _structure(benign)
    _assert_escaped(hostile)
    # The command: one line of the bash block, its newline visible, inside a fence it cannot close.
    lines = hostile.splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith("muon-repro bench evil")]
    assert lines[at].startswith("muon-repro bench evil\\n```\\n# Injected heading\\n")
    assert next(line for line in reversed(lines[:at]) if line.startswith("```")) == "````bash"  # a fence it cannot close


def test_hostile_run_text_is_escaped_in_the_report_html(reports):
    html = reports["hostile"][1]
    assert "<script>" not in html and "<b>bold</b>" not in html and "</pre><script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;script&gt;alert(2)" in html
    assert ESC not in html
    assert html.count("<pre>") == reports["benign"][1].count("<pre>")
    assert html.count("<h2") == reports["benign"][1].count("<h2") and html.count("<tr") == reports["benign"][1].count("<tr")


# ----------------------------------------------------------------------------- the card and croissant


def _write(metrics: Path, name: str, columns: dict[str, pa.Array]) -> None:
    pq.write_table(pa.table(columns), metrics / f"{name}.parquet")


def _documents(root: Path, command: str, env: dict[str, str], sha: str) -> tuple[str, dict]:
    """The card and croissant.json of a small artifact whose tables hold ``command``, ``env`` and commit ``sha``."""
    from muon_repro.dataset.bundle import Sources, documents_from_sources
    from muon_repro.dataset.meta import BundleMeta

    src = make_sources(root)
    ids = {"run": "comparison/muon_dp2_tp1", "group": "comparison", "name": "muon_dp2_tp1"}
    runs = pq.read_table(src["metrics"] / "runs.parquet").to_pydict()
    runs["command"] = [command]
    _write(src["metrics"], "runs", {k: pa.array(v) for k, v in runs.items()})
    values = {"host_memory_bytes": "25769803776", "git_sha": sha, "hostname": "private", **env}
    _write(
        src["metrics"],
        "environment",
        {
            **{k: pa.array([v] * len(values), pa.string()) for k, v in ids.items()},
            "trial": pa.array([0] * len(values), pa.int64()),
            "key": pa.array(list(values), pa.string()),
            "value": pa.array(list(values.values()), pa.string()),
        },
    )
    meta = BundleMeta(repo_id="test-org/muon-traces", version="1.0.0", date=DATE, code_url="https://example.org/muon_repro")
    docs = documents_from_sources(Sources(**src, code=None), meta)
    return docs.card, json.loads(docs.root_files["croissant.json"])


@pytest.fixture(scope="module")
def cards(tmp_path_factory) -> dict[str, tuple[str, dict]]:
    benign_env = {"host_cpu": "Test CPU", "os": "Linux-test", "python": "3.11.7", "interconnect_topology": BENIGN_TOPOLOGY}
    return {
        "benign": _documents(tmp_path_factory.mktemp("card_benign"), "muon-repro bench comparison", benign_env, "0" * 40),
        "hostile": _documents(tmp_path_factory.mktemp("card_hostile"), HOSTILE_COMMAND, HOSTILE_ENV, HOSTILE_SHA),
    }


def test_hostile_run_text_leaves_the_card_structure_unchanged(cards):
    benign, hostile = cards["benign"][0], cards["hostile"][0]
    assert _structure(hostile) == _structure(benign)
    _assert_escaped(hostile)
    escaped_cpu = "Evil CPU # Heading \\`\\`\\` &lt;script&gt;alert(2)&lt;/script&gt; \\| x \\| y \\|\\x1b\\[31m"
    assert f"| host_cpu | {escaped_cpu} |" in hostile
    (line,) = [line for line in hostile.splitlines() if line.startswith("muon-repro bench evil")]
    assert "\\n```\\n# Injected heading\\n" in line  # the whole command on its line of the regeneration block
    # The commit: quoted for the shell in the clone line, a code span of its own in the prose.
    assert "git checkout 'abc; rm -rf ~ `whoami`'" in hostile and "`` abc; rm -rf ~ `whoami` ``" in hostile


def test_croissant_carries_no_run_text_and_stays_json(cards):
    for benign_or_hostile, (_, doc) in cards.items():
        text = json.dumps(doc)
        assert "Evil CPU" not in text and "muon-repro bench evil" not in text, benign_or_hostile

    def without_digests(doc: dict) -> dict:  # the tables' bytes differ, so do their sha256 and size
        files = [{k: v for k, v in d.items() if k not in ("sha256", "contentSize")} for d in doc["distribution"]]
        return {**doc, "distribution": files}

    assert without_digests(cards["hostile"][1]) == without_digests(cards["benign"][1])  # run text changes nothing


# ------------------------------------------------------------------------------------ the escapes alone


def test_the_escapes_leave_ordinary_text_as_it_is():
    from muon_repro.report.escape import inline_code, markdown_cell, markdown_inline, markdown_text, one_line

    for text in ("cpu-2c-gloo/comparison/muon_dp2_tp2", "Linux-6.1-x86_64-with-glibc2.36", "2.13.0+cpu", "Test CPU @ 2.0GHz"):
        assert markdown_text(text) == markdown_inline(text) == markdown_cell(text) == one_line(text) == text
    assert inline_code("muon-repro bench reference") == "`muon-repro bench reference`"
    # The report's own cells keep their brackets, tildes, arrows and signs.
    for cell in ("[0.5, 0.5] (inside)", "50.9k–>134M", "-19%", "~1.1% (~2x computational efficiency)"):
        assert markdown_cell(cell) == cell


def test_the_escapes_neutralize_each_kind_of_markup():
    from muon_repro.report.escape import code_fence, inline_code, markdown_cell, markdown_inline, markdown_text

    assert code_fence("a ``` b `````") == "``````" and code_fence("plain") == "```"
    assert inline_code("a`b") == "``a`b``" and inline_code("`x") == "`` `x ``"
    assert markdown_inline("# h") == "\\# h" and markdown_inline("1. x") == "1\\. x" and markdown_inline("```x") == "\\```x"
    assert markdown_inline("<img src=x>") == "&lt;img src=x>" and markdown_inline("&amp;") == "&amp;amp;"
    assert markdown_inline("![p](u) [l](u)") == "![p\\](u) [l\\](u)"
    assert markdown_cell("a\\|b|c") == "a\\\\\\|b\\|c"  # a backslash cannot un-escape the cell's pipe
    assert markdown_text("_em_ *b* `c` [l](u) x86_64 <i>") == "\\_em\\_ \\*b\\* \\`c\\` \\[l\\](u) x86_64 &lt;i&gt;"
    assert markdown_text("a\nb\x1b[0m") == "a b\\x1b\\[0m"


def test_the_html_of_a_sentence_shows_its_code_spans_as_code_and_escapes_the_rest():
    from markupsafe import Markup

    from muon_repro.report.escape import html_inline

    assert html_inline("run `muon-repro converge` (then `muon-repro analyze`)") == (
        "run <code>muon-repro converge</code> (then <code>muon-repro analyze</code>)"
    )
    assert html_inline("`<script>` & <b>x</b>") == "<code>&lt;script&gt;</code> &amp; &lt;b&gt;x&lt;/b&gt;"
    assert html_inline("`` a`b ``, one ` alone") == "<code>a`b</code>, one ` alone"  # CommonMark: padding stripped
    assert html_inline(f"a{ESC}[31m") == "a\\x1b[31m" and html_inline("cpu-2c-gloo/x_y *z*") == "cpu-2c-gloo/x_y *z*"
    assert html_inline(Markup("<strong>ours</strong>")) == "<strong>ours</strong>"  # a macro's own HTML, as it is


def test_every_kind_of_control_character_shows_as_an_escape_on_one_line():
    from muon_repro.report.escape import one_line

    assert one_line("a\u202eb") == "a\\u202eb"  # a bidi override (Cf) would reorder what follows it
    assert one_line("a\u2028b\u2029c") == "a\\u2028b\\u2029c"  # line and paragraph separators break a line
    assert one_line("a\x7f") == "a\\x7f"  # DEL is no printable ASCII
    assert one_line("a\r\n\tb") == "a\\r\\n\\tb"


def test_a_code_block_keeps_its_newlines_and_tabs_and_shows_its_other_controls():
    from muon_repro.report.escape import block_text

    assert block_text("GPU0\tX\nGPU1\tNV4") == "GPU0\tX\nGPU1\tNV4"
    assert block_text("GPU0\tX\n\x1b[4mGPU1") == "GPU0\tX\n\\x1b[4mGPU1"


def test_a_code_span_is_padded_only_around_text_it_would_lose_and_escapes_a_cells_pipe():
    from muon_repro.report.escape import inline_code

    assert inline_code(" x") == "`  x `" and inline_code("x ") == "` x  `"  # a renderer strips one space each side
    assert inline_code(" ") == "` `"  # only spaces: a renderer keeps them
    assert inline_code("") == inline_code("", in_table=True) == ""  # no span: "``" would show as it is
    assert inline_code("a|b", in_table=True) == "`a\\|b`" and inline_code("a|b") == "`a|b`"


def test_a_shell_word_is_one_quoted_line():
    from muon_repro.report.escape import shell_word

    assert shell_word("0123abcd") == "0123abcd" and shell_word("https://example.org/x") == "https://example.org/x"
    assert shell_word("a b\nrm -rf ~") == "'a b\\nrm -rf ~'"


def test_a_sentence_starts_no_block_of_any_kind_where_it_begins_a_line():
    from muon_repro.report.escape import markdown_cell, markdown_inline

    assert markdown_inline("1) x") == "1\\) x" and markdown_inline("> quote") == "\\> quote"
    assert markdown_inline("~~~x") == "\\~~~x" and markdown_inline("___") == "\\___" and markdown_inline("* * *") == "\\* * *"
    # in a cell, or where the sentence does not begin a line, the same text is left as it is
    assert markdown_inline("# h", line_start=False) == "# h" and markdown_cell("> q") == "> q"


def test_a_sentence_opens_no_link_comment_or_entity_and_no_backslash_eats_what_follows():
    from muon_repro.report.escape import markdown_cell, markdown_inline

    assert markdown_cell("[a][b]") == "[a\\][b]"  # a reference link
    assert markdown_inline("x <!-- c --> <?p?>") == "x &lt;!-- c --> &lt;?p?>"
    assert markdown_inline("&#65; &#x41; &copy;") == "&amp;#65; &amp;#x41; &amp;copy;"
    assert markdown_inline("ends in \\") == "ends in \\\\"  # last: it would escape the document's next character
    assert markdown_inline("a\\b") == "a\\b"  # before a letter a backslash escapes nothing


def test_text_wholly_a_runs_escapes_every_markdown_special_on_one_trimmed_line():
    from muon_repro.report.escape import markdown_text

    assert markdown_text("~x~ a\\b") == "\\~x\\~ a\\\\b"
    assert markdown_text("R&D") == "R&amp;D"
    assert markdown_text("  host\n") == "host"
