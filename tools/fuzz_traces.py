"""``python -m tools.fuzz_traces --cases N``: many more mutated traces than the test suite runs.

Each case is a source trace mutated with a seed (``tests/trace_mutations.py``, so this command
needs a checkout of the repository); its analysis must end cleanly with numbers that hold
together, or in a ``TraceError`` naming the file, within a time proportional to the file's
size. Prints the number of cases, how each ended, the longest case and every failure (with the
source and seed that reproduce it); exits 1 if any case failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

TESTS = Path(__file__).resolve().parents[1] / "tests"


def _mutations() -> ModuleType:
    """``tests/trace_mutations.py`` of this checkout."""
    if not (TESTS / "trace_mutations.py").is_file():
        raise SystemExit(f"fuzz: {TESTS / 'trace_mutations.py'} not found: run this from a checkout of the repository")
    sys.path.insert(0, str(TESTS))
    import trace_mutations

    return trace_mutations


def _sources(tm: ModuleType, extra: list[Path]) -> dict:
    found = {p.name: tm.load_document(p) for p in [*tm.DATA_TRACES, *extra]}
    found["synthetic_gpu"] = tm.synthetic_trace()
    return found


def run_cases(n: int, first_seed: int, extra: list[Path], keep: Path | None) -> int:
    """Run ``n`` cases; print the summary; return the number of failed cases."""
    tm = _mutations()
    sources = _sources(tm, extra)
    failures: list[str] = []
    kinds: dict[str, int] = {}
    longest = (0.0, "")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        warm_up = Path(tmp) / "warm_up.json"
        warm_up.write_text(json.dumps(sources["synthetic_gpu"]))
        tm.check_outcome(warm_up)  # imports: no part of any case
        for case in tm.cases(sources, n, first_seed):
            path = Path(tmp) / f"{Path(case.source).name}.{case.seed}{case.suffix}"
            path.write_bytes(case.data)
            try:
                outcome = tm.check_outcome(path, case.describe())
            except Exception as exc:  # noqa: BLE001 - every failure is reported, none stops the run
                failures.append(f"{case.describe()}: {type(exc).__name__}: {exc}")
                if keep is not None:
                    keep.mkdir(parents=True, exist_ok=True)
                    (keep / path.name).write_bytes(case.data)
                continue
            finally:
                path.unlink()
            kinds[outcome.kind] = kinds.get(outcome.kind, 0) + 1
            longest = max(longest, (outcome.seconds, case.describe()))
    total = time.perf_counter() - started
    summary = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
    print(f"{n} cases in {total:.1f} s: {summary}, {len(failures)} failed")
    print(f"longest case: {longest[0]:.3f} s ({longest[1]})")
    for failure in failures:
        print(f"FAILED {failure}")
    return len(failures)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.fuzz_traces", description=__doc__)
    parser.add_argument("--cases", type=int, default=1000, help="number of mutated traces (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first case (default: %(default)s)")
    parser.add_argument("--source", type=Path, action="append", default=[], help="another trace to mutate (repeatable)")
    parser.add_argument("--keep", type=Path, default=None, help="directory to save the failing cases' files in")
    args = parser.parse_args(argv)
    if args.cases < 1:
        parser.error(f"--cases must be 1 or more, got {args.cases}")
    missing = [str(p) for p in args.source if not p.is_file()]
    if missing:
        parser.error(f"--source: no such file: {', '.join(missing)}")
    return 1 if run_cases(args.cases, args.seed, args.source, args.keep) else 0


if __name__ == "__main__":
    raise SystemExit(main())
