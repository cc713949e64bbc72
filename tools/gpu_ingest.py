"""Bring a GPU session's results (tools/gpu_session.sh) into the dataset's traces.

    python -m tools.gpu_ingest FILES_DIR [--traces traces] [--docs docs/gpu.md]

FILES_DIR holds what the session's OUT sent back: ``gpu_runs.tar.gz`` (or its ``.partNN`` pieces) and
``session.log``. For each hardware profile in it:

* the run groups it recorded (``single_device``, ``study_protocol_1rank``, ...) replace the same groups under
  ``traces/<profile>/``, whole: a group is one session's rounds, never mixed with another's (paired rounds);
* ``costmodel/``: the calibration (``machine.json``, ``machine.calibration.*``) replaces the profile's; Gram
  Newton-Schulz's rows (``gram_newton_schulz.json``) join its calibration table, as the kernels timed beside ours;
  the variants' accuracy (``ns_accuracy.json``) is kept and written into docs/gpu.md's block;
* the session's log goes to ``traces/<profile>/costmodel/gpu_session.log``.

It prints what to run next (the cost model's records, the analysis, verify). Nothing is replaced until the
whole archive has been read: a damaged archive changes nothing.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from muon_repro.rundir import ACCURACY_FILE as ACCURACY

COSTMODEL = "costmodel"
CALIBRATION_STEM = "machine.calibration"
GRAM_ROWS = "gram_newton_schulz.json"


def archive_bytes(files_dir: Path) -> bytes:
    """The session's archive, its pieces joined in order; a ValueError naming the folder when there is none."""
    whole = files_dir / "gpu_runs.tar.gz"
    pieces = [whole] if whole.is_file() else sorted(files_dir.glob("gpu_runs.tar.gz.part*"))
    if not pieces:
        raise ValueError(
            f"{files_dir}: no gpu_runs.tar.gz nor gpu_runs.tar.gz.partNN; give the folder the session's files came to"
        )
    return b"".join(p.read_bytes() for p in pieces)


def unpack(data: bytes, into: Path) -> Path:
    """Extract the archive's ``traces/`` into ``into`` (refusing links and paths outside it); returns that folder."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(into, filter="data")
    traces = into / "traces"
    if not traces.is_dir():
        raise ValueError("the archive holds no traces/ folder: not a GPU session's results")
    return traces


def join_gram_rows(costmodel: Path) -> int:
    """Append Gram Newton-Schulz's rows to the profile's calibration table (rewritten as the package writes it)."""
    import pandas as pd

    from muon_repro.tables.io import write_table
    from muon_repro.tables.schemas import SCHEMAS

    gram, table = costmodel / GRAM_ROWS, costmodel / f"{CALIBRATION_STEM}.parquet"
    if not gram.is_file() or not table.is_file():
        return 0
    rows = json.loads(gram.read_text(encoding="utf-8"))
    rows = rows.get("rows", []) if isinstance(rows, dict) else rows
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{gram}: expected a list of calibration rows")
    calibration = pd.read_parquet(table)
    schema = SCHEMAS["calibration"]
    timed = pd.DataFrame(rows)
    kernels = calibration[calibration["kind"] == "kernel"]
    for column in ("profile", "machine", "device", "backend", "threads"):  # the calibration's own, the same machine
        if column in calibration.columns and len(kernels):
            timed[column] = kernels[column].iloc[0]
    timed = timed[[c for c in timed.columns if c in schema.names]]  # first_call_s: in the bench's log, not the table
    joined = pd.concat([calibration, timed], ignore_index=True)
    write_table(joined, schema, costmodel, CALIBRATION_STEM)
    gram.unlink()  # its rows now live in the table
    return len(rows)


def ingest(files_dir: Path, traces: Path, docs: Path) -> list[str]:
    """Move the session's results into ``traces``; returns what was done, a line each."""
    done = []
    data = archive_bytes(files_dir)
    with tempfile.TemporaryDirectory(prefix="gpu-ingest-") as tmp:
        recorded = unpack(data, Path(tmp))
        for profile in sorted(p for p in recorded.iterdir() if p.is_dir()):
            dest = traces / profile.name
            dest.mkdir(parents=True, exist_ok=True)
            for group in sorted(p for p in profile.iterdir() if p.is_dir() and p.name != COSTMODEL):
                shutil.rmtree(dest / group.name, ignore_errors=True)
                shutil.move(str(group), dest / group.name)
                runs = sum(1 for run in (dest / group.name).iterdir() if run.is_dir())
                done.append(f"{dest / group.name}: replaced by the session's {runs} runs")
            if (profile / COSTMODEL).is_dir():
                joined = join_gram_rows(profile / COSTMODEL)
                (dest / COSTMODEL).mkdir(exist_ok=True)
                for f in sorted((profile / COSTMODEL).iterdir()):
                    shutil.copy2(f, dest / COSTMODEL / f.name)
                done.append(f"{dest / COSTMODEL}: calibration replaced, {joined} Gram Newton-Schulz rows joined")
                if (dest / COSTMODEL / ACCURACY).is_file():
                    from muon_repro.optim.polar_accuracy import main as accuracy

                    accuracy(["--from-json", str(dest / COSTMODEL / ACCURACY), "--write", str(docs)])
                    done.append(f"{docs}: the variants' accuracy on the GPU")
            log = files_dir / "session.log"
            if log.is_file():
                shutil.copy2(log, dest / COSTMODEL / "gpu_session.log")
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu_ingest", description=__doc__.split("\n\n")[0])
    parser.add_argument("files_dir", type=Path, help="the folder the session's OUT files came back to")
    parser.add_argument("--traces", type=Path, default=Path("traces"))
    parser.add_argument("--docs", type=Path, default=Path("docs/gpu.md"))
    args = parser.parse_args(argv)
    try:
        for line in ingest(args.files_dir, args.traces, args.docs):
            print(line)
    except (ValueError, OSError, tarfile.TarError) as exc:
        print(f"gpu_ingest: {exc}", file=sys.stderr)
        return 1
    print(
        "next: muon-repro regimes --records-only --profile <profile> (the predictions), "
        "muon-repro run --from analyze, muon-repro verify dist/dataset"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
