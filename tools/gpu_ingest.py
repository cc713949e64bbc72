"""Bring a GPU session's results (tools/gpu_session.sh) into the dataset's traces.

    python -m tools.gpu_ingest FILES_DIR [FILES_DIR ...] [--traces traces] [--docs docs/gpu.md] [--allow-cpu]

FILES_DIR holds what the session's OUT sent back: ``gpu_runs.tar.gz`` (or its ``.partNN`` pieces) and
``session.log``; a session run as several calls (``gpu_session.sh --only``) gives each call's folder, and no two
may bring the same group or cost-model file. For each hardware profile in them:

* the run groups it recorded (``single_device``, ``study_protocol_1rank``, ...) replace the same groups under
  ``traces/<profile>/``, whole: a group is one session's rounds, never mixed with another's (paired rounds);
* ``costmodel/``: the calibration (``machine.json``, ``machine.calibration.*``) replaces the profile's; Gram
  Newton-Schulz's rows (``gram_newton_schulz.json``) join its calibration table, as the kernels timed beside ours;
  the variants' accuracy (``ns_accuracy.json``) is kept and written into docs/gpu.md's block;
* the session's log (several calls': joined, in the order given) goes to ``traces/<profile>/costmodel/gpu_session.log``.

It prints what to run next (the cost model's records, the analysis, verify). Nothing is replaced until the
whole archive has been read and checked: its gzip stream end to end (a part missing, cut or damaged), every
member it brings in (the calibration, Gram Newton-Schulz's rows, the accuracy rows, docs/gpu.md's block); a
damaged archive changes nothing. A CPU's archive (``gpu_session.sh --dry-run``, which packs a ``DRY_RUN``
marker, or a calibration or accuracy run whose device is not CUDA) is refused: it would put a CPU's numbers in
the GPU's place. ``--allow-cpu`` takes it anyway, for testing the session's script (with ``--traces`` elsewhere).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import re
import shutil
import sys
import tarfile
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from muon_repro.rundir import ACCURACY_FILE as ACCURACY

ARCHIVE = "gpu_runs.tar.gz"
COSTMODEL = "costmodel"
CALIBRATION_STEM = "machine.calibration"
GRAM_ROWS = "gram_newton_schulz.json"
MACHINE = "machine.json"
DRY_RUN = "DRY_RUN"
"""The marker ``gpu_session.sh --dry-run`` packs beside ``traces/`` and ``logs/``: the CPU's, at the tiny scale."""
CHUNK = 1 << 20
UNCHANGED = "nothing was changed"


def archive_pieces(files_dir: Path) -> list[Path]:
    """The archive's file, or its ``.partNN`` pieces in numeric order; a ValueError naming the folder when there is
    none, or the first missing part when their numbers have a gap."""
    whole = files_dir / ARCHIVE
    if whole.is_file():
        return [whole]
    numbered = {}
    for piece in files_dir.glob(f"{ARCHIVE}.part*"):
        number = piece.name[len(ARCHIVE) + len(".part") :]
        if re.fullmatch(r"[0-9]+", number) and piece.is_file():
            numbered[int(number)] = piece
    if not numbered:
        raise ValueError(f"{files_dir}: no {ARCHIVE} nor {ARCHIVE}.partNN; give the folder the session's files came to")
    missing = [n for n in range(max(numbered) + 1) if n not in numbered]
    if missing:
        names = ", ".join(f"{ARCHIVE}.part{n:02d}" for n in missing)
        raise ValueError(f"{files_dir}: {names} missing (the parts run to .part{max(numbered):02d}): fetch them; {UNCHANGED}")
    return [numbered[n] for n in sorted(numbered)]


def archive_name(files_dir: Path, pieces: list[Path]) -> str:
    """How messages name the archive: its file, or its parts' range."""
    if len(pieces) == 1:
        return str(pieces[0])
    return f"{files_dir / ARCHIVE}.{pieces[0].name.rsplit('.', 1)[1]}-{pieces[-1].name.rsplit('.', 1)[1]}"


def archive_bytes(files_dir: Path) -> bytes:
    """The session's archive, its pieces joined in order; a ValueError naming the folder when there is none."""
    return b"".join(p.read_bytes() for p in archive_pieces(files_dir))


def check_gzip(data: bytes, named: str) -> None:
    """Read the whole gzip stream (its CRC and length checked at its end): a ValueError naming the archive when
    it is cut short or damaged. tarfile alone takes a header it cannot read for the archive's end, so a missing
    middle part would pass for a smaller archive."""
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            while stream.read(CHUNK):
                pass
    except EOFError:
        raise ValueError(
            f"{named} ends early (its gzip stream is cut short): a last part missing or a copy stopped; "
            f"fetch the session's files again; {UNCHANGED}"
        ) from None
    except (zlib.error, gzip.BadGzipFile) as exc:
        raise ValueError(
            f"{named} is damaged ({exc}): a part missing, out of order or corrupted; fetch the session's files again; {UNCHANGED}"
        ) from None


def unpack(data: bytes, into: Path, named: str = ARCHIVE) -> Path:
    """Extract the archive's ``traces/`` into ``into`` (refusing links and paths outside it); returns that folder."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(into, filter="data")
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise ValueError(f"{named}: not a readable tar.gz ({exc}); {UNCHANGED}") from None
    traces = into / "traces"
    if not traces.is_dir():
        raise ValueError(f"{named}: the archive holds no traces/ folder: not a GPU session's results; {UNCHANGED}")
    return traces


def gram_rows(gram: Path, named: str | None = None) -> list[dict]:
    """Gram Newton-Schulz's timed rows (a list, or ``{"rows": [...]}``); a ValueError naming the file (``named``,
    the archive member, else its path) when they are not a list of rows."""
    named = named or str(gram)
    try:
        rows = json.loads(gram.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{named}: not JSON ({exc})") from None
    rows = rows.get("rows", []) if isinstance(rows, dict) else rows
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{named}: expected a list of calibration rows (tools/gram_ns_bench.py --out writes them)")
    return rows


def join_gram_rows(costmodel: Path, named: str | None = None) -> int:
    """Append Gram Newton-Schulz's rows to the profile's calibration table (rewritten as the package writes it).
    ``named``: how errors name the cost model's folder (its archive member), else its path."""
    import pandas as pd

    from muon_repro.tables.io import write_table
    from muon_repro.tables.schemas import SCHEMAS

    named = named or str(costmodel)
    gram, table = costmodel / GRAM_ROWS, costmodel / f"{CALIBRATION_STEM}.parquet"
    if not gram.is_file():
        return 0
    rows = gram_rows(gram, f"{named}/{GRAM_ROWS}")
    if not table.is_file():
        return 0
    calibration = read_calibration(table, f"{named}/{table.name}")
    schema = SCHEMAS["calibration"]
    timed = pd.DataFrame(rows)
    kernels = calibration[calibration["kind"] == "kernel"] if "kind" in calibration.columns else calibration.iloc[:0]
    for column in ("profile", "machine", "device", "backend", "threads"):  # the calibration's own, the same machine
        if column in calibration.columns and len(kernels):
            timed[column] = kernels[column].iloc[0]
    timed = timed[[c for c in timed.columns if c in schema.names]]  # first_call_s: in the bench's log, not the table
    joined = pd.concat([calibration, timed], ignore_index=True)
    try:
        write_table(joined, schema, costmodel, CALIBRATION_STEM)
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{named}/{GRAM_ROWS}: its rows do not fit the calibration table ({exc})") from None
    gram.unlink()  # its rows now live in the table
    return len(rows)


def read_calibration(table: Path, named: str):
    """The calibration table (a DataFrame); a ValueError naming it when it cannot be read."""
    import pandas as pd

    try:
        return pd.read_parquet(table)
    except Exception as exc:  # pyarrow's errors are many and name no file
        said = str(exc).replace(f"'{table}'", "it").replace(str(table), "it")
        raise ValueError(f"{named}: not a readable Parquet table ({type(exc).__name__}: {said})") from None


@dataclass
class Profile:
    """One profile of the archive, checked and ready to move in."""

    recorded: Path
    groups: list[Path] = field(default_factory=list)
    joined: int = 0
    accuracy_block: str | None = None


def check_device(costmodel: Path, named: str) -> None:
    """A ValueError when the profile's calibration or accuracy run says its device is not CUDA (a CPU's)."""
    told = []
    machine = costmodel / MACHINE
    if machine.is_file():
        try:
            record = json.loads(machine.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{named}/{MACHINE}: not JSON ({exc})") from None
        device = record.get("device") if isinstance(record, dict) else None
        if device != "cuda":
            told.append(f"{MACHINE} says device {device!r}")
    table = costmodel / f"{CALIBRATION_STEM}.parquet"
    if table.is_file():
        calibration = read_calibration(table, f"{named}/{table.name}")
        if "device" in calibration.columns and (devices := sorted(set(calibration["device"].dropna()) - {"cuda"})):
            told.append(f"{table.name} has device {', '.join(map(repr, devices))}")
    accuracy = costmodel / ACCURACY
    if accuracy.is_file():
        try:
            device = json.loads(accuracy.read_text(encoding="utf-8")).get("device")
        except (ValueError, UnicodeDecodeError, AttributeError):
            device = None  # saved_rows names what is wrong with it
        if device == "cpu":
            told.append(f"{ACCURACY} says device 'cpu'")
    if told:
        raise ValueError(
            f"{named}: a CPU's results, not a GPU's ({'; '.join(told)}): refused, so that they do not replace the "
            f"profile's; give --allow-cpu only to test the session's script (with --traces elsewhere); {UNCHANGED}"
        )


def prepare(profile: Path, root: Path, named: str, docs: Path, allow_cpu: bool) -> Profile:
    """Check everything the profile brings (and join Gram Newton-Schulz's rows, in the unpacked copy): a ValueError
    naming the archive member at the first problem, before anything has moved."""
    member = f"{named}:{profile.relative_to(root).as_posix()}"
    ready = Profile(profile, groups=sorted(p for p in profile.iterdir() if p.is_dir() and p.name != COSTMODEL))
    costmodel = profile / COSTMODEL
    if not costmodel.is_dir():
        return ready
    where = f"{member}/{COSTMODEL}"
    if not allow_cpu:
        check_device(costmodel, where)
    if (costmodel / ACCURACY).is_file():
        from muon_repro.optim.polar_accuracy import GPU_MARKERS, accuracy_block, saved_rows
        from muon_repro.tables.files import with_block

        try:
            device, seed, rows = saved_rows(costmodel / ACCURACY)
        except ValueError as exc:
            raise ValueError(str(exc).replace(str(costmodel / ACCURACY), f"{where}/{ACCURACY}")) from None
        ready.accuracy_block = accuracy_block(rows, seed, device=device)
        try:
            with_block(docs.read_text(encoding="utf-8"), *GPU_MARKERS, "", "the GPU's accuracy table")
        except (OSError, ValueError) as exc:
            raise ValueError(f"--docs {docs}: {exc}; name the page with the GPU accuracy block (docs/gpu.md)") from None
    ready.joined = join_gram_rows(costmodel, where)
    return ready


def _checked(files_dir: Path, root: Path, docs: Path, allow_cpu: bool) -> list[Profile]:
    """One call's archive read, unpacked into ``root`` and checked, profile by profile: a ValueError naming the
    archive (or its member) at the first problem."""
    pieces = archive_pieces(files_dir)
    named = archive_name(files_dir, pieces)
    data = archive_bytes(files_dir)
    check_gzip(data, named)
    recorded = unpack(data, root, named)
    if (root / DRY_RUN).exists() and not allow_cpu:
        raise ValueError(
            f"{named}: a dry run's archive (it holds {DRY_RUN}: gpu_session.sh --dry-run, the CPU at the tiny scale), "
            f"not a GPU session's results: refused; give --allow-cpu only to test the script (with --traces "
            f"elsewhere); {UNCHANGED}"
        )
    try:
        return [prepare(p, root, named, docs, allow_cpu) for p in sorted(p for p in recorded.iterdir() if p.is_dir())]
    except (OSError, ValueError) as exc:  # a member: named as the archive's, never by the temporary copy's path
        said = str(exc).replace(f"{root}/", f"{named}:")
        raise ValueError(said if UNCHANGED in said else f"{said}; {UNCHANGED}") from None


def _brought(profile: Profile) -> list[str]:
    """What a profile of one call brings: its groups and its cost model's files, by path under the profile."""
    costmodel = profile.recorded / COSTMODEL
    files = [f"{COSTMODEL}/{f.name}" for f in costmodel.iterdir() if f.is_file()] if costmodel.is_dir() else []
    return [g.name for g in profile.groups] + files


def ingest(files_dirs: Path | list[Path], traces: Path, docs: Path, allow_cpu: bool = False) -> list[str]:
    """Move the session's results into ``traces``; returns what was done, a line each. ``files_dirs``: one call's
    folder, or several calls' of one session (``gpu_session.sh --only``), which must not bring the same group or
    cost-model file twice; their logs are kept joined, in the order given. Every check comes first: a ValueError
    changes nothing."""
    from muon_repro.optim.polar_accuracy import GPU_MARKERS
    from muon_repro.tables.files import staged_dir, write_atomic_all, write_block

    calls = [files_dirs] if isinstance(files_dirs, Path) else list(files_dirs)
    if len(set(calls)) != len(calls):
        raise ValueError(f"{', '.join(map(str, calls))}: a folder given twice; give each call's folder once; {UNCHANGED}")
    done = []
    with tempfile.TemporaryDirectory(prefix="gpu-ingest-") as tmp:
        ready: list[tuple[Path, Profile]] = []
        first_from: dict[tuple[str, str], Path] = {}
        for number, files_dir in enumerate(calls):
            for profile in _checked(files_dir, Path(tmp) / f"call{number}", docs, allow_cpu):
                for item in _brought(profile):
                    key = (profile.recorded.name, item)
                    if key in first_from:
                        raise ValueError(
                            f"{first_from[key]} and {files_dir} both bring {key[0]}/{item}: each call of a session "
                            f"records its own stages (gpu_session.sh --only); give one of them; {UNCHANGED}"
                        )
                    first_from[key] = files_dir
                ready.append((files_dir, profile))
        logs = [d / "session.log" for d in calls if (d / "session.log").is_file()]
        # every check passed: from here on, the results move in
        for files_dir, profile in ready:
            dest = traces / profile.recorded.name
            dest.mkdir(parents=True, exist_ok=True)
            for group in profile.groups:
                # copied into a folder beside its place (the traces' file system), then swapped in whole: the old
                # group stays until the new one is complete, whatever stops the copy
                with staged_dir(dest / group.name) as stage:
                    shutil.copytree(group, stage, dirs_exist_ok=True)
                runs = sum(1 for run in (dest / group.name).iterdir() if run.is_dir())
                done.append(f"{dest / group.name}: replaced by the session's {runs} runs")
            costmodel = profile.recorded / COSTMODEL
            calibration = sorted(f for f in costmodel.iterdir() if f.is_file()) if costmodel.is_dir() else []
            copies = {dest / COSTMODEL / f.name: _copy_of(f) for f in calibration}
            if logs:
                copies[dest / COSTMODEL / "gpu_session.log"] = _joined(logs)
            write_atomic_all(copies)  # one set: the machine record and its calibration table never mixed
            if calibration:
                done.append(f"{dest / COSTMODEL}: calibration replaced, {profile.joined} Gram Newton-Schulz rows joined")
            if profile.accuracy_block is not None:
                write_block(docs, GPU_MARKERS, profile.accuracy_block, "the GPU's accuracy table")
                done.append(f"{docs}: the variants' accuracy on the GPU")
    return done


def _joined(logs: list[Path]):
    """A writer of the calls' logs, one after the other (one log: its bytes as they are)."""
    if len(logs) == 1:
        return _copy_of(logs[0])

    def write(tmp) -> None:
        with open(tmp, "wb") as out:
            for log in logs:
                out.write(f"==> {log} <==\n".encode())
                out.write(log.read_bytes())

    return write


def _copy_of(source: Path):
    """A writer of ``source``'s bytes to the path it is given (for write_atomic_all)."""
    return lambda tmp: shutil.copyfile(source, tmp)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu_ingest", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "files_dirs",
        type=Path,
        nargs="+",
        metavar="FILES_DIR",
        help="the folder the session's OUT files came back to; several: one per call of the session (--only)",
    )
    parser.add_argument("--traces", type=Path, default=Path("traces"))
    parser.add_argument("--docs", type=Path, default=Path("docs/gpu.md"))
    parser.add_argument(
        "--allow-cpu",
        action="store_true",
        help="take a CPU's archive too (gpu_session.sh --dry-run's): for testing the script, never into the dataset's traces",
    )
    args = parser.parse_intermixed_args(argv)  # the folders before or after the options
    try:
        for line in ingest(args.files_dirs, args.traces, args.docs, allow_cpu=args.allow_cpu):
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
