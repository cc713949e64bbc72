"""Shared pieces of the hub tests: a small synthetic bundle source tree, and a fake Hub environment.

Nothing here talks to the real Hugging Face Hub: every client is pointed at a
:class:`support.fake_hub.FakeHub` on 127.0.0.1 (subprocesses through ``HF_ENDPOINT``,
in-process clients through ``HfApi(endpoint=...)``).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.fake_hub import FakeHub

DATA = Path(__file__).parent / "data" / "external"  # a real trace (HTA's, MIT: see its README)
TRACE = DATA / "hta_cpu_gloo_rank34.json.gz"
REPO_ROOT = Path(__file__).resolve().parents[1]
TOKEN = "hf_fake_token_for_tests_0123456789"  # any non-empty token is accepted by the fake Hub
DATE = "2025-06-01"


def _png(width: int = 4, height: int = 3) -> bytes:
    """A tiny valid RGB PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\0" + bytes([200, 80, 40]) * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def _write_table(folder: Path, name: str, columns: dict[str, pa.Array]) -> None:
    table = pa.table(columns)
    pq.write_table(table, folder / f"{name}.parquet")
    table.to_pandas().to_csv(folder / f"{name}.csv", index=False)


def make_sources(root: Path, *, step_ms: float = 12.5, recorded: bool = True) -> dict[str, Path]:
    """A small artifact tree like the repository's (traces, metrics, figures, report, scripts, docs); returns the folders.
    ``recorded``: the tables hold what the run recorded (its command, its environment), as analyze writes them."""
    run = root / "traces" / "comparison" / "muon_dp2_tp1"
    run.mkdir(parents=True)
    for rank in (0, 1):
        shutil.copyfile(TRACE, run / f"rank{rank}.json.gz")
    command = ["muon-repro", "bench", "comparison", "--scale", "cpu"]
    (run / "config.json").write_text(
        json.dumps(
            {
                "group": "comparison",
                "name": "muon_dp2_tp1",
                "optimizer": "muon",
                "dp": 2,
                "tp": 1,
                "command": command,
            }
        )
    )
    environment = {
        "hostname": "secret-host",
        "os": "Linux-6.1-x86_64",
        "python": "3.11.7",
        "torch": "2.13.0",
        "cuda": None,
        "nccl": None,
        "backend": "gloo",
        "host_cpu": "Test CPU @ 2.0GHz",
        "host_cpu_cores": 2,
        "host_memory_bytes": 25769803776,
        "accelerator": None,
        "accelerator_count": 0,
        "git_sha": "0" * 40,
        "git_dirty": False,
        "pip_freeze": ["torch==2.13.0", "numpy==2.4.6"],
    }
    (run / "environment.json").write_text(json.dumps(environment))
    (run / "metrics.json").write_text(json.dumps({"config": "comparison/muon_dp2_tp1", "ranks": []}))
    (run / "log.txt").write_text("step 0 loss 4.2\n")

    metrics = root / "metrics"
    metrics.mkdir()
    _write_table(
        metrics,
        "runs",
        {
            "run": pa.array(["comparison/muon_dp2_tp1"]),
            "group": pa.array(["comparison"]),
            "name": pa.array(["muon_dp2_tp1"]),
            "optimizer": pa.array(["muon"]),
            "dp": pa.array([2], pa.int64()),
            "tp": pa.array([1], pa.int64()),
            "step_ms": pa.array([step_ms]),
            "command": pa.array([shlex.join(command) if recorded else None], pa.string()),
        },
    )
    # what analyze puts in the environment table: environment.json flattened, one row per known value, as text
    recorded = (
        {k: ", ".join(v) if isinstance(v, list) else str(v) for k, v in environment.items() if v is not None} if recorded else {}
    )
    _write_table(
        metrics,
        "environment",
        {
            "run": pa.array(["comparison/muon_dp2_tp1"] * len(recorded), pa.string()),
            "group": pa.array(["comparison"] * len(recorded), pa.string()),
            "name": pa.array(["muon_dp2_tp1"] * len(recorded), pa.string()),
            "trial": pa.array([0] * len(recorded), pa.int64()),
            "key": pa.array(list(recorded), pa.string()),
            "value": pa.array(list(recorded.values()), pa.string()),
        },
    )
    _write_table(
        metrics,
        "steps",
        {
            "run": pa.array(["comparison/muon_dp2_tp1"] * 2),
            "rank": pa.array([0, 1], pa.int64()),
            "step": pa.array([3, 3], pa.int64()),
            "step_ms": pa.array([step_ms, step_ms + 0.5]),
        },
    )
    _write_table(
        metrics,
        "collectives",
        {
            "run": pa.array(["comparison/muon_dp2_tp1"]),
            "op": pa.array(["all_gather"]),
            "bytes": pa.array([4096], pa.int64()),
            "ms": pa.array([0.25]),
        },
    )
    _write_table(
        metrics,
        "comparisons",
        {
            "muon_run": pa.array(["comparison/muon_dp2_tp1"]),
            "adamw_run": pa.array([None], pa.string()),
            "comm_time_ratio": pa.array([None], pa.float64()),
        },
    )
    _write_table(
        metrics,
        "claims",
        {
            "claim": pa.array(["muon comm time is 0.57x adamw"]),
            "verdict": pa.array(["not measured"]),
            "holds": pa.array([None], pa.bool_()),
        },
    )

    figures = root / "figures"
    figures.mkdir()
    (figures / "comm_time.png").write_bytes(_png())
    (figures / "comm_time.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" width="4" height="3"/>\n')
    report = root / "report"
    report.mkdir()
    (report / "report.md").write_text(f"# Report\n\nMuon step: {step_ms} ms.\n")
    (report / "report.pdf").write_bytes(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n")
    scripts = root / "analysis_scripts"
    scripts.mkdir()
    (scripts / "muon_vs_adam.py").write_text("from muon_repro.cli import main\n\nmain(['analyze'])\n")
    docs = root / "docs"
    docs.mkdir()
    (docs / "method.md").write_text("# Method\n\n## Communication model\n")
    return {name: root / name for name in ("traces", "metrics", "figures", "report", "analysis_scripts", "docs")}


def source_args(sources: dict[str, Path]) -> list[str]:
    return [arg for name, path in sources.items() for arg in ("--" + name.replace("_", "-"), str(path))]


def hub_env(tmp_path: Path, endpoint: str, *, token: str | None = TOKEN) -> dict[str, str]:
    """The environment for a client subprocess: the fake Hub, private caches, no offline mode, no Xet."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    home = tmp_path / "hf_home"
    env.update(
        HF_ENDPOINT=endpoint,
        HF_HUB_DISABLE_XET="1",
        HF_HOME=str(home),
        HF_DATASETS_CACHE=str(home / "datasets"),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    if token is not None:
        env["HF_TOKEN"] = token
    return env


def run(args: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=False, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def hf_command() -> str:
    """The ``hf`` CLI of this environment (beside the interpreter, else on PATH)."""
    beside = Path(sys.executable).with_name("hf")
    found = str(beside) if beside.exists() else shutil.which("hf")
    assert found, "the hf command (huggingface_hub's CLI) is not installed"
    return found


def muon_repro(args: list[str], env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "muon_repro", *args], env, cwd)


# ---------------------------------------------------------------------- fixtures (import them into a test module)


@pytest.fixture
def fake_hub():
    with FakeHub() as hub:
        yield hub


@pytest.fixture
def hub_api(fake_hub, monkeypatch):
    """An ``HfApi`` on the fake Hub, in this process; huggingface_hub's import-time settings patched to match."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.utils import _detect_agent

    # Any request that forgets its endpoint lands on the fake Hub too, never on the real one.
    monkeypatch.setattr(constants, "ENDPOINT", fake_hub.url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", fake_hub.url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)  # Xet uploads would bypass the fake Hub
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    # Building request headers fetches an "agent harness" registry from the Hub once: skip it.
    monkeypatch.setattr(_detect_agent, "_registry", _detect_agent._EMPTY_REGISTRY)
    return HfApi(endpoint=fake_hub.url, token=TOKEN)


@pytest.fixture
def sources(tmp_path) -> dict[str, Path]:
    return make_sources(tmp_path / "src")


def stub_code(root: Path) -> Path:
    """A folder of the files a bundle's code must hold (muon_repro.dataset.links.REBUILD_FILES), nearly empty: for
    bundles whose code is not what a test checks (the repository's own, ~450 files, takes a second to copy and hash,
    and as long again to verify and to upload to the fake Hub)."""
    from muon_repro.dataset.links import REBUILD_FILES

    for name in REBUILD_FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("# stub\n")
    return root


@functools.cache
def shared_stub_code() -> Path:
    """One :func:`stub_code` folder for this process, read-only, removed at exit."""
    root = Path(tempfile.mkdtemp(prefix="muon_repro_stub_code_"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return stub_code(root)


STUB = Path("<stub>")  # build()'s default code: shared_stub_code()


def build(
    sources: dict[str, Path],
    out: Path,
    *,
    version: str = "1.0.0",
    repo_id: str = "test-org/muon-traces",
    code: Path | None = STUB,
) -> Path:
    """``muon-repro bundle`` in this process. ``code``: where the bundled source comes from: by default a stub of the
    files a bundle's code must hold (:func:`shared_stub_code`); ``REPO_ROOT`` for a test of the code itself; None:
    none."""
    from muon_repro.dataset.bundle import Sources, build_bundle
    from muon_repro.dataset.meta import BundleMeta

    if code == STUB:
        code = shared_stub_code()
    build_bundle(Sources(**sources, code=code), BundleMeta(repo_id=repo_id, version=version, date=DATE), out)
    return out
