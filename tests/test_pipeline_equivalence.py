"""DP x TP x PP: the grid, the stage split, the 1F1B schedule, and training equal to one device.

Fast tests check the pieces on one process; the slow ones train the tiny GPT on PP2·DP2, PP2·TP2, PP4
and DP2·TP2·PP2 (gloo, one launch per world size) with both optimizers in every ZeRO-1 layout and
compare with :func:`pipeline_workers.reference_training`.

The bound (fp32, per tensor, ``max |a - b| / max |b|``):

* ``tp == 1``: **bit for bit** (:data:`BIT_EXACT`). The stage split runs the same ops on the same
  values, the point-to-point transfers copy bits, every stage accumulates its micro-batches in the same
  order as the reference, and the DP average is a sum of two (the same in any order) then ``/ dp``;
  the optimizers are the reference's arithmetic (``tests/test_distributed_optim.py``).
* ``tp > 1``: TP sums each sharded matmul's partial products and all-reduces them, another reduction
  order than one matmul, so parameters differ at rounding level, magnified by AdamW's division by
  ``sqrt(v) + eps`` (:data:`TP_RTOL`, :data:`TP_RTOL_MUON_MATRICES`). That the pipeline adds nothing to
  it is checked bit for bit against the same DP x TP grid without PP (:data:`PP1_TWIN`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from pipeline_workers import (
    CONFIG,
    MICRO_BATCHES,
    STEPS,
    PipelineCase,
    reference_training,
    replica_batch,
    replica_ordered_gradients,
    train_cases,
)

from muon_repro.formulas import warmup_forwards
from muon_repro.model import GPT
from muon_repro.model_stages import GPTStage, stage_layers, stage_of_parameter, tied_parameter_names
from muon_repro.optim.equivalence import END_TO_END_RTOL_ADAMW, END_TO_END_RTOL_FP32, tensor_differences
from muon_repro.optim.layout import LAYOUTS
from muon_repro.optim.param_groups import muon_param_groups
from muon_repro.optim.pipeline_stage import stage_optimizer
from muon_repro.parallel import grid3d, schedule
from muon_repro.parallel.comm import Group
from muon_repro.parallel.grid3d import coordinates_of, group_ranks, rank_of
from muon_repro.parallel.launch import launch
from muon_repro.parallel.mesh import ParallelDims
from muon_repro.parallel.pipeline_runner import fused_sends, run_pipeline, split_micro_batches, train_step
from muon_repro.parallel.schedule import Backward, Forward, RecvActivation, RecvGrad, SendActivation, SendGrad

BIT_EXACT = 0.0
# tp > 1, Muon-routed matrices: END_TO_END_RTOL_FP32 = 1e-4; measured <= 3.3e-5 over the 3 steps (PP2·TP2,
# blocks.3.attn.qkv.weight), <= 3.9e-6 on DP2·TP2·PP2.
TP_RTOL_MUON_MATRICES = END_TO_END_RTOL_FP32
# tp > 1, every tensor (AdamW's, and Muon's AdamW-routed embedding, head and norms): END_TO_END_RTOL_ADAMW = 2e-3;
# measured <= 1.02e-3 (PP2·TP2, AdamW, blocks.0.attn.proj.weight) and <= 2.9e-4 (PP2·TP2, Muon, embed.weight).
TP_RTOL = END_TO_END_RTOL_ADAMW

ISSUE_GRIDS = [(2, 1, 2), (1, 2, 2), (1, 1, 4), (2, 2, 2)]  # (dp, tp, pp): PP2·DP2, PP2·TP2, PP4, DP2·TP2·PP2
PP1_TWIN = {(1, 2, 2): (1, 2, 1), (2, 2, 2): (2, 2, 1)}  # the same DP x TP without pipeline, where TP rounds
OPTIMIZERS = ("muon", "adamw")
CASES = [
    PipelineCase(dp, tp, pp, optimizer, layout)
    for dp, tp, pp in ISSUE_GRIDS + list(PP1_TWIN.values())
    for optimizer in OPTIMIZERS
    for layout in LAYOUTS
]
ISSUE_CASES = [c for c in CASES if (c.dp, c.tp, c.pp) in ISSUE_GRIDS]


def case_id(case: PipelineCase) -> str:
    return f"{case.optimizer}-dp{case.dp}-tp{case.tp}-pp{case.pp}-{case.layout}"


# ---------------------------------------------------------------- the schedule


def _route(step: schedule.Step, s: int) -> tuple[str, int, int] | None:
    """The channel (kind, sender, receiver) a transfer of stage ``s`` uses; None for a forward or backward."""
    return {
        RecvActivation: ("activation", s - 1, s),
        RecvGrad: ("grad", s + 1, s),
        SendActivation: ("activation", s, s + 1),
        SendGrad: ("grad", s, s - 1),
    }.get(type(step))


def simulate(schedules: list[list[schedule.Step]], rendezvous: bool = False, fused: list[frozenset[int]] | None = None) -> dict:
    """Run every stage's list as the runner posts it; messages on a channel match in order.

    A stage posts its steps in list order, one at a time, or a send together with the receive after it where
    ``fused`` (per stage, the send indices :func:`fused_sends` gives) says so, and moves past a post once each
    receive in it has the neighbour's matching send posted. Sends never hold a stage up (gloo), unless
    ``rendezvous``: then a send also waits for the neighbour to have posted the matching receive (NCCL, once a
    message outgrows its buffers; a rank's transfers run in issue order). Returns the stages left stuck,
    receives that got another micro-batch, and messages never received."""
    fused = fused if fused is not None else [frozenset()] * len(schedules)
    posts: list[list[list[schedule.Step]]] = []  # each stage's list cut into what it posts at once
    for steps, pairs in zip(schedules, fused):
        cut, k = [], 0
        while k < len(steps):
            size = 2 if k in pairs else 1
            cut.append(steps[k : k + size])
            k += size
        posts.append(cut)
    sent: dict[tuple[str, int, int], list[int]] = defaultdict(list)  # the micro-batches posted on a channel, in order
    receives_posted: dict[tuple[str, int, int], int] = defaultdict(int)
    position, mismatched, progress = [0] * len(schedules), [], True
    pending: list[list | None] = [None] * len(schedules)  # the current post's transfers: (step, channel, ordinal)
    while progress:
        progress = False
        for s, stage_posts in enumerate(posts):
            while position[s] < len(stage_posts):
                if pending[s] is None:  # post: the neighbours can match these from now on
                    pending[s] = []
                    for step in stage_posts[position[s]]:
                        route = _route(step, s)
                        if isinstance(step, (RecvActivation, RecvGrad)):
                            pending[s].append((step, route, receives_posted[route]))
                            receives_posted[route] += 1
                        elif route is not None:
                            pending[s].append((step, route, len(sent[route])))
                            sent[route].append(step.micro_batch)
                    progress = True
                met = [
                    len(sent[route]) > n
                    if isinstance(step, (RecvActivation, RecvGrad))
                    else not rendezvous or receives_posted[route] > n
                    for step, route, n in pending[s]
                ]
                if not all(met):
                    break
                for step, route, n in pending[s]:
                    if isinstance(step, (RecvActivation, RecvGrad)) and sent[route][n] != step.micro_batch:
                        mismatched.append((s, str(step), sent[route][n]))
                position[s], pending[s], progress = position[s] + 1, None, True
    stuck = [s for s, stage_posts in enumerate(posts) if position[s] < len(stage_posts)]
    unreceived = {route: mbs[receives_posted[route] :] for route, mbs in sent.items() if len(mbs) > receives_posted[route]}
    return {"stuck": stuck, "mismatched": mismatched, "unreceived": unreceived}


SIZES = [(pp, m) for pp in range(1, 6) for m in range(1, 10)]


@pytest.mark.parametrize("pp, m", SIZES, ids=lambda v: str(v))
def test_every_micro_batch_is_forwarded_then_backwarded_once_per_stage(pp, m):
    for s, steps in enumerate(schedule.pipeline_schedule(pp, m)):
        forwards = [st.micro_batch for st in steps if isinstance(st, Forward)]
        backwards = [st.micro_batch for st in steps if isinstance(st, Backward)]
        assert forwards == backwards == list(range(m))  # in order: gradients accumulate in the reference's order
        for mb in range(m):
            assert steps.index(Forward(mb)) < steps.index(Backward(mb))
        assert schedule.in_flight(steps) == min(pp - s, m)  # the 1F1B bound on held activations
        assert warmup_forwards(s, pp, m) == min(pp - s - 1, m)


@pytest.mark.parametrize("pp, m", SIZES, ids=lambda v: str(v))
def test_sends_match_receives_and_the_schedule_never_deadlocks(pp, m):
    stages = schedule.pipeline_schedule(pp, m)

    def of(kind: type, steps: list) -> list[int]:
        return [st.micro_batch for st in steps if isinstance(st, kind)]

    assert of(RecvActivation, stages[0]) == of(SendGrad, stages[0]) == []
    assert of(SendActivation, stages[-1]) == of(RecvGrad, stages[-1]) == []
    for left, right in zip(stages, stages[1:]):
        assert of(SendActivation, left) == of(RecvActivation, right) == list(range(m))
        assert of(SendGrad, right) == of(RecvGrad, left) == list(range(m))
    assert simulate(stages) == {"stuck": [], "mismatched": [], "unreceived": {}}


def test_the_simulation_catches_a_deadlock_and_a_mismatch():
    """GPipe's lists run; one that waits for a gradient before sending its activation does not."""
    gpipe = [[Forward(0), SendActivation(0), RecvGrad(0), Backward(0)], [RecvActivation(0), Forward(0), Backward(0), SendGrad(0)]]
    assert simulate(gpipe)["stuck"] == []
    waits_first = [[Forward(0), RecvGrad(0), SendActivation(0), Backward(0)], gpipe[1]]
    assert simulate(waits_first)["stuck"] == [0, 1]
    swapped = [[Forward(0), SendActivation(1)], [RecvActivation(0), Forward(0)]]
    assert simulate(swapped)["mismatched"] == [(1, "RecvActivation(0)", 1)]


def test_fused_sends_pair_a_send_with_the_next_receive_from_the_same_neighbour():
    assert fused_sends(schedule.one_f_one_b(0, 2, 2)) == {3}  # F0 SA0 F1 [SA1 RG0] B0 RG1 B1
    assert fused_sends(schedule.one_f_one_b(1, 2, 2)) == {3}  # RA0 F0 B0 [SG0 RA1] F1 B1 SG1
    assert fused_sends([SendActivation(0), RecvGrad(0)]) == {0}
    assert fused_sends([SendGrad(0), RecvActivation(1)]) == {0}
    assert fused_sends([SendActivation(0), RecvActivation(1), SendGrad(0), RecvGrad(0), SendActivation(1)]) == set()
    steps = schedule.one_f_one_b(1, 4, 8)  # warm-up 2: 6 steady rounds, each [SA RG], and [SG RA] between them
    pairs = Counter((type(steps[k]).__name__, type(steps[k + 1]).__name__) for k in fused_sends(steps))
    assert pairs == {("SendActivation", "RecvGrad"): 6, ("SendGrad", "RecvActivation"): 5}


def test_with_rendezvous_sends_lone_sends_deadlock_in_steady_1f1b():
    """A send that waits for its receive: GPipe's lists still run, 1F1B's with every transfer alone do not."""
    gpipe = [[Forward(0), SendActivation(0), RecvGrad(0), Backward(0)], [RecvActivation(0), Forward(0), Backward(0), SendGrad(0)]]
    assert simulate(gpipe, rendezvous=True) == {"stuck": [], "mismatched": [], "unreceived": {}}
    stages = schedule.pipeline_schedule(2, 2)
    assert simulate(stages)["stuck"] == []
    # stage 0 waits in SendActivation(1) for stage 1's RecvActivation(1), after its SendGrad(0), which waits for
    # stage 0's RecvGrad(0), after SendActivation(1)
    assert simulate(stages, rendezvous=True) == {
        "stuck": [0, 1],
        "mismatched": [],
        "unreceived": {("activation", 0, 1): [1], ("grad", 1, 0): [0]},
    }


@pytest.mark.parametrize("pp, m", SIZES, ids=lambda v: str(v))
def test_the_runners_batches_never_deadlock_even_if_sends_wait_for_their_receive(pp, m):
    stages = schedule.pipeline_schedule(pp, m)
    fused = [fused_sends(steps) for steps in stages]  # what run_pipeline posts together
    assert simulate(stages, rendezvous=True, fused=fused) == {"stuck": [], "mismatched": [], "unreceived": {}}
    assert simulate(stages, fused=fused) == {"stuck": [], "mismatched": [], "unreceived": {}}
    if pp > 1 and m > 1:
        assert all(fused) and simulate(stages, rendezvous=True)["stuck"] == list(range(pp))  # alone, they would


class _FakeWork:
    """A posted batch's Work (NCCL's, one per batch) or one op's (gloo's): its wait is logged."""

    def __init__(self, log: list[tuple[str, str]], name: str) -> None:
        self.log, self.name = log, name

    def wait(self) -> None:
        self.log.append(("wait", self.name))


@pytest.mark.parametrize("coalesced", [False, True], ids=["gloo-works", "nccl-works"])
@pytest.mark.parametrize(
    "stage_index, expected",
    [
        (
            0,  # F0 SA0 F1 [SA1 RG0] B0 RG1 B1
            [("post", "isend:1"), ("post", "isend:1+irecv:1"), ("wait", "irecv:1|"), ("post", "irecv:1"), ("wait", "irecv:1")]
            + [("wait", "isend:1"), ("wait", "isend:1|")],
        ),
        (
            1,  # RA0 F0 B0 [SG0 RA1] F1 B1 SG1
            [("post", "irecv:0"), ("wait", "irecv:0"), ("post", "isend:0+irecv:0"), ("wait", "irecv:0|"), ("post", "isend:0")]
            + [("wait", "isend:0|"), ("wait", "isend:0")],
        ),
    ],
)
def test_the_runner_posts_a_fused_pair_in_one_batch_and_waits_its_receive_in_the_receive_step(
    monkeypatch, coalesced, stage_index, expected
):
    """The P2P calls of one stage of PP2 over 2 micro-batches, with the PP group faked: every transfer is a
    ``batch_isend_irecv``, the pair :func:`fused_sends` names is one, and its receive is waited for in its own step
    (before the next post), its send at the flush. ``|`` marks the fused pair's works: with NCCL's one Work per batch
    both are the batch's."""
    log: list[tuple[str, str]] = []

    def batch_isend_irecv(ops: list[SimpleNamespace]) -> list[_FakeWork]:
        names = [f"{op.op.__name__}:{op.peer}" for op in ops]
        log.append(("post", "+".join(names)))
        for op in ops:
            if op.op is dist.irecv:
                op.tensor.zero_()
        mark = "|" if len(ops) > 1 else ""
        if coalesced:
            return [_FakeWork(log, "+".join(names) + mark)]
        return [_FakeWork(log, name + mark) for name in names]

    monkeypatch.setattr(dist, "P2POp", lambda op, tensor, peer, group: SimpleNamespace(op=op, tensor=tensor, peer=peer))
    monkeypatch.setattr(dist, "batch_isend_irecv", batch_isend_irecv)
    tp = Group.single("tp")
    grid = SimpleNamespace(
        pp_rank=stage_index,
        pp=2,
        tp_group=tp,
        prev_rank=None if stage_index == 0 else 0,
        next_rank=1 if stage_index == 0 else None,
        pp_group=SimpleNamespace(process_group=None),
    )
    run_pipeline(GPTStage(CONFIG, stage_index, 2, tp), grid, *replica_batch(0, 0, 1), 2)
    if coalesced:  # one Work per batch: the pair's receive and send waits are the batch's
        pair = "isend:1+irecv:1|" if stage_index == 0 else "isend:0+irecv:0|"
        expected = [(kind, pair if name.endswith("|") else name) for kind, name in expected]
    assert log == expected


def test_schedule_rejects_bad_sizes_and_the_cli_prints_the_steps(capsys):
    for args, message in (
        ((1, 1, 4), "stage must be"),
        ((4, 4, 4), r"\[0, pp=4\)"),
        ((0, 0, 4), "pp must"),
        ((0, 2, 0), "micro_batches"),
    ):
        with pytest.raises(ValueError, match=message):
            schedule.one_f_one_b(*args)
    assert schedule.main(["--pp", "4", "--micro-batches", "8"]) == 0
    out = capsys.readouterr().out
    assert "stage 0: warm-up 3 forwards, steady 5 x (1F 1B), cool-down 3 backwards; at most 4 in flight" in out
    assert "order: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7" in out
    assert "    RecvGrad(0) Backward(0) SendGrad(0)\n" in out and "    RecvActivation(7) Forward(7)\n" in out
    with pytest.raises(SystemExit) as exit_info:
        schedule.main(["--pp", "0"])
    assert exit_info.value.code == 2 and "pp must be a positive integer, got 0" in capsys.readouterr().err


# ---------------------------------------------------------------- the grid


@pytest.mark.parametrize("dp, tp, pp", [(1, 1, 1), (2, 1, 2), (1, 2, 2), (1, 1, 4), (2, 2, 2), (3, 2, 4)])
def test_groups_partition_the_world_in_megatron_order(dp, tp, pp):
    ranks = group_ranks(dp, tp, pp)
    world = range(dp * tp * pp)
    for axis, size in (("tp", tp), ("dp", dp), ("pp", pp)):
        assert sorted(r for group in ranks[axis] for r in group) == list(world)
        assert all(len(group) == size for group in ranks[axis])
    for rank in world:
        p, d, t = coordinates_of(rank, dp, tp)
        assert rank_of(p, d, t, dp, tp) == rank
        assert rank - p * dp * tp == d * tp + t  # inside a stage: ParallelDims's layout
    assert all(group == list(range(group[0], group[0] + tp)) for group in ranks["tp"])  # TP ranks adjacent
    for group in ranks["pp"]:  # one replica's shard, stage after stage, with the same (dp, tp) coordinates
        assert [coordinates_of(r, dp, tp)[0] for r in group] == list(range(pp))
        assert len({coordinates_of(r, dp, tp)[1:] for r in group}) == 1


def test_grid_on_one_process_and_the_size_checks(capsys):
    grid = ParallelDims(1, 1, 1)
    assert (grid.is_first_stage, grid.is_last_stage, grid.prev_rank, grid.next_rank) == (True, True, None, None)
    with pytest.raises(ValueError, match=r"dp \* tp \* pp must equal the world size: .* = 4, but the world has 1"):
        ParallelDims(2, 1, 2)
    with pytest.raises(ValueError, match="ParallelDims.pp must be a positive integer, got 0"):
        ParallelDims(1, 1, 0)
    with pytest.raises(ValueError, match="ParallelDims.tp must be a positive integer, got 0"):
        group_ranks(1, 0, 1)
    assert grid3d.main(["--dp", "2", "--tp", "2", "--pp", "2"]) == 0
    assert "PP groups {0,4} {1,5} {2,6} {3,7}" in capsys.readouterr().out


# ---------------------------------------------------------------- the stages


def test_stage_layers_split_contiguously_with_the_spare_blocks_first():
    for n_layers in range(1, 13):
        for pp in range(1, n_layers + 1):
            ranges = stage_layers(n_layers, pp)
            sizes = [len(r) for r in ranges]
            assert [i for r in ranges for i in r] == list(range(n_layers))
            assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True) and min(sizes) >= 1
    with pytest.raises(ValueError, match="pp=4 stages needs at least one block per stage, but the model has n_layers=2"):
        stage_layers(2, 4)


@pytest.mark.parametrize("pp", [1, 2, 3, 4])
def test_stages_compose_into_the_gpt_bit_for_bit(pp):
    model = GPT(CONFIG, Group.single("tp"))
    stages = [GPTStage(CONFIG, s, pp, Group.single("tp")) for s in range(pp)]
    names = [sorted(n for n, _ in stage.named_parameters()) for stage in stages]
    assert sorted(n for stage_names in names for n in stage_names) == sorted(n for n, _ in model.named_parameters())
    assert "embed.weight" in names[0] and "lm_head.weight" in names[-1]
    assert all(stage_of_parameter(n, CONFIG.n_layers, pp) == s for s, stage_names in enumerate(names) for n in stage_names)
    tokens, targets = replica_batch(0, 0, 1)
    model(tokens, targets).backward()
    x, outputs, received = tokens, [], []
    for stage in stages[:-1]:  # forward, stage by stage, each input a fresh leaf as the runner receives it
        outputs.append(stage(x))
        x = outputs[-1].detach().requires_grad_(True)
        received.append(x)
    loss = stages[-1](x, targets)
    assert loss.item() == model(tokens, targets).item()
    loss.backward()
    for out, sent_back in zip(reversed(outputs), reversed(received)):  # backward, last stage to first
        torch.autograd.backward(out, grad_tensors=sent_back.grad)
    full = dict(model.named_parameters())
    for stage in stages:
        for name, param in stage.named_parameters():
            assert torch.equal(param.grad, full[name].grad), name


def test_the_gpt_ties_no_parameters_and_a_tie_would_be_found():
    assert tied_parameter_names(GPT(CONFIG, Group.single("tp"))) == []
    tied = torch.nn.ModuleDict({"embed": torch.nn.Embedding(8, 4), "lm_head": torch.nn.Linear(4, 8, bias=False)})
    tied["lm_head"].weight = tied["embed"].weight
    assert tied_parameter_names(tied) == [("embed.weight", "lm_head.weight")]


# ---------------------------------------------------------------- one process


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_one_process_trains_as_the_reference_bit_for_bit(optimizer):
    grid = ParallelDims(1, 1, 1)
    stage = GPTStage(CONFIG, 0, 1, grid.tp_group)
    opt = stage_optimizer(stage, grid, optimizer, **PipelineCase(1, 1, 1, optimizer).hyperparameters())
    reference = reference_training(optimizer, 1)
    for step in range(STEPS):
        loss = train_step(stage, grid, opt, *replica_batch(step, 0, 1), MICRO_BATCHES)
        assert loss.item() == reference["losses"][step][0]
        assert tensor_differences(dict(stage.named_parameters()), reference["params"][step])["max_abs"] == 0.0


def test_the_reduction_order_matters_so_the_reference_follows_the_grid():
    """Accumulating all 2M micro-batches in one running sum is the same gradient in exact arithmetic but not in fp32."""
    model = GPT(CONFIG, Group.single("tp"))
    ordered, _ = replica_ordered_gradients(model, 0, 2)
    for d in range(2):
        tokens, targets = replica_batch(0, d, 2)
        for tok, tgt in zip(split_micro_batches(tokens, MICRO_BATCHES), split_micro_batches(targets, MICRO_BATCHES)):
            (model(tok, tgt) / (2 * MICRO_BATCHES)).backward()
    running = {n: p.grad for n, p in model.named_parameters()}
    assert 0 < tensor_differences(running, ordered)["max_rel"] < 1e-5


def test_runner_and_optimizer_reject_what_does_not_fit():
    grid = ParallelDims(1, 1, 1)
    stage = GPTStage(CONFIG, 0, 1, grid.tp_group)
    tokens, targets = replica_batch(0, 0, 1)
    with pytest.raises(ValueError, match="a batch of 12 sequences does not split into 5 equal micro-batches"):
        run_pipeline(stage, grid, tokens, targets, 5)
    with pytest.raises(ValueError, match="this rank is stage 0 of 1, but the model is stage 1 of 2"):
        run_pipeline(GPTStage(CONFIG, 1, 2, grid.tp_group), grid, tokens, targets, 2)
    with pytest.raises(ValueError, match="unknown optimizer 'sgd'; choose one of muon, adamw"):
        stage_optimizer(stage, grid, "sgd")
    with pytest.raises(ValueError, match="forwarded but not backwarded"):
        run_pipeline(stage, grid, tokens, targets, 2, steps=[Forward(0)])


# ---------------------------------------------------------------- many processes (gloo)


@pytest.fixture(scope="module")
def results() -> dict[PipelineCase, dict]:
    by_world: dict[int, list[PipelineCase]] = {}
    for case in CASES:
        by_world.setdefault(case.world, []).append(case)
    out = {}
    for world, cases in by_world.items():
        out.update(zip(cases, launch(train_cases, world, cases)[0]))
    return out


@pytest.fixture(scope="module")
def references() -> dict[tuple[str, int], dict]:
    return {(optimizer, dp): reference_training(optimizer, dp) for optimizer in OPTIMIZERS for dp in (1, 2)}


@pytest.mark.slow
@pytest.mark.parametrize("case", ISSUE_CASES, ids=case_id)
def test_pipeline_training_equals_single_device(results, references, case):
    result, reference = results[case], references[(case.optimizer, case.dp)]
    muon_matrices = {n for g in muon_param_groups(GPT(CONFIG, Group.single("tp"))) if g["use_muon"] for n in g["names"]}
    assert len(result["params"]) == STEPS
    for step in range(STEPS):
        assert result["replica_gaps"][step] == 0.0  # every DP replica of every stage holds the same parameters
        diff = tensor_differences(result["params"][step], reference["params"][step])
        if case.tp == 1:
            assert diff["max_abs"] == BIT_EXACT, (step, diff["worst_tensor"], diff["max_rel"])
            assert result["losses"][step] == reference["losses"][step]
        else:
            assert 0 < diff["max_rel"] <= TP_RTOL, (step, diff["worst_tensor"], diff["max_rel"])
            if case.optimizer == "muon":
                assert max(diff["rel_by_tensor"][n] for n in muon_matrices) <= TP_RTOL_MUON_MATRICES


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in ISSUE_CASES if (c.dp, c.tp, c.pp) in PP1_TWIN], ids=case_id)
def test_the_pipeline_adds_no_rounding_to_tensor_parallel(results, case):
    dp, tp, pp = PP1_TWIN[(case.dp, case.tp, case.pp)]
    twin = results[PipelineCase(dp, tp, pp, case.optimizer, case.layout)]
    for step in range(STEPS):
        assert tensor_differences(results[case]["params"][step], twin["params"][step])["max_abs"] == 0.0
        assert results[case]["losses"][step] == twin["losses"][step]


@pytest.mark.slow
@pytest.mark.parametrize("case", ISSUE_CASES, ids=case_id)
def test_each_stage_shards_its_own_parameters_over_its_own_dp_group(results, case):
    ranks = results[case]["ranks"]
    assert len(ranks) == case.world
    by_stage: dict[int, set[str]] = defaultdict(set)
    for rank in ranks:
        assert rank["ledger_bytes"] == rank["analytic_bytes"], rank  # the stage's parameters, the stage's dp
        assert {coordinates_of(r, case.dp, case.tp)[0] for r in rank["dp_group"]} == {rank["pp_rank"]}
        assert len(rank["dp_group"]) == case.dp
        by_stage[rank["pp_rank"]] |= set(rank["param_names"])
    all_names = sorted(n for names in by_stage.values() for n in names)
    assert all_names == sorted(n for n, _ in GPT(CONFIG, Group.single("tp")).named_parameters())  # each on one stage
    if case.dp > 1 and case.layout == "contiguous":
        assert all(rank["ledger_bytes"]["dp_reduce_scatter"] > 0 for rank in ranks)
