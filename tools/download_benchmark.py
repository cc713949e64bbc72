"""How long ``review`` and ``contribute`` take to fetch many small files: one at a time against several.

    python -m tools.download_benchmark [--files 200] [--delay-ms 50]

Serves ``--files`` small ``environment.json`` files from the fake Hub on 127.0.0.1, holds every
request ``--delay-ms`` before answering (a round trip to a real Hub; 0 measures loopback alone), and
times :func:`muon_repro.hub.remote.download` with 1 worker and with its default, side by side in one
run. Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from muon_repro.hub import remote
from tests.support.fake_hub import FakeHub

REPO = "bench-org/downloads"
TOKEN = "hf_benchmark_token"


def _seconds(api, head: str, paths: list[str], workers: int) -> float:
    with tempfile.TemporaryDirectory(prefix="muon-download-bench-") as scratch:
        started = time.perf_counter()
        root = remote.download(api, REPO, paths, head, Path(scratch), workers=workers)
        seconds = time.perf_counter() - started
        missing = [p for p in paths if not (root / p).is_file()]
        if missing:
            raise RuntimeError(f"{len(missing)} file(s) did not arrive, e.g. {missing[0]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.download_benchmark", description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=200, help="files to download (default: %(default)s)")
    parser.add_argument("--delay-ms", type=float, default=50.0, help="each request held this long (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.files < 1 or args.delay_ms < 0:
        parser.error(f"--files must be at least 1 and --delay-ms at least 0, got {args.files} and {args.delay_ms}")

    from huggingface_hub import HfApi, constants

    saved = constants.ENDPOINT, constants.HUGGINGFACE_CO_URL_TEMPLATE, constants.HF_HUB_DISABLE_XET
    constants.HF_HUB_DISABLE_XET = True  # the fake Hub serves plain HTTP downloads only
    try:
        with FakeHub() as hub:
            # huggingface_hub builds download URLs and its own requests from these, not from the HfApi's endpoint
            constants.ENDPOINT = hub.url
            constants.HUGGINGFACE_CO_URL_TEMPLATE = hub.url + "/{repo_id}/resolve/{revision}/{filename}"
            hub.store.create_repo("dataset", REPO)
            paths = [f"traces/bench/g/run{i}/trial0/environment.json" for i in range(args.files)]
            head = hub.push(REPO, {p: b'{"profile": "bench"}' for p in paths})
            for method in ("GET", "HEAD"):
                hub.add_hook(method, ".*", lambda: time.sleep(args.delay_ms / 1e3), once=False)
            api = HfApi(endpoint=hub.url, token=TOKEN)
            one = _seconds(api, head, paths, workers=1)
            many = _seconds(api, head, paths, workers=remote.DOWNLOAD_WORKERS)
    finally:
        constants.ENDPOINT, constants.HUGGINGFACE_CO_URL_TEMPLATE, constants.HF_HUB_DISABLE_XET = saved
    print(
        f"{args.files} files, every request held {args.delay_ms:g} ms: 1 worker {one:.2f} s, "
        f"{remote.DOWNLOAD_WORKERS} workers {many:.2f} s ({one / many:.1f}x)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
