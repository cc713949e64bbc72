"""The dataset card (the bundle's ``README.md``): YAML metadata for the Hub, then the sections a reader needs.

The metadata is built as data and dumped with PyYAML (quoting is its job, not the template's);
the prose is ``templates/dataset_card.md.j2`` rendered with ``StrictUndefined``, so a missing
value is an error rather than an empty string.

A table without rows (``comparisons`` after a run of one configuration) is documented but is
not a config: ``datasets`` cannot build a split from a Parquet file without rows ("BatchSize
must be greater than 0", or with no row group "Instruction 'train' corresponds to no data"), so
``load_dataset`` and ``verify`` would fail on it. The card says so and shows how to read it.
"""

from __future__ import annotations

import ast
import functools
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from muon_repro.dataset.citation import CFF_NAME, bibtex, paper_bibtex, rebuild_arguments, study_bibtex
from muon_repro.dataset.croissant import CROISSANT_NAME
from muon_repro.dataset.manifest import MANIFEST_NAME, FileEntry
from muon_repro.dataset.meta import (
    DEFAULT_LICENSE,
    DEFAULT_PRETTY_NAME,
    TAGS,
    TASK_CATEGORIES,
    BundleMeta,
    project_authors,
)
from muon_repro.dataset.run_info import MAX_LISTED_VALUES, describe_run_groups, describe_runs, is_trace, recorded_environment
from muon_repro.dataset.tables_doc import TableDoc, configs_yaml, dataset_info_yaml, describe_tables, size_category
from muon_repro.recipe import recipe_text
from muon_repro.report.escape import block_text, code_fence, inline_code, markdown_text, one_line, shell_word
from muon_repro.tables.files import human_size
from muon_repro.yaml_text import dump_yaml, load_yaml

if TYPE_CHECKING:
    from jinja2 import Template

CARD_NAME = "README.md"
METHOD_DOC = "docs/method.md"  # every table column with its meaning; the card links each table to its section
TEMPLATE = "dataset_card.md.j2"
FOLDERS = {
    "traces": "PyTorch profiler traces (Kineto JSON, gzipped), one per rank, in "
    "`traces/<profile>/<group>/<name>/trial<k>/` with the run's `config.json`, `environment.json`, "
    "`metrics.json`, `log.txt`; a `convergence.json` per run of `muon-repro converge`; `<profile>`: the hardware",
    "metrics": "the tables below, as Parquet (the dataset's configs) and CSV",
    "figures": "the report's figures (PNG and SVG)",
    "report": "the report (Markdown and PDF)",
    "analysis_scripts": "entry scripts over the `muon_repro` package",  # then what each does (script_summaries)
    "docs": "`method.md`: the formulas, attribution conventions and every table column, as the report cites them",
    "muon_repro": "the package that made every file here, as it was (a download rebuilds itself: How to regenerate)",
    "tests": "the package's tests (`python -m pytest -n 2`, then `-m slow`)",
    "tools": "scripts beside the package: the GPU session, benchmarks, fuzzers",
    "pyproject.toml": "how the package installs (`pip install -c constraints.txt -e .`)",
    "constraints.txt": "the pinned versions every artifact here was made with",
}
"""The bundle's folders (and code files), each with what it holds, in the order the card's files table lists them."""
CONSTRAINTS = "constraints.txt"  # the pins (torch's among them), bundled with the code
# Other people's profiler traces the tests read (MIT, their notices beside them): the README gives their sources.
TEST_TRACES_README = "tests/data/external/README.md"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # torch's CPU wheels: PyPI's Linux wheel is the CUDA build


@dataclass(frozen=True)
class FolderDoc:
    path: str
    files: int
    size: str
    description: str


def _metrics_folder(files: Mapping[str, Path]) -> Path:
    """Where the bundle's tables are read from (the newest run's day is the default release date)."""
    runs = files.get("metrics/runs.parquet")
    return Path(runs).parent if runs is not None else Path("metrics")


def bundle_command(meta: BundleMeta, out: str | None = None) -> str:
    """The ``muon-repro bundle`` line that reproduces these metadata (defaults left out)."""
    args = ["muon-repro", "bundle", "--repo-id", meta.repo_id, "--version", meta.version, "--date", meta.date]
    if meta.license != DEFAULT_LICENSE:
        args += ["--license", meta.license]
    if meta.authors != project_authors():  # what a machine without --author gives for the project's repository
        for author in meta.authors:
            args += ["--author", author]
    if meta.pretty_name != DEFAULT_PRETTY_NAME:
        args += ["--pretty-name", meta.pretty_name]
    if meta.code_url:
        args += ["--code-url", meta.code_url]
    if out:
        args += ["--out", out]
    return shlex.join(args)


def described(text: object) -> str:
    """A table's or column's description (our schemas', or the Parquet metadata the analysis wrote) in a cell or
    a paragraph of its own: one line, ``&``, ``<``, ``>`` as entities, ``|`` escaped; its code spans stay."""
    out = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
    return " ".join(out.split())


def first_sentence(text: str) -> str:
    """The first sentence of ``text`` (up to a period followed by a space and a capital), with its period."""
    m = re.search(r"\.\s+(?=[A-Z(`])", text)
    return text[: m.start() + 1] if m else text


def card_filters() -> dict[str, Callable[..., str]]:
    """The template's filters. Run text (environment values, run ids, commands, commits) is data: each filter
    writes it for its place in the Markdown (muon_repro.report.escape), so none of it reads as markup."""
    return {
        "described": described,
        "first_sentence": first_sentence,  # a table's description: the rest is in docs/method.md
        "md": markdown_text,  # text wholly a run's, in a cell or a sentence
        "code": inline_code,
        "cell_code": lambda text: inline_code(text, in_table=True),
        "command": one_line,  # a recorded command: one line in the regeneration block
        "shell_word": shell_word,
        "block": block_text,
        "fence": code_fence,
    }


def loadable_tables(tables: list[TableDoc]) -> list[TableDoc]:
    """The tables that become configs: those with rows; the default moves to the first of them if its table is empty."""
    loadable = [t for t in tables if t.rows > 0]
    if loadable and not any(t.default for t in loadable):
        loadable[0] = replace(loadable[0], default=True)
    return loadable


def card_metadata(meta: BundleMeta, tables: list[TableDoc]) -> dict[str, Any]:
    """The card's YAML: ``configs`` and ``dataset_info`` for the tables with rows only (see the module's note)."""
    rows = max((t.rows for t in tables), default=0)
    configs = loadable_tables(tables)
    return {
        "license": meta.hub_license,
        "pretty_name": meta.pretty_name,
        "tags": TAGS,
        "task_categories": list(TASK_CATEGORIES),
        "size_categories": [size_category(rows)],
        "configs": configs_yaml(configs),
        "dataset_info": dataset_info_yaml(configs),
    }


def _with_config_default(tables: list[TableDoc]) -> list[TableDoc]:
    """Every table, with ``default`` as the card's configs have it (an empty table is no config, so no default)."""
    default = next((t.name for t in loadable_tables(tables) if t.default), None)
    return [replace(t, default=t.name == default) for t in tables]


def study_claims(files: Mapping[str, Path]) -> list[dict[str, str]]:
    """The claims table's rows on the original study's own runs (its profile's), in the report's words."""
    import pandas as pd

    from muon_repro.report.claims_section import claim_measured
    from muon_repro.study.sources import STUDY_PROFILE
    from muon_repro.tables.io import read_table

    path = files.get("metrics/claims.parquet")
    if path is None:
        return []
    claims = read_table(path, "claims", check_set=False)
    if "profile" not in claims.columns or "study_method_value" not in claims.columns:
        return []
    rows = []
    for _, c in claims[claims["profile"] == STUDY_PROFILE].iterrows():
        value, rebuilt = c["study_method_value"], c["study_method_rebuilt"]
        method = "–"
        if pd.notna(value):
            method = f"{100 * float(value):.2f}%" if str(c["unit"]).startswith("fraction") else f"{float(value):.3f}×"
            method += " (rebuilt)" if bool(rebuilt) else " (not rebuilt)"
        rows.append({"claim": str(c["claim"]), "method": method, "measured": claim_measured(c), "verdict": str(c["verdict"])})
    return rows


@dataclass(frozen=True)
class StudyNotice:
    """Where the original study's traces lie in a bundle, with its license notice and its provenance file (None when
    the bundle lacks it), each a path from the bundle's root."""

    folder: str
    license: str
    provenance: str | None


def study_notice(sizes: Mapping[str, int]) -> StudyNotice | None:
    """The original study's traces in this bundle, where its sources put them (None when it has none)."""
    from muon_repro.study.sources import GROUP, LICENSE_NAME, PROVENANCE_NAME, STUDY_PROFILE

    folder = f"traces/{STUDY_PROFILE}/{GROUP}"
    license_path, provenance = f"{folder}/{LICENSE_NAME}", f"{folder}/{PROVENANCE_NAME}"
    if license_path not in sizes:
        return None
    return StudyNotice(folder, license_path, provenance if provenance in sizes else None)


def file_link(path: str) -> str:
    """A Markdown link to a file of the bundle, shown as its path from the bundle's root (where the Hub resolves it)."""
    return f"[{inline_code(path)}]({quote(path, safe='/')})"


def pinned_version(constraints: Path | None, package: str) -> str | None:
    """The version ``constraints`` (a pip constraints file) pins ``package`` to with ``==``; None without one."""
    if constraints is None:
        return None
    try:
        lines = Path(constraints).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    wanted = re.sub(r"[-_.]+", "-", package).lower()
    for line in lines:
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;#]+)", line.split("#", 1)[0])
        if m and re.sub(r"[-_.]+", "-", m[1]).lower() == wanted:
            return m[2]
    return None


def cpu_torch_command(files: Mapping[str, Path]) -> str:
    """The line that installs torch's CPU build at the version the bundle's constraints pin (unpinned without them)."""
    version = pinned_version(files.get(CONSTRAINTS), "torch")
    return shlex.join(
        ["python", "-m", "pip", "install", f"torch=={version}" if version else "torch", "--index-url", TORCH_CPU_INDEX]
    )


def script_summaries(files: Mapping[str, Path]) -> list[tuple[str, str]]:
    """(name, what it does) of each script directly in ``analysis_scripts/``: its docstring's first line, without the
    period; a script without one (or that does not parse) is left out."""
    out = []
    for path in sorted(p for p in files if re.fullmatch(r"analysis_scripts/[^/]+\.py", p)):
        try:
            doc = ast.get_docstring(ast.parse(Path(files[path]).read_text(encoding="utf-8")))
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        line = doc.strip().splitlines()[0].strip().rstrip(".") if doc and doc.strip() else ""
        if line:
            out.append((PurePosixPath(path).name, line[0].lower() + line[1:] if line[1:2].islower() else line))
    return out


def folder_description(name: str, files: Mapping[str, Path]) -> str:
    """The files table's cell for ``name``: :data:`FOLDERS`' words, and for the scripts what each one does."""
    if name != "analysis_scripts":
        return FOLDERS[name]
    scripts = "; ".join(f"{inline_code(script, in_table=True)}: {described(what)}" for script, what in script_summaries(files))
    return f"{FOLDERS[name]}. {scripts}" if scripts else FOLDERS[name]


def report_findings(files: Mapping[str, Path]) -> tuple[str, list[str]]:
    """The report's abstract and limitations, from the bundle's tables, so that the card says what was found in the
    report's own words and numbers; empty when the bundle's tables are not the set the report reads (a bundle of
    tables without a claims table, say)."""
    from muon_repro.report.abstract_section import abstract
    from muon_repro.report.caveats_section import limitations
    from muon_repro.report.data import OPTIONAL, TABLES, load

    if any(f"metrics/{name}.parquet" not in files for name in TABLES if name not in OPTIONAL):
        return "", []
    everything = load(Path(files["metrics/runs.parquet"]).parent)
    view = everything.of_profile(everything.profiles[0])
    return abstract(view), limitations(view, everything)


def trace_index_example(files: Mapping[str, Path]) -> dict[str, str] | None:
    """A run to show the ``trace_files`` config with (one of ours, else the study's); None without an index."""
    from muon_repro.analysis.trace_files import READ_BY_ANALYSIS
    from muon_repro.tables.io import read_table

    path = files.get("metrics/trace_files.parquet")
    if path is None:
        return None
    index = read_table(path, "trace_files", check_set=False)
    if index.empty:
        return None
    ours = index[index["read_by"] == READ_BY_ANALYSIS]
    return {"run": str((ours if len(ours) else index)["run"].iloc[0])}


def render_card(meta: BundleMeta, files: Mapping[str, Path], digests: list[FileEntry]) -> str:
    """The card for a bundle whose files are ``files`` (bundle path -> readable file) with ``digests``.

    ``digests`` covers every file of the bundle but the card and the manifest (CITATION.cff
    included); ``files`` must hold at least the tables and the runs' JSON files.
    """
    from muon_repro.dataset.bundle import DEFAULT_OUT  # bundle imports this module

    sizes = {d.path: d.size for d in digests}
    tables = describe_tables(files)
    if not tables:
        raise ValueError("no metrics/<table>.parquet in the bundle: the card needs at least the runs table")
    runs = describe_runs(files, sizes)
    environment = recorded_environment(files, runs)
    folders = []
    for name in FOLDERS:
        inside = [d for d in digests if d.path.startswith(name + "/")]
        shown = name + "/"
        if not inside:  # a file at the root (pyproject.toml), or nothing of that name
            inside, shown = [d for d in digests if d.path == name], name
        if inside:
            folders.append(
                FolderDoc(shown, len(inside), human_size(sum(d.size for d in inside)), folder_description(name, files))
            )
    traces = [p for p in sorted(sizes) if is_trace(p)]
    findings, limits = report_findings(files)
    context = {
        "study_claims": study_claims(files),
        "findings": findings,
        "limitations": limits,
        "study_notice": study_notice(sizes),
        "test_traces": TEST_TRACES_README if TEST_TRACES_README in sizes else None,
        "meta": meta,
        "metadata_yaml": dump_yaml(card_metadata(meta, tables)),
        "repo": meta.repo_id,
        "tag": meta.tag,
        "local_dir": f"{PurePosixPath(meta.repo_id).name}-{meta.tag}",
        "tables": _with_config_default(tables),
        "configs": loadable_tables(tables),
        "left_out": [t for t in tables if t.rows == 0],
        "runs": runs,
        "run_groups": describe_run_groups(runs),
        "traces": traces,
        "example_trace": traces[0] if traces else None,
        "trace_index": trace_index_example(files),
        "folders": folders,
        "env_rows": environment.rows,
        "env_blocks": environment.blocks,
        "env_counts": environment.counts,
        "max_listed_values": MAX_LISTED_VALUES,
        "run_commands": environment.commands,
        "git_shas": environment.git_shas,
        "without_commit": environment.without_commit,
        "recipe": recipe_text(rebuild_arguments(meta, _metrics_folder(files))),
        "cpu_torch": cpu_torch_command(files),
        "rebuilt_bundle": DEFAULT_OUT.as_posix(),
        "bundle_size": human_size(sum(sizes.values())),  # every file but the card and the manifest: what a rebuild copies
        "bundle_command": bundle_command(meta),
        "manifest_files": len(digests) + 1,  # the manifest lists these and the card
        "method_doc": METHOD_DOC if METHOD_DOC in sizes else None,
        "human_size": human_size,
        "bibtex": bibtex(meta),
        "paper_bibtex": paper_bibtex(),
        "study_bibtex": study_bibtex(),
        "checked_in_authors": meta.authors == project_authors(),
        "cff_name": CFF_NAME,
        "croissant_name": CROISSANT_NAME,
        "manifest_name": MANIFEST_NAME,
        "file_link": file_link,
    }
    return _card_template().render(**context)


@functools.cache
def _card_template() -> Template:
    """The card's template, compiled once per process (compiling it is most of a small card's time)."""
    from jinja2 import Environment, PackageLoader, StrictUndefined

    env = Environment(
        loader=PackageLoader("muon_repro.dataset", "templates"),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,  # Markdown, not HTML
    )
    env.filters.update(card_filters())
    return env.get_template(TEMPLATE)


def read_card_metadata(text: str, source: str = CARD_NAME) -> dict[str, Any]:
    """The YAML front matter of a card, as a dict (ValueError if missing or malformed)."""
    if not text.startswith("---\n"):
        raise ValueError(f"{source}: no YAML metadata block (the card must start with '---')")
    end = text.find("\n---\n", 4)
    if end < 0:
        raise ValueError(f"{source}: the YAML metadata block is not closed by a '---' line")
    meta = load_yaml(text[4:end], f"{source} (its metadata block)")
    if not isinstance(meta, dict):
        raise ValueError(f"{source}: the YAML metadata is not a mapping")
    return meta
