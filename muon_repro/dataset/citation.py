"""How to cite a bundle: ``CITATION.cff`` (Citation File Format 1.2.0) and a BibTeX entry.

One citation: :class:`~muon_repro.dataset.meta.BundleMeta` is what ``CITATION.cff`` is written
from (and what :func:`read_citation` reads back), and :func:`bibtex` is the only renderer of the
dataset's BibTeX entry: the card, croissant.json's ``citeAs``, the report's "How to cite" and the
entry ``muon-repro publish`` prints all call it, so they carry the same bytes.

The entry follows the Hub's "Cite this dataset": the revision goes in the title,
``title = {NAME (Revision <rev>)}``, with ``publisher = {Hugging Face}``. The card cannot name
the commit it will be part of, so it cites the version tag; ``muon-repro publish`` prints the
entry again with the short id of the commit it tagged (the title's revision and the link's, nothing else).
"""

from __future__ import annotations

import re
from pathlib import Path

from muon_repro import __version__
from muon_repro.dataset.meta import (
    ABSTRACT,
    DEFAULT_LICENSE,
    DEFAULT_PRETTY_NAME,
    PAPER,
    BundleMeta,
    dataset_date,
    project_authors,
    release_date,
    resolve_authors,
)
from muon_repro.dataset.naming import DEFAULT_REPO_ID, HUB_URL, dataset_url
from muon_repro.study.sources import (
    GITHUB_COMMIT,
    GITHUB_REPO,
    HUB_REPO,
    STUDY_AUTHOR,
    STUDY_REPORT_TITLE,
    STUDY_REPORT_URL,
    STUDY_TITLE,
)
from muon_repro.study.sources import LICENSE as STUDY_LICENSE
from muon_repro.yaml_text import dump_yaml, read_yaml

CFF_NAME = "CITATION.cff"
SHORT_SHA = 7  # as the Hub shows a commit in its citation


def citation_cff(meta: BundleMeta) -> str:
    """The bundle's CITATION.cff (valid for ``cffconvert --validate``)."""
    doc = {
        "cff-version": "1.2.0",
        "message": "If you use this dataset, please cite it as below.",
        "type": "dataset",
        "title": meta.pretty_name,
        "version": meta.version,
        "date-released": meta.date,
        "license": meta.license,
        # Entities (`name:`), not persons: a team name has no given/family split, and names stay as written.
        "authors": [{"name": a} for a in meta.authors],
        "repository-artifact": meta.url,
        "url": dataset_url(meta.repo_id, meta.tag),
        "abstract": ABSTRACT,
        "keywords": ["muon", "optimizer", "distributed training", "tensor parallelism", "ZeRO", "profiler traces"],
        "references": [
            {
                "type": "article",
                "title": PAPER["title"],
                "authors": [{"given-names": given, "family-names": family} for given, family in PAPER["authors"]],
                "year": PAPER["year"],
                "identifiers": [{"type": "other", "value": f"arXiv:{PAPER['arxiv']}"}],
                "url": f"https://arxiv.org/abs/{PAPER['arxiv']}",
            },
            {  # the original study's report, whose claims the claims table judges
                "type": "report",
                "title": STUDY_REPORT_TITLE,
                "authors": [_person(STUDY_AUTHOR)],
                "year": 2025,
                "url": STUDY_REPORT_URL,
            },
            {  # the original study: its 18 traces ship in this dataset (MIT), under traces/<its profile>/comparison/
                "type": "data",
                "title": f"{STUDY_TITLE} (dataset {HUB_REPO}; its traces are redistributed here under its MIT license)",
                "authors": [_person(STUDY_AUTHOR)],
                "year": 2025,
                "license": STUDY_LICENSE,
                "url": f"{HUB_URL}/datasets/{HUB_REPO}",
                "repository-code": f"https://github.com/{GITHUB_REPO}",
                "commit": GITHUB_COMMIT,
            },
        ],
    }
    if meta.code_url:
        doc["repository-code"] = meta.code_url
    header = "# Citation metadata for this dataset (https://citation-file-format.github.io).\n"
    return header + dump_yaml(doc)


def _person(name: str) -> dict[str, str]:
    """A CFF person from "Given Family"."""
    given, family = name.split(" ", 1)
    return {"given-names": given, "family-names": family}


def _tex(text: str) -> str:
    return re.sub(r"([&%$#_{}])", r"\\\1", text)


def bibtex(meta: BundleMeta, commit: str | None = None, *, endpoint: str = HUB_URL) -> str:
    """The dataset's BibTeX ``@misc`` entry, rendered from the metadata CITATION.cff is written from: the one
    renderer (card, croissant.json's ``citeAs``, report, publish). Revision ``commit[:7]`` if given (publish,
    after tagging), else the version tag; the link on ``endpoint`` (the public Hub unless told: a commit on
    another Hub exists only there). With and without ``commit``, the same fields in the same order."""
    key = re.sub(r"[^A-Za-z0-9]+", "_", meta.repo_id.split("/")[-1]).strip("_") + f"_{meta.version.replace('.', '_')}"
    authors = " and ".join("{" + _tex(a) + "}" for a in meta.authors)  # braces: a team name is not "Last, First"
    revision = commit[:SHORT_SHA] if commit else meta.tag
    fields = [
        ("title", "{" + _tex(f"{meta.pretty_name} (Revision {revision})") + "}"),
        ("author", authors),
        ("year", meta.date[:4]),
        ("version", meta.version),
        ("publisher", "Hugging Face"),
        ("howpublished", f"\\url{{{dataset_url(meta.repo_id, commit or meta.tag, endpoint=endpoint)}}}"),
    ]
    body = ",\n".join(f"  {name} = {{{value}}}" for name, value in fields)
    return f"@misc{{{key},\n{body}\n}}"


def report_meta(
    metrics: str | Path,
    *,
    repo_id: str = DEFAULT_REPO_ID,
    version: str = __version__,
    date: str | None = None,
    authors: tuple[str, ...] | None = None,
    pretty_name: str = DEFAULT_PRETTY_NAME,
    license: str = DEFAULT_LICENSE,
    code_url: str | None = None,
) -> BundleMeta:
    """What the report cites for the tables in ``metrics``: by default what ``muon-repro run``'s card cites (the
    project's repository, this version, the day of the newest run, :func:`resolve_authors`)."""
    return BundleMeta(
        repo_id=repo_id,
        version=version,
        date=date or dataset_date(metrics),
        authors=resolve_authors(authors, repo_id=repo_id),
        pretty_name=pretty_name,
        license=license,
        code_url=code_url,
    )


def report_arguments(meta: BundleMeta, metrics: str | Path) -> list[str]:
    """The flags (of ``muon-repro report``, and ``run``) that cite ``meta`` again on any machine: those
    :func:`report_meta` would not give by default; the authors unless they are the checked-in list and the
    repository the project's (for another, :func:`resolve_authors` would ask the machine's git)."""
    args = []
    if meta.repo_id != DEFAULT_REPO_ID:
        args += ["--repo-id", meta.repo_id]
    if meta.version != __version__:
        args += ["--version", meta.version]
    if meta.date != release_date(metrics):
        args += ["--date", meta.date]
    if meta.pretty_name != DEFAULT_PRETTY_NAME:
        args += ["--pretty-name", meta.pretty_name]
    if meta.authors != project_authors() or meta.repo_id != DEFAULT_REPO_ID:  # another repository's default: git's
        for author in meta.authors:
            args += ["--author", author]
    return args


def rebuild_arguments(meta: BundleMeta, metrics: str | Path) -> list[str]:
    """The flags of ``muon-repro run`` that rebuild a dataset as ``meta`` (the regeneration recipe's, for a dataset
    that is not the project's): :func:`report_arguments`, and the license and code link the card and CITATION.cff
    carry beside the citation."""
    args = report_arguments(meta, metrics)
    if meta.license != DEFAULT_LICENSE:
        args += ["--license", meta.license]
    if meta.code_url:
        args += ["--code-url", meta.code_url]
    return args


def read_citation(path: str | Path) -> BundleMeta:
    """The metadata a bundle's CITATION.cff was written from (ValueError naming the file and field otherwise)."""
    path = Path(path)
    try:
        cff = read_yaml(path)
    except ValueError as exc:  # names the file
        raise ValueError(f"{exc}; rebuild the bundle with `muon-repro bundle`") from None
    if not isinstance(cff, dict):
        raise ValueError(f"{path}: not a Citation File Format document")
    prefix = f"{HUB_URL}/datasets/"
    artifact = str(cff.get("repository-artifact", ""))
    if not artifact.startswith(prefix):
        raise ValueError(f"{path}: repository-artifact {artifact!r} is not a dataset on {HUB_URL}")
    try:
        return BundleMeta(
            repo_id=artifact[len(prefix) :],
            version=str(cff["version"]),
            date=str(cff["date-released"]),
            license=str(cff["license"]),
            authors=tuple(str(a["name"]) for a in cff["authors"]),
            pretty_name=str(cff["title"]),
            code_url=cff.get("repository-code"),
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path}: missing or malformed field {exc}") from exc
    except ValueError as exc:  # BundleMeta's own checks name the field
        raise ValueError(f"{path}: {exc}") from exc


def paper_bibtex() -> str:
    """The paper's BibTeX entry, every author "Family, Given" (the same list as CITATION.cff's reference)."""
    authors = " and ".join(f"{family}, {given}" for given, family in PAPER["authors"])
    return (
        "@article{liu2025muon,\n"
        f"  title = {{{PAPER['title']}}},\n"
        f"  author = {{{authors}}},\n"
        f"  journal = {{arXiv preprint arXiv:{PAPER['arxiv']}}},\n"
        f"  year = {{{PAPER['year']}}}\n"
        "}"
    )


def study_bibtex() -> str:
    """The original study's two BibTeX entries: its report and its dataset (CITATION.cff's references)."""
    given, family = STUDY_AUTHOR.split(" ", 1)
    return (
        "@misc{wei2025reproducing,\n"
        f"  title = {{{STUDY_REPORT_TITLE}}},\n"
        f"  author = {{{family}, {given}}},\n"
        "  year = {2025},\n"
        f"  howpublished = {{\\url{{{STUDY_REPORT_URL}}}}}\n"
        "}\n"
        "@misc{wei2025muondata,\n"
        f"  title = {{{STUDY_TITLE} (dataset)}},\n"
        f"  author = {{{family}, {given}}},\n"
        "  year = {2025},\n"
        "  publisher = {Hugging Face},\n"
        f"  howpublished = {{\\url{{{HUB_URL}/datasets/{HUB_REPO}}}}}\n"
        "}"
    )
