"""Hostile contributions for ``python -m tools.contrib_fuzz``: pull requests (and runs folders) a stranger could send.

Each :class:`Case` is built from a seed: a kind (bad names, too many files, oversize files, gzip
bombs, deeply nested JSON, huge or float ``world_size``, injection text, abusive manifests and
metrics, Ctrl-C, symbolic links for ``contribute``...) and its variant. A case is the files its
pull request adds (the manifest lines are appended for them unless the case writes its own
manifest), the review's extra flags, and what must hold: the outcomes allowed and the paths that
must never be downloaded. :func:`good_run` is the one valid run the hostile ones start from.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from muon_repro.contrib.limits import CONFIG_INT_RANGES
from muon_repro.contrib.untrusted import profile_problem

PROFILE = "cpu-2c-gloo"
FOLDER = f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial0"  # where the pull request's valid run goes
SMALL_MAX_FILES = 40  # --max-files of the too-many-files cases: enough for a run, cheap to exceed
SMALL_MAX_BYTES = 4096  # --max-bytes of the too-many-bytes cases
BOMB_BYTES = 2 * 2**30  # what a gzip bomb decompresses to: past a child's 2 GiB address space
HOSTILE_NAMES = (
    "mu\u043en",  # a Cyrillic o
    "\x1b[32mChecks passed\x1b[0m",
    "a\nChecks passed: 6 file(s) added",
    "..",
    ".hidden",
    "a\\b",
    "",
    "UPPER",
    "x" * 300,
    "\u202egnp.exe",
    "a b",
    "tab\there",
    "nul\x00byte",
    "%2e%2e",
    "\ufb01le",  # a ligature
    "\r\rforged",
)
HOSTILE_PATHS = (
    "/etc/passwd",
    "../../outside.txt",
    "traces/../../outside.txt",
    "traces//comparison/x/trial0/log.txt",
    "C:\\windows\\log.txt",
    "traces\\cpu-2c-gloo\\comparison\\x\\trial0\\log.txt",
    "traces/" + "deep/" * 120 + "log.txt",
    "README.md\n\x1b[2K",
    f"{FOLDER}/rank0.json.gz\n",
    f"{FOLDER}/rank00.json.gz",
    f"{FOLDER}/rank-1.json.gz",
    f"{FOLDER}/rank1.json",
    f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial99999/log.txt",
    f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial007/log.txt",
    f"{FOLDER}/notes.md",
)
BAD_NUMBERS = (10**12, 10**6, 2**63, -1, 0, 4.7, 4.0, True, "4", None, 1e308, 10**30, 1025, [4], {"n": 4})
INJECTIONS = (
    "line one\nChecks passed: 999 file(s)\n",
    "```\n</details><script>alert(1)</script>\n```",
    "\x1b[2J\x1b[H\x1b[31mREAD ME\x1b[0m",
    "<img src=x onerror=alert(1)> | table | cell |\n# heading",
    "\u202e\u2066reversed\u2069",
)


@dataclass
class Case:
    seed: int
    kind: str
    variant: str
    files: dict[str, bytes] = field(default_factory=dict)  # what the pull request adds
    manifest: bytes | None = None  # the pull request's MANIFEST.sha256 (None: main's and a line per added file)
    deleted: tuple[str, ...] = ()  # main's files the pull request deletes
    title: str = "Contribute 1 run(s)"
    args: tuple[str, ...] = ()  # more flags for the command
    command: str = "review"  # or "contribute" (with ``runs``)
    pr: int | None = None  # review this number instead of the pull request made (a missing one)
    repo: str | None = None  # review this repository instead (a missing one)
    runs: Callable[[Path], None] | None = None  # builds the runs folder of a contribute case
    links: int = 0  # symbolic links the contribute case holds: each must be named
    interrupt_after_s: float | None = None  # Ctrl-C (SIGINT) this long after the start
    allowed: tuple[str, ...] = ("refused", "error")  # passed | refused (exit 1) | error (exit 2) | interrupted (130)
    never_downloaded: tuple[str, ...] = ()

    def describe(self) -> str:
        return f"seed {self.seed}: {self.kind} ({self.variant})"


def _trace(rank: int, world_size: int = 2, recording: str = "") -> bytes:
    """A tiny trace the reader parses; ``recording`` (its trial folder) makes each recording's bytes its own, as a real
    one's are (review refuses an added trace that is byte for byte a published one)."""
    event = {"ph": "X", "name": "ProfilerStep#1", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 0, "dur": 10}
    event["args"] = {"recording": recording}
    doc = {"distributedInfo": {"rank": rank, "world_size": world_size, "backend": "gloo"}, "traceEvents": [event]}
    return gzip.compress(json.dumps(doc).encode(), mtime=0)


def config() -> dict:
    """The valid run's config.json, to change one field of."""
    return {"group": "comparison", "name": "muon_dp2_tp1", "key": "comparison/muon_dp2_tp1", "world_size": 2, "dp": 2, "tp": 1}


def good_run(folder: str = FOLDER, *, name: str = "muon_dp2_tp1", world_size: int = 2, **extra: object) -> dict[str, bytes]:
    """The files of one valid run of ``world_size`` ranks (tiny traces the reader parses), under ``folder``."""
    cfg = {"group": "comparison", "name": name, "key": f"comparison/{name}", "world_size": world_size, "dp": world_size, "tp": 1}
    cfg.update(extra)
    files = {
        "config.json": json.dumps(cfg).encode(),
        "environment.json": json.dumps({"backend": "gloo", "host_cpu_cores": 2, "profile": PROFILE}).encode(),
        "metrics.json": json.dumps({"config": cfg["key"], "ranks": [{"rank": r} for r in range(world_size)]}).encode(),
        "log.txt": b"step 0\n",
        **{f"rank{r}.json.gz": _trace(r, world_size, folder) for r in range(world_size)},
    }
    return {f"{folder}/{name_}": data for name_, data in files.items()}


def manifest_lines(files: dict[str, bytes]) -> bytes:
    return "".join(f"{hashlib.sha256(d).hexdigest()}  {len(d)}  {p}\n" for p, d in sorted(files.items())).encode()


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


_BOMBS: dict[str, bytes] = {}


def gzip_bomb(kind: str) -> bytes:
    """A trace that decompresses to BOMB_BYTES: whitespace inside its JSON, or one event repeated (built once)."""
    if kind not in _BOMBS:
        compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip header and trailer
        head = b'{"distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": ['
        event = b'{"ph": "X", "name": "aten::mm", "cat": "cpu_op", "pid": 1, "tid": 1, "ts": 0, "dur": 1},'
        unit = b" " * 2**20 if kind == "whitespace" else event * (2**20 // len(event))
        parts = [compressor.compress(head)]
        parts += [compressor.compress(unit) for _ in range(BOMB_BYTES // len(unit))]
        parts.append(compressor.compress(event[:-1] + b"]}"))
        _BOMBS[kind] = b"".join(parts) + compressor.flush()
    return _BOMBS[kind]


def _replace(files: dict[str, bytes], name: str, data: bytes) -> dict[str, bytes]:
    return {**files, f"{FOLDER}/{name}": data}


def _names(case: Case, rng: random.Random) -> None:
    bad = rng.choice(HOSTILE_NAMES)
    part = rng.choice(("profile", "group", "name", "trial", "file"))
    parts = {"profile": PROFILE, "group": "comparison", "name": "muon_dp2_tp1", "trial": "trial0", "file": "log.txt"}
    parts[part] = bad
    path = "traces/" + "/".join(parts[k] for k in ("profile", "group", "name", "trial", "file"))
    case.variant = f"{part} = {bad[:40]!r}"
    case.files = {**good_run(), path: b"step 0\n"}
    legal = part == "profile" and profile_problem(bad, "") is None  # capitals are allowed in a profile id
    case.never_downloaded = () if legal else (path,)


def _paths(case: Case, rng: random.Random) -> None:
    path = rng.choice(HOSTILE_PATHS)
    case.variant = repr(path[:60])
    case.files = {**good_run(), path: b"x\n"}
    case.never_downloaded = (path,)


def _too_many(case: Case, rng: random.Random) -> None:
    runs = {}
    for k in range(SMALL_MAX_FILES // 6 + 1 + rng.randrange(3)):
        runs.update(good_run(f"traces/{PROFILE}/comparison/muon_dp2_tp1/trial{k}"))
    case.variant = f"{len(runs)} files, --max-files {SMALL_MAX_FILES}"
    case.files, case.args, case.never_downloaded = runs, ("--max-files", str(SMALL_MAX_FILES)), tuple(runs)


def _too_large(case: Case, rng: random.Random) -> None:
    if rng.random() < 0.5:
        case.variant = f"--max-bytes {SMALL_MAX_BYTES}"
        case.files = {**good_run(), f"{FOLDER}/log.txt": b"x" * SMALL_MAX_BYTES}
        case.args, case.never_downloaded = ("--max-bytes", str(SMALL_MAX_BYTES)), tuple(case.files)
        return
    name, size = rng.choice((("config.json", 64 * 2**10 + 1), ("environment.json", 2**20 + 1), ("log.txt", 16 * 2**20 + 1)))
    data = json.dumps({**config(), "command": "x" * size}).encode() if name == "config.json" else b"x" * size
    case.variant = f"{name} of {len(data)} bytes"
    case.files = _replace(good_run(), name, data)
    case.never_downloaded = (f"{FOLDER}/{name}",)


def _bomb(case: Case, rng: random.Random) -> None:
    kind = rng.choice(("whitespace", "events"))
    case.variant = f"rank0.json.gz: {kind} to {BOMB_BYTES >> 30} GiB"
    case.files = _replace(good_run(), "rank0.json.gz", gzip_bomb(kind))


def _nesting(case: Case, rng: random.Random) -> None:
    name = rng.choice(("config.json", "environment.json", "metrics.json", "rank1.json.gz"))
    depth = rng.choice((1000, 30000)) if name == "config.json" else rng.choice((30000, 400000))
    data = gzip.compress(_deep(depth), mtime=0) if name.endswith(".gz") else _deep(depth)
    case.variant = f"{name} nested {depth} deep"
    case.files = _replace(good_run(), name, data)


def _numbers(case: Case, rng: random.Random) -> None:
    key = rng.choice(("world_size", "world_size", "trial", "dp", "tp", "steps"))
    value = rng.choice(BAD_NUMBERS)
    case.variant = f"{key} = {str(value)[:30]}"
    case.files = _replace(good_run(), "config.json", json.dumps({**config(), key: value}).encode())
    low, high = CONFIG_INT_RANGES[key]
    if key in ("trial", "steps") and type(value) is int and low <= value <= high:
        case.allowed = ("passed",)  # a valid value: the run is fine


def _injection(case: Case, rng: random.Random) -> None:
    text = rng.choice(INJECTIONS)
    where = rng.choice(("command", "title", "log"))
    case.variant = f"{where}: {text[:30]!r}"
    case.files = good_run()
    if where == "command":
        case.files = _replace(case.files, "config.json", json.dumps({**config(), "command": [text, "--x"]}).encode())
    elif where == "title":
        case.title = text
    else:
        case.files = _replace(case.files, "log.txt", text.encode())
    case.allowed = ("passed", "refused", "error")  # free text is allowed; it must print escaped


def _metrics(case: Case, rng: random.Random) -> None:
    variants = {
        "100k entries": {"ranks": [{"rank": 0}] * 100_000},
        "rank 10**18": {"ranks": [{"rank": 0}, {"rank": 10**18}]},
        "negative ranks": {"ranks": [{"rank": -5}, {"rank": -1}]},
        "not entries": {"ranks": ["a", 1, None]},
        "ranks a dict": {"ranks": {"0": {}}},
    }
    variant = rng.choice(sorted(variants))
    case.variant = variant
    case.files = _replace(good_run(), "metrics.json", json.dumps(variants[variant]).encode())


def _manifest(case: Case, rng: random.Random) -> None:
    case.files = good_run()
    lines = manifest_lines(case.files)
    variant = rng.choice(("one long line", "control characters", "5000 unadded paths", "not UTF-8", "rewritten", "none"))
    case.variant = variant
    if variant == "one long line":
        case.manifest = b"MAIN\n" + b"z" * 2**20 + b"\n"
    elif variant == "control characters":
        case.manifest = b"MAIN\n" + lines + b"0" * 64 + b"  1  traces/\x1b[31mred\x1b[0m\n"
    elif variant == "5000 unadded paths":
        case.manifest = b"MAIN\n" + lines + b"".join(b"%064d  1  traces/x/%d\n" % (0, i) for i in range(5000))
    elif variant == "not UTF-8":
        case.manifest = b"MAIN\n" + lines + b"\xff\xfe\xfa  1  x\n"
    elif variant == "rewritten":
        case.manifest = lines
    else:
        case.manifest = b""
        case.deleted = ("MANIFEST.sha256",)


def _junk(case: Case, rng: random.Random) -> None:
    name = rng.choice(("config.json", "environment.json", "metrics.json", "rank0.json.gz", "rank1.json.gz"))
    data = bytes(rng.randrange(256) for _ in range(rng.choice((0, 1, 100, 5000))))
    if rng.random() < 0.3 and name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    case.variant = f"{name}: {len(data)} random bytes"
    case.files = _replace(good_run(), name, data)


def _main_changed(case: Case, rng: random.Random) -> None:
    case.files = {**good_run(), "README.md": b"# mine now\n"} if rng.random() < 0.5 else good_run()
    case.deleted = () if "README.md" in case.files else ("README.md",)
    case.variant = "README.md changed" if case.deleted == () else "README.md deleted"


def _not_found(case: Case, rng: random.Random) -> None:
    if rng.random() < 0.5:
        case.pr, case.variant = rng.choice((10**5, 10**6)), "no such pull request"  # past any case's number
    else:
        case.repo, case.variant = "test-org/no-such-dataset", "no such repository"
    case.files, case.allowed = good_run(), ("error",)


def _interrupt(case: Case, rng: random.Random) -> None:
    case.files = good_run()
    case.interrupt_after_s = rng.uniform(0.0, 1.5)
    case.variant = f"SIGINT after {case.interrupt_after_s:.2f} s"
    case.allowed = ("passed", "interrupted")


def _good(case: Case, rng: random.Random) -> None:
    world_size = rng.choice((1, 2, 4))
    name = f"muon_dp{world_size}_tp1"
    case.files = good_run(f"traces/{PROFILE}/comparison/{name}/trial0", name=name, world_size=world_size)
    case.variant, case.allowed = f"world_size {world_size}", ("passed",)


def _symlinks(case: Case, rng: random.Random) -> None:
    variant = rng.choice(("log.txt to a file outside", "trial folder", "dangling", "loop", "two links"))

    def build(root: Path) -> None:
        folder = root / PROFILE / "comparison" / "muon_dp2_tp1" / "trial0"
        folder.mkdir(parents=True)
        for path, data in good_run().items():
            (folder / path.rsplit("/", 1)[1]).write_bytes(data)
        outside = root.parent / "outside.txt"
        outside.write_text("secret\n")
        if variant in ("log.txt to a file outside", "two links"):
            (folder / "log.txt").unlink()
            (folder / "log.txt").symlink_to(outside)
        if variant in ("trial folder", "two links"):
            (folder.parent / "trial1").symlink_to(folder, target_is_directory=True)
        if variant == "dangling":
            (folder / "rank1.json.gz").unlink()
            (folder / "rank1.json.gz").symlink_to(root / "nowhere")
        if variant == "loop":
            (folder / "loop").symlink_to(folder / "loop")

    case.command, case.runs, case.variant = "contribute", build, variant
    case.links = 2 if variant == "two links" else 1
    case.allowed = ("error",)


KINDS: dict[str, tuple[float, Callable[[Case, random.Random], None]]] = {  # kind -> (weight, builder)
    "names": (3, _names),
    "paths": (3, _paths),
    "too many files": (1, _too_many),
    "too large": (1, _too_large),
    "gzip bomb": (0.3, _bomb),
    "nesting": (1.5, _nesting),
    "numbers": (3, _numbers),
    "injection": (1.5, _injection),
    "metrics": (1, _metrics),
    "manifest": (1.5, _manifest),
    "junk": (1.5, _junk),
    "main changed": (0.5, _main_changed),
    "not found": (0.5, _not_found),
    "interrupt": (0.5, _interrupt),
    "good": (0.5, _good),
    "symlinks": (1, _symlinks),
}


def make_case(seed: int, kind: str | None = None) -> Case:
    """The case of ``seed`` (its kind drawn by weight from the seed, unless ``kind`` is given)."""
    rng = random.Random(seed)
    names = sorted(KINDS)
    chosen = kind or rng.choices(names, weights=[KINDS[k][0] for k in names])[0]
    case = Case(seed, chosen, "")
    KINDS[chosen][1](case, rng)
    return case
