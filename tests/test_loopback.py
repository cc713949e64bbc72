"""The loopback interface's byte counter: its parser, and gloo's algorithms measured with it.

Every rank of a 4-rank gloo world runs on this machine, so all of their traffic crosses ``lo``
and the kernel counts it in ``/proc/net/dev``. Over a few calls of each collective the package
uses, the counter's delta matches gloo's algorithm, for a group of ``n`` ranks and a full array
of ``S`` bytes, in bytes sent by the whole group per call:

    all_gather       (n-1) * S      ring: each rank sends (n-1)/n * S            = the ring model
    all_reduce     2*(n-1) * S      ring: reduce-scatter then all-gather          = the ring model
    reduce_scatter 2*(n-1) * S      an all-reduce of the full input, then a copy  = 2x the ring model

On top of the payload, TCP/IP headers and ACKs (about 0.1-0.2% at these sizes: ``lo``'s MTU is
64 KiB) and the measuring barriers (a few KB).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from muon_repro.bench.loopback import LoopbackMeter, all_ranks_local, loopback_tx_bytes, parse_tx_bytes
from muon_repro.formulas import ring_bytes
from muon_repro.parallel import CommLedger, Group, comm
from muon_repro.parallel.launch import launch

# ---------------------------------------------------------------- the /proc/net/dev parser

SAMPLE_PROC_NET_DEV = """\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:11894152167 1242546    0    0    0     0          0         0 11894152999 1242547    0    0    0     0       0          0
  eth0: 195143825    6344    0    0    0     0          0         0   478782    4737    0    0    0     0       0          0
"""


def test_parser_reads_the_transmit_bytes_of_the_named_interface():
    assert parse_tx_bytes(SAMPLE_PROC_NET_DEV) == 11894152999  # receive bytes touch the colon
    assert parse_tx_bytes(SAMPLE_PROC_NET_DEV, "eth0") == 478782


def test_parser_returns_none_without_the_interface_or_with_a_truncated_line():
    assert parse_tx_bytes(SAMPLE_PROC_NET_DEV, "wlan0") is None
    assert parse_tx_bytes("") is None
    assert parse_tx_bytes("    lo: 1 2 3 4\n") is None


def test_reader_returns_none_where_there_is_no_such_file(tmp_path):
    assert loopback_tx_bytes(tmp_path / "absent") is None
    sample = tmp_path / "dev"
    sample.write_text(SAMPLE_PROC_NET_DEV)
    assert loopback_tx_bytes(sample) == 11894152999


def test_meter_syncs_around_each_read_and_keeps_the_delta():
    counter, syncs = iter([100, 350]), []
    with LoopbackMeter(sync=lambda: syncs.append(1), read=lambda: next(counter)) as meter:
        pass
    assert meter.bytes == 250 and len(syncs) == 4  # before and after each of the two reads
    unavailable = LoopbackMeter(read=lambda: None)
    unavailable.start()
    assert unavailable.stop() is None


def test_all_ranks_local_follows_the_launchers_local_world_size(monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert all_ranks_local(4) and not all_ranks_local(8)
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert all_ranks_local(8)


# ---------------------------------------------------------------- gloo on a 4-rank world

KINDS = ("all_gather", "reduce_scatter", "all_reduce")
# group size -> the groups that run it at once (ranks outside them only join the barriers)
GROUPS = {2: ((0, 1), (2, 3)), 3: ((0, 1, 2),), 4: ((0, 1, 2, 3),)}
ELEMENTS = 3 * 2**18  # 3 MiB of fp32, divisible by 2, 3 and 4
ELEMENT_SIZE = 4
CALLS = 3
# The counter is machine-wide: a parallel test worker's gloo traffic adds to it. A window counts when the loopback
# delta is within the headers' allowance of what this world's own processes wrote (/proc/self/io wchar, sockets
# included): then it holds no one else's traffic. The smallest of CLEAN_WINDOWS such windows is kept, trying up to
# MAX_WINDOWS (the assertions below are unchanged: gloo sending more than its algorithm is in both counts).
CLEAN_WINDOWS, MAX_WINDOWS = 2, 30
HEADERS = 1.03  # TCP/IP headers, ACKs and the barriers over the payload written


def gloo_bytes_per_call(kind: str, group_size: int, full_bytes: int) -> int:
    """Bytes all ranks of one group send in one call under gloo's algorithms (module docstring)."""
    hops = group_size - 1
    return hops * full_bytes if kind == "all_gather" else 2 * hops * full_bytes


def _call(kind: str, group: Group) -> None:
    full = torch.ones(ELEMENTS)
    shard = torch.ones(ELEMENTS // group.size)
    if kind == "all_gather":
        comm.all_gather_into(full, shard, group, phase="dp_all_gather")
    elif kind == "reduce_scatter":
        comm.reduce_scatter_into(shard, full, group, phase="dp_reduce_scatter")
    else:
        comm.all_reduce_(full, group, phase="tp_all_reduce")


def _written_bytes() -> int | None:
    """Bytes this process has passed to write calls, socket sends included (``wchar`` of /proc/self/io)."""
    try:
        lines = Path("/proc/self/io").read_text().splitlines()
    except OSError:
        return None
    return next((int(line.split()[1]) for line in lines if line.startswith("wchar:")), None)


def _window(kind: str, mine: Group | None) -> tuple[int | None, bool]:
    """One measured window of CALLS calls: rank 0's loopback delta, and whether it holds only this world's traffic."""
    before = _written_bytes()
    with LoopbackMeter(sync=dist.barrier) as meter:
        for _ in range(CALLS if mine is not None else 0):
            _call(kind, mine)
    after = _written_bytes()
    written: list[int | None] = [None] * dist.get_world_size()
    dist.all_gather_object(written, None if before is None or after is None else after - before)
    own = None if None in written else sum(written)
    return meter.bytes, meter.bytes is not None and own is not None and meter.bytes <= HEADERS * own


def loopback_worker() -> dict[tuple[str, int], int | None]:
    """Per (kind, group size): the smallest loopback delta over CALLS calls in windows with no other traffic
    (rank 0), else None."""
    rank = dist.get_rank()
    deltas: dict[tuple[str, int], int | None] = {}
    for size, member_sets in GROUPS.items():
        groups = [dist.new_group(list(ranks)) for ranks in member_sets]  # collective: every rank creates every group
        mine = next(
            (Group("g", ranks, ranks.index(rank), pg, CommLedger()) for ranks, pg in zip(member_sets, groups) if rank in ranks),
            None,
        )
        for kind in KINDS:
            if mine is not None:
                _call(kind, mine)  # warm-up: connections and buffers outside the measurement
            measured, clean = [], []
            for _ in range(MAX_WINDOWS):
                delta, alone = _window(kind, mine)
                measured.append(delta)
                clean += [delta] if alone else []
                decision = [len(clean) >= CLEAN_WINDOWS]
                dist.broadcast_object_list(decision, src=0)  # rank 0's counter decides for every rank
                if decision[0]:
                    break
                time.sleep(0.2)  # let the other worker's burst pass
            deltas[(kind, size)] = min(clean) if clean else (None if None in measured else min(measured))
    return deltas if rank == 0 else {}


@pytest.fixture(scope="module")
def measured() -> dict[tuple[str, int], int | None]:
    if loopback_tx_bytes() is None:
        pytest.skip("no 'lo' line in /proc/net/dev (not Linux): the loopback counter cannot be read")
    return launch(loopback_worker, 4)[0]


@pytest.mark.slow
@pytest.mark.parametrize("size", sorted(GROUPS))
@pytest.mark.parametrize("kind", KINDS)
def test_loopback_bytes_match_gloos_algorithm(measured, kind, size):
    full_bytes = ELEMENTS * ELEMENT_SIZE
    groups = len(GROUPS[size])
    predicted = CALLS * groups * gloo_bytes_per_call(kind, size, full_bytes)
    got = measured[(kind, size)]
    assert got is not None
    # never less than the payload; TCP/IP headers, ACKs and the barriers add well under 3%
    assert predicted <= got <= 1.03 * predicted, f"{kind} n={size}: measured {got} B, gloo's algorithm {predicted} B"


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_gloo_sends_the_ring_model_except_reduce_scatter_twice(measured, kind):
    """The gap between the ring model (ledger and trace bytes) and what gloo sends, per kind."""
    size = 4
    ring = CALLS * size * ring_bytes(kind, ELEMENTS, ELEMENT_SIZE, size)
    ratio = measured[(kind, size)] / ring
    assert ratio == pytest.approx(2.0 if kind == "reduce_scatter" else 1.0, rel=0.03)
