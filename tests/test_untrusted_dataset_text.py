"""A downloaded dataset's YAML, JSON and manifest are a stranger's text: an alias bomb, deep nesting, a non-path or a
size of thousands of digits is refused by name in time proportional to the file, and what we write has no alias."""

from __future__ import annotations

import time

import pytest

from muon_repro.dataset.card import CARD_NAME
from muon_repro.dataset.citation import CFF_NAME
from muon_repro.dataset.croissant import CROISSANT_NAME, check_croissant
from muon_repro.dataset.verify import check_card
from muon_repro.yaml_text import dump_yaml, load_yaml

# 9 levels of anchors, each doubling the one before: 332 bytes that safe_load expands to 2^9 leaves per use
ALIAS_BOMB = "".join(f"l{i}: &l{i} [*l{i - 1}, *l{i - 1}]\n" if i else "l0: &l0 [x, x]\n" for i in range(9))


def test_aliases_and_deep_nesting_are_refused_by_name():
    with pytest.raises(ValueError, match=r"^README.md: the YAML does not parse at line 2, column 10: an alias \(\*name\)"):
        load_yaml(ALIAS_BOMB, "README.md")
    with pytest.raises(ValueError, match=r"^CITATION.cff: the YAML is nested too deeply"):
        load_yaml("[" * 100_000, "CITATION.cff")
    with pytest.raises(ValueError, match=r"more than the 1 MiB"):
        load_yaml("a: b\n" * 300_000, "X")


def test_nesting_is_read_to_its_limit_and_refused_past_it():
    from muon_repro.yaml_text import MAX_YAML_DEPTH

    deepest = "[" * MAX_YAML_DEPTH + "]" * MAX_YAML_DEPTH
    value = load_yaml(deepest, "x")
    for _ in range(MAX_YAML_DEPTH - 1):
        (value,) = value
    assert value == []
    with pytest.raises(ValueError, match=rf"^x: the YAML is nested too deeply .*more than {MAX_YAML_DEPTH} levels"):
        load_yaml("a:\n  - " + "[" * MAX_YAML_DEPTH + "]" * MAX_YAML_DEPTH, "x")


def test_what_we_write_has_no_alias_and_reads_back():
    shared = {"path": ["metrics/runs.parquet"]}
    text = dump_yaml({"configs": [{"data_files": shared}, {"data_files": shared}]})
    assert "&" not in text and "*" not in text
    assert load_yaml(text, "x") == {"configs": [{"data_files": shared}, {"data_files": shared}]}


def test_verify_refuses_a_card_bomb_and_nested_files_in_proportion(tmp_path):
    bomb = ALIAS_BOMB + "configs:\n- config_name: runs\n  data_files: [{path: *l8}]\n"
    (tmp_path / CARD_NAME).write_text(f"---\n{bomb}---\n# card\n")
    (tmp_path / CFF_NAME).write_text("[" * 100_000)
    (tmp_path / CROISSANT_NAME).write_text("[" * 100_000)
    started = time.process_time()  # CPU seconds: a loaded machine's wall time would make the limit flake
    problems, meta = check_card(tmp_path)
    assert time.process_time() - started < 5
    assert meta is None
    said = f"{CARD_NAME} (its metadata block): the YAML does not parse at line 2, column 10: an alias (*name)"
    assert any(said in p for p in problems)
    assert any(p.startswith(f"{CFF_NAME}: the YAML is nested too deeply") for p in problems)
    assert any(p.startswith(f"{CROISSANT_NAME}: missing or not a JSON object (JSON nested deeper") for p in problems)


def test_a_data_file_that_is_no_path_is_named_not_expanded(tmp_path):
    card = "configs:\n- config_name: runs\n  data_files: [{path: [[a, b], {c: d}]}]\n"
    (tmp_path / CARD_NAME).write_text(f"---\n{card}---\n# card\n")
    problems, _ = check_card(tmp_path)
    assert f"{CARD_NAME}: config 'runs' points at <a list, not a path>, which is not in the bundle" in problems
    assert f"{CARD_NAME}: config 'runs' points at <a dict, not a path>, which is not in the bundle" in problems
    assert check_croissant(tmp_path)[0].startswith(f"{CROISSANT_NAME}: missing or not a JSON object (cannot read")


def test_a_manifest_names_the_path_listed_twice_and_refuses_a_size_of_thousands_of_digits():
    from muon_repro.dataset.manifest import parse_manifest

    line = "a" * 64 + "  1  metrics/runs.parquet\n"
    with pytest.raises(ValueError, match=r"^MANIFEST.sha256: metrics/runs.parquet is listed twice"):
        parse_manifest(line * 2)
    with pytest.raises(ValueError, match=r"^MANIFEST.sha256, line 1: expected '<sha256>  <size>  <path>'"):
        parse_manifest("a" * 64 + "  " + "9" * 5000 + "  x.txt\n")  # int() refuses past 4,300 digits, unnamed


def test_a_manifest_reads_a_size_of_twenty_digits_and_refuses_twenty_one():
    """MAX_SIZE_DIGITS = 20: sizes up to 10**20 - 1 bytes are read (a manifest may list any real file), one more digit
    is refused by line."""
    from muon_repro.dataset.manifest import parse_manifest

    (entry,) = parse_manifest("a" * 64 + "  " + "9" * 20 + "  x.txt\n")
    assert (entry.path, entry.size) == ("x.txt", 10**20 - 1)
    with pytest.raises(ValueError, match=r"^MANIFEST.sha256, line 1: expected"):
        parse_manifest("a" * 64 + "  " + "1" * 21 + "  x.txt\n")


def test_only_a_line_that_starts_with_a_hash_is_a_manifest_comment():
    """The header's coreutils recipe drops lines matching ``^#``: an indented ``#`` line is no comment there (sha256sum
    would choke on it), so verify refuses it by line rather than skipping it."""
    from muon_repro.dataset.manifest import parse_manifest

    assert parse_manifest("# a comment\n\n" + "a" * 64 + "  1  x.txt\n")[0].path == "x.txt"
    with pytest.raises(ValueError, match=r"^MANIFEST.sha256, line 2: expected '<sha256>  <size>  <path>', got '  # x'"):
        parse_manifest("# a comment\n  # x\n")


def test_a_data_file_outside_the_bundle_is_refused_even_where_a_file_lies(tmp_path):
    """The Hub resolves a config's files in the repository: one at an absolute path, or above the bundle, loads here
    and never there."""
    (tmp_path / "elsewhere.parquet").write_bytes(b"PAR1")
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    absolute = tmp_path / "elsewhere.parquet"
    card = f"configs:\n- config_name: a\n  data_files: {absolute}\n- config_name: b\n  data_files: ../elsewhere.parquet\n"
    (bundle / CARD_NAME).write_text(f"---\n{card}---\n# card\n")
    problems, _ = check_card(bundle)
    assert f"{CARD_NAME}: config 'a' points at {absolute}, which is not in the bundle" in problems
    assert f"{CARD_NAME}: config 'b' points at ../elsewhere.parquet, which is not in the bundle" in problems
