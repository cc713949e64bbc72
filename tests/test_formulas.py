"""The shared counts (muon_repro.formulas) against brute force: ring bytes against a ring played chunk by chunk,
the 1F1B order against a pipeline played tick by tick, Newton-Schulz FLOPs against torch's FLOP counter on the
implementation; and the runtime's schedule and the cost model's playback run the one order."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from muon_repro.formulas import (
    muon_matrix_shapes,
    newton_schulz_flops,
    newton_schulz_flops_total,
    one_f_one_b_order,
    ring_bytes,
    warmup_forwards,
)
from muon_repro.model_config import GPTConfig
from muon_repro.optim.newton_schulz import zeropower_via_newtonschulz5
from muon_repro.parallel import schedule

# ---------------------------------------------------------------- ring bytes


def play_ring(op: str, elements: int, element_size: int, n: int) -> list[int]:
    """Bytes each rank sends when ``op`` runs as a ring over ``n`` ranks, every chunk moved one hop at a time; the
    result is checked against the collective's meaning. The array is padded to ``n`` chunks of ``ceil(E / n)``."""
    chunk = math.ceil(elements / n)
    data = [[r * 1000 + i for i in range(n * chunk)] for r in range(n)]  # rank r's input array (padded)
    pieces = [[data[r][c * chunk : (c + 1) * chunk] for c in range(n)] for r in range(n)]  # [rank][chunk]
    sent = [0] * n

    def hop(r: int, c: int) -> list[int]:
        sent[r] += len(pieces[r][c]) * element_size
        return list(pieces[r][c])

    def reduce_scatter() -> None:  # after n - 1 hops rank r holds the sum of chunk (r + 1) % n
        for k in range(n - 1):
            moving = [(r, (r - k) % n, hop(r, (r - k) % n)) for r in range(n)]
            for r, c, values in moving:
                dst = (r + 1) % n
                pieces[dst][c] = [a + b for a, b in zip(pieces[dst][c], values)]

    def all_gather(owned: list[int]) -> None:  # rank r starts with chunk owned[r] and ends with every chunk
        for k in range(n - 1):
            moving = [(r, owned[(r - k) % n], hop(r, owned[(r - k) % n])) for r in range(n)]
            for r, c, values in moving:
                pieces[(r + 1) % n][c] = values

    total = [sum(data[r][i] for r in range(n)) for i in range(n * chunk)]
    if op == "reduce_scatter":
        reduce_scatter()
        for r in range(n):
            c = (r + 1) % n
            assert pieces[r][c] == total[c * chunk : (c + 1) * chunk]
    elif op == "all_gather":
        pieces = [[data[c][c * chunk : (c + 1) * chunk] for c in range(n)] for _ in range(n)]  # rank c's shard is chunk c
        all_gather(list(range(n)))
        for r in range(n):
            assert sum(pieces[r], []) == [data[i // chunk][i] for i in range(n * chunk)]
    else:  # all_reduce: a reduce-scatter, then an all-gather of the reduced chunks
        reduce_scatter()
        all_gather([(r + 1) % n for r in range(n)])
        for r in range(n):
            assert sum(pieces[r], []) == total
    return sent


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "all_reduce"])
@pytest.mark.parametrize("n", range(1, 9))
def test_ring_bytes_are_what_every_rank_of_a_played_ring_sends(op, n):
    for elements in (0, 1, 5, 7, 8, 24, 37):
        for element_size in (1, 2, 4):
            assert play_ring(op, elements, element_size, n) == [ring_bytes(op, elements, element_size, n)] * n


def test_ring_bytes_of_the_other_ops_and_of_what_has_no_count():
    assert ring_bytes("broadcast", 10, 4, 4) == ring_bytes("send_recv", 10, 4, 2) == 40  # the array once
    assert ring_bytes("all_to_all", 10, 4, 4) == ring_bytes("all_gather", 10, 4, 4) == 3 * 3 * 4
    assert ring_bytes("barrier", 10, 4, 4) == 0
    assert ring_bytes("no_such_op", 10, 4, 1) == 0  # a group of one sends nothing, whatever the op
    assert ring_bytes("no_such_op", 10, 4, 2) is None
    assert ring_bytes("all_gather", 10, 4, 0) is None
    assert ring_bytes("all_gather", -1, 4, 2) is None


# ---------------------------------------------------------------- the 1F1B order


def play_pipeline(pp: int, micro_batches: int) -> list[list[tuple[str, int]]]:
    """Each stage's operations in the order they run when every operation takes one tick and a stage, each tick,
    forwards the next micro-batch if its activation has arrived and it holds fewer than ``min(pp - s, M)`` in flight,
    and otherwise backwards the next one if its gradient has arrived (1F1B's rule, not its order)."""
    ended: dict[tuple[str, int, int], int] = {}
    orders: list[list[tuple[str, int]]] = [[] for _ in range(pp)]
    forwarded, backwarded = [0] * pp, [0] * pp
    tick = 0
    while any(b < micro_batches for b in backwarded):
        ran = []
        for s in range(pp):
            f, b = forwarded[s], backwarded[s]
            activation = s == 0 or ended.get(("F", s - 1, f), tick) < tick
            gradient = ended.get(("F", s, b) if s == pp - 1 else ("B", s + 1, b), tick) < tick
            if f < micro_batches and activation and f - b < min(pp - s, micro_batches):
                ran.append(("F", s, f))
                forwarded[s] += 1
            elif b < f and gradient:
                ran.append(("B", s, b))
                backwarded[s] += 1
        for kind, s, i in ran:
            ended[(kind, s, i)] = tick
            orders[s].append((kind, i))
        tick += 1
        assert tick <= 4 * pp * micro_batches, "the played pipeline stalled"
    return orders


@pytest.mark.parametrize("pp", range(1, 7))
@pytest.mark.parametrize("micro_batches", range(1, 11))
def test_the_1f1b_order_is_what_a_played_pipeline_runs(pp, micro_batches):
    played = play_pipeline(pp, micro_batches)
    for s in range(pp):
        order = one_f_one_b_order(s, pp, micro_batches)
        assert order == played[s]
        assert order[: warmup_forwards(s, pp, micro_batches)] == [("F", i) for i in range(min(pp - s - 1, micro_batches))]
        runtime = [(type(st).__name__[0], st.micro_batch) for st in schedule.one_f_one_b(s, pp, micro_batches)]
        assert [op for op in runtime if op[0] in "FB"] == order  # the runtime's steps run the same order


@pytest.mark.parametrize(
    ("args", "message"),
    [((1, 1, 4), "stage must be"), ((0, 0, 4), "pp must"), ((0, 2, 0), "micro_batches"), ((0, True, 2), "pp must")],
)
def test_the_1f1b_order_refuses_bad_sizes(args, message):
    with pytest.raises(ValueError, match=message):
        one_f_one_b_order(*args)


# ---------------------------------------------------------------- Newton-Schulz FLOPs


@pytest.mark.parametrize("shape", [(16, 64), (64, 16), (32, 32), (1, 8), (3, 24, 40), (2, 2, 40, 24)])
@pytest.mark.parametrize("steps", [0, 1, 5])
def test_newton_schulz_flops_are_what_torch_counts_in_the_implementation(shape, steps):
    with FlopCounterMode(display=False) as counter:
        zeropower_via_newtonschulz5(torch.randn(shape), steps, dtype=torch.float32)
    assert newton_schulz_flops(shape, steps) == counter.get_total_flops()


@pytest.mark.parametrize("qkv", ["fused", "split"])
def test_a_models_newton_schulz_flops_sum_its_muon_matrices(qkv):
    model = GPTConfig.preset("tiny", qkv=qkv)
    shapes = muon_matrix_shapes(model)
    assert len(shapes) == (4 if qkv == "fused" else 6) * model.n_layers
    assert sum(a * b for a, b in shapes) == model.n_layers * (4 * model.hidden**2 + 2 * model.hidden * model.ffn_hidden)
    assert newton_schulz_flops_total(model) == sum(newton_schulz_flops(s, 5) for s in shapes)
