"""How to cite a bundle: ``CITATION.cff`` (Citation File Format 1.2.0) and a BibTeX entry."""

from __future__ import annotations

import re

import yaml

from muon_repro.hub.meta import PAPER, BundleMeta
from muon_repro.hub.naming import dataset_url

CFF_NAME = "CITATION.cff"


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
        "abstract": (
            "PyTorch profiler traces, metrics tables, figures and a report comparing distributed Muon with "
            "distributed AdamW (ZeRO-1 over data parallel, Megatron-style tensor parallel)."
        ),
        "keywords": ["muon", "optimizer", "distributed training", "tensor parallelism", "ZeRO", "profiler traces"],
        "references": [
            {
                "type": "article",
                "title": PAPER["title"],
                "authors": [{"name": "Moonshot AI"}],
                "year": PAPER["year"],
                "identifiers": [{"type": "other", "value": f"arXiv:{PAPER['arxiv']}"}],
                "url": f"https://arxiv.org/abs/{PAPER['arxiv']}",
            }
        ],
    }
    if meta.code_url:
        doc["repository-code"] = meta.code_url
    header = "# Citation metadata for this dataset (https://citation-file-format.github.io).\n"
    return header + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1000)


def _tex(text: str) -> str:
    return re.sub(r"([&%$#_{}])", r"\\\1", text)


def bibtex(meta: BundleMeta) -> str:
    """A BibTeX ``@misc`` entry for this version of the dataset."""
    key = re.sub(r"[^A-Za-z0-9]+", "_", meta.repo_id.split("/")[-1]).strip("_") + f"_{meta.version.replace('.', '_')}"
    authors = " and ".join("{" + _tex(a) + "}" for a in meta.authors)  # braces: a team name is not "Last, First"
    fields = [
        ("title", "{" + _tex(meta.pretty_name) + "}"),
        ("author", authors),
        ("year", meta.date[:4]),
        ("version", meta.version),
        ("publisher", "Hugging Face"),
        ("howpublished", f"\\url{{{dataset_url(meta.repo_id, meta.tag)}}}"),
        ("note", f"Dataset, revision {meta.tag}"),
    ]
    body = ",\n".join(f"  {name} = {{{value}}}" for name, value in fields)
    return f"@misc{{{key},\n{body}\n}}"


def paper_bibtex() -> str:
    return (
        "@article{liu2025muon,\n"
        f"  title = {{{PAPER['title']}}},\n"
        f"  author = {{{PAPER['authors']}}},\n"
        f"  journal = {{arXiv preprint arXiv:{PAPER['arxiv']}}},\n"
        f"  year = {{{PAPER['year']}}}\n"
        "}"
    )
