"""The original study's published traces: where each file came from, what it hashed to, its license, and
the one command that brings them into a dataset (``muon-repro study import``).

Jen Wei, "Reproducing and Validating Distributed Muon" published 18 PyTorch profiler traces of its 4-GPU
runs (Hugging Face dataset ``bird-of-paradise/muon-distributed-reproducibility``; the same files on GitHub as
``JenWei0312/muon-distributed-reproducibility``), MIT-licensed. They are filed, under the study's own file
names, in ``traces/<STUDY_PROFILE>/comparison/`` beside :data:`PROVENANCE_NAME` (source, sha256 as
published and license of every file) and :data:`LICENSE_NAME` (the MIT notice).

An import reads a folder in the Hub's or the GitHub repository's layout (``traces/comparison/*.json``,
plain or gzipped), or the Hub itself when online; checks every file's sha256 against :data:`STUDY_FILES`
(a file that differs is refused, naming it); and writes the set gzipped reproducibly (no name, no time
in the gzip header) into a staged folder that replaces the old one whole. Importing twice changes nothing.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from muon_repro import rundir
from muon_repro.hardware import profile_from_environment
from muon_repro.rundir import STUDY_PROVENANCE_FILE

STUDY_TITLE = "Reproducing and Validating Distributed Muon"
STUDY_AUTHOR = "Jen Wei"
STUDY_REPORT_TITLE = f"{STUDY_TITLE}: A Practical Verification of Communication Efficiency Claims"
STUDY_REPORT_URL = (
    "https://medium.com/@jenwei0312/reproducing-and-validating-distributed-muon-a-practical-verification-of-"
    "communication-0be4d1d9b893"
)
HUB_REPO = "bird-of-paradise/muon-distributed-reproducibility"
GITHUB_REPO = "JenWei0312/muon-distributed-reproducibility"
GITHUB_COMMIT = "c3e149aa48e631d7ebd2a0c21dd20841e17819af"
GITHUB_DATE = "2025-11-30"
LICENSE = "MIT"
GROUP = "comparison"  # the study's folder name, kept
PROVENANCE_NAME = STUDY_PROVENANCE_FILE
LICENSE_NAME = "LICENSE.original_study.txt"

# What the traces say of the machine (deviceProperties, distributedInfo) and what the study's text adds (the link).
STUDY_ENVIRONMENT = {
    "accelerator": "NVIDIA RTX A4000",
    "accelerator_count": 4,
    "accelerator_memory_bytes": 16761618432,
    "nodes": 1,
    "backend": "nccl",
    "nccl_version": "2.27.5",
    "cuda_version": "12.8",
    "interconnect": "pcie",
    "interconnect_note": "PCIe Gen4 x4 per GPU, no NVLink (the study's text; the traces carry no topology)",
}
STUDY_PROFILE = profile_from_environment(STUDY_ENVIRONMENT)
"""The study's hardware profile id, derived as for any contributed run: ``4xRTXA4000-pcie-nccl``."""

MIT_NOTICE = f"""The files in this folder are the original study's, redistributed under its license.

{STUDY_AUTHOR}, "{STUDY_TITLE}" (2025): Hugging Face dataset {HUB_REPO};
GitHub {GITHUB_REPO}, commit {GITHUB_COMMIT}. License: MIT, as the dataset card's front matter states.
The files are unchanged except for gzip compression (sha256 of each file as published: {PROVENANCE_NAME}).

MIT License

Copyright (c) 2025 {STUDY_AUTHOR}

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
"""

# sha256 of each trace as published (the uncompressed JSON), keyed by the study's file name.
STUDY_FILES: dict[str, str] = {
    "trace_adamw_FULLSTEP_async_rank0.json": "eeaccd74978f27507ad517123833eff6558174c73d22af1c657e8daf267425da",
    "trace_adamw_FULLSTEP_rank0.json": "c3f7598d2325adf098bc8a309b48849c390c2b884bc4b8443d1a065752e91a9d",
    "trace_adamw_FULLSTEP_rank1.json": "35f4a48864200040e4371e0aa1d181a3dfc90365c5a2a57903e02462929b01c7",
    "trace_adamw_FULLSTEP_rank2.json": "936ae66499bdf10e67e782bc4bada6cd2b5837c222c51305d498cb3172fd5ae3",
    "trace_adamw_FULLSTEP_rank3.json": "fa04b0b622431f67b056bcc6147381599d464937cc569cda8818f1ef924dbf5d",
    "trace_adamw_rank0.json": "6cdcfb74ac432b34c7c9b2288d07e14874dff41f88501657ab372d80794a7f57",
    "trace_adamw_rank1.json": "308d4cb1905d044e84f052a440dc81c2c4719f9fa5f27535294e735a88e4b5b7",
    "trace_adamw_rank2.json": "870325e9df7470c1ccef2fe9ca28d1b29ca596a6e6bfd57f41684ac407f91e97",
    "trace_adamw_rank3.json": "44d494cc4cbcd0f94e0e0dfa79ac6fdea15bb9286651c27caf5c1394003ae2dd",
    "trace_muon_FULLSTEP_dp2_tp2_async_rank0.json": "6f869f366a3ba7849d28680d621fbfdceefcc1fb3a04324b55c025b1feaddedd",
    "trace_muon_FULLSTEP_dp2_tp2_rank0.json": "c79bb06349c7bf2ff9a57bc4a8a6dbcc839e962b3ea72b17cd38d48568730d8e",
    "trace_muon_FULLSTEP_dp2_tp2_rank1.json": "8f83543a88a846f1b65683eca210d102301dea274f64e55fada9a00414f578d0",
    "trace_muon_FULLSTEP_dp2_tp2_rank2.json": "5d7319439c6c1a2b217414adba53eeb9125074efe37e94b0333ab06fd1a954d3",
    "trace_muon_FULLSTEP_dp2_tp2_rank3.json": "b8cf4fae61479cb0a8d2ad6e95f0f85f5ee7000ef9213ab5b425088a9cc5b225",
    "trace_muon_dp2_tp2_rank0.json": "a528e1f2d966068c2ee16ac753fb243dea3213b89e17539c1611fd40b4ab9978",
    "trace_muon_dp2_tp2_rank1.json": "d1863a12bade48b587f4a97cbe5bd866ca1a82461061d3ca8e614a4811ad7c16",
    "trace_muon_dp2_tp2_rank2.json": "4a97d4a4f9f8ebaf1e27fb1d76c5ac9fc80becf7af60e23d1a7c77d95cd70392",
    "trace_muon_dp2_tp2_rank3.json": "2babd5e1599e7d53622f14df341bba56f34a8cd55b7e9dc3117a8289767f73ba",
}
SOURCE_DIR = "traces/comparison"  # where the files lie in the study's repository (Hub and GitHub alike)
MAX_FILE_BYTES = 64 * 2**20  # the largest published trace is under 1 MB uncompressed x 10: anything bigger is not one
_NAME = re.compile(r"^trace_(?P<run>[A-Za-z0-9_]+?)_rank(?P<rank>\d+)\.json$")


def run_and_rank(file_name: str) -> tuple[str, int]:
    """The study's run name and rank from one of its file names: ``trace_adamw_rank2.json(.gz)`` -> ("adamw", 2)."""
    m = _NAME.match(file_name.removesuffix(".gz"))
    if m is None:
        raise ValueError(f"{file_name!r} is not a trace name of the original study (trace_<run>_rank<r>.json)")
    return m["run"], int(m["rank"])


# The study's protocol replayed here: its run folders' format is muon_repro.rundir's.
PROTOCOL_FIELD, PROTOCOLS, GROUPS = rundir.PROTOCOL_FIELD, rundir.STUDY_PROTOCOLS, rundir.STUDY_PROTOCOL_GROUPS
protocol_of, is_study_folder = rundir.protocol_of, rundir.is_study_folder


def study_folder(traces_root: str | Path) -> Path:
    """Where the study's traces lie in a dataset: ``<traces>/<STUDY_PROFILE>/comparison``."""
    return Path(traces_root) / STUDY_PROFILE / GROUP


@dataclass(frozen=True)
class ImportResult:
    folder: Path
    changed: bool  # False: the folder already held exactly these files
    files: tuple[str, ...]


def _published_bytes(src: Path) -> bytes:
    """The file as published (uncompressed), read within :data:`MAX_FILE_BYTES`."""
    if src.is_symlink() or not src.is_file():
        raise ValueError(f"{src}: not a regular file; point --from at a copy of the study's repository")
    opener: Callable = open
    try:
        with open(src, "rb") as fh:
            head = fh.read(2)
        opener = gzip.open if head == b"\x1f\x8b" else open
        with opener(src, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError; a cut-off download ends in EOFError
        what = "a damaged or cut-off gzip file" if opener is gzip.open else "unreadable"
        raise ValueError(f"{src}: {what} ({exc}); download it again from {HUB_REPO}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"{src}: more than {MAX_FILE_BYTES:,} bytes uncompressed; the study's traces are far smaller")
    return data


def _find_source(root: Path, name: str) -> Path | None:
    """``name`` (plain or ``.gz``) in a folder of the Hub's or GitHub's layout, or in the folder itself."""
    for folder in (root / SOURCE_DIR, root / GROUP, root):
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.exists():
                return candidate
    return None


def gzip_reproducibly(data: bytes) -> bytes:
    """``gzip -n``'s equivalent: no file name and a zero time in the header, so equal input gives equal bytes."""
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=9, mtime=0) as gz:
        gz.write(data)
    return out.getvalue()


def provenance() -> dict:
    """What :data:`PROVENANCE_NAME` holds: the study, its license, and per file its source and sha256."""
    return {
        "study": f'{STUDY_AUTHOR}, "{STUDY_TITLE}" (2025)',
        "license": LICENSE,
        "license_file": LICENSE_NAME,
        "profile": STUDY_PROFILE,
        "environment": STUDY_ENVIRONMENT,
        "sources": [
            {"kind": "huggingface_dataset", "repository": HUB_REPO},
            {"kind": "github", "repository": GITHUB_REPO, "commit": GITHUB_COMMIT, "date": GITHUB_DATE},
        ],
        "files": [
            {
                "file": f"{name}.gz",
                "source_path": f"{SOURCE_DIR}/{name}",
                "sha256_published": digest,
                "compression": "gzip, no name or time in the header (gzip -n)",
            }
            for name, digest in sorted(STUDY_FILES.items())
        ],
    }


def import_study(source: str | Path, traces_root: str | Path = "traces") -> ImportResult:
    """Bring the study's traces from the folder ``source`` (the Hub's or GitHub's layout) into
    ``<traces_root>/<profile>/comparison/``; see the module docstring. Raises ``ValueError`` naming the
    file for a missing, unreadable or damaged file (a gzip cut short), one whose sha256 is not the published one,
    or a file standing where a folder goes; nothing is written then."""
    from muon_repro.tables.files import staged_dir

    root = Path(source)
    if not root.is_dir():
        raise ValueError(f"{root}: no such folder; give a copy of {HUB_REPO} (or its GitHub twin) with --from")
    contents: dict[str, bytes] = {}
    for name, digest in sorted(STUDY_FILES.items()):
        src = _find_source(root, name)
        if src is None:
            raise ValueError(
                f"{root}: {SOURCE_DIR}/{name} (or .gz) is missing; the study published all {len(STUDY_FILES)} traces"
            )
        data = _published_bytes(src)
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise ValueError(
                f"{src}: sha256 {actual} is not the published file's {digest}; refusing a changed copy "
                f"(download it again from {HUB_REPO})"
            )
        contents[f"{name}.gz"] = gzip_reproducibly(data)
    contents[PROVENANCE_NAME] = (json.dumps(provenance(), indent=1, sort_keys=True) + "\n").encode()
    contents[LICENSE_NAME] = MIT_NOTICE.encode()
    folder = study_folder(traces_root)
    if (
        folder.is_dir()
        and sorted(os.listdir(folder)) == sorted(contents)
        and all((folder / n).read_bytes() == b for n, b in contents.items())
    ):
        return ImportResult(folder, False, tuple(sorted(contents)))
    # a file where a folder of the path goes would fail mid-swap, leaving a staged folder behind
    blocker = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise ValueError(
            f"{blocker} is a file, not a folder; the traces go into {folder}: move the file away or give another traces folder"
        )
    folder.parent.mkdir(parents=True, exist_ok=True)
    with staged_dir(folder) as stage:
        for name, data in contents.items():
            (stage / name).write_bytes(data)
    return ImportResult(folder, True, tuple(sorted(contents)))


def download_study(cache: str | Path, *, revision: str | None = None) -> Path:
    """The study's traces from the Hub into ``cache`` (needs the network); returns the folder to import."""
    from huggingface_hub import snapshot_download

    return Path(
        snapshot_download(
            HUB_REPO,
            repo_type="dataset",
            revision=revision,
            allow_patterns=[f"{SOURCE_DIR}/*.json", f"{SOURCE_DIR}/*.json.gz"],
            local_dir=str(cache),
        )
    )
