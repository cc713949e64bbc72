"""Behaviour of the optimizer modules that hand-made mutants showed no other fast test pinning.

Each test derives its expected value independently (hand arithmetic, a plain reference written here, the SVD's
polar factor) and names the documented behaviour it holds the module to.
"""

from __future__ import annotations

import pytest
import torch

from muon_repro.optim.layout import DEFAULT_BUCKET_ELEMS, LAYOUTS, ParamSpec, ShardPlan
from muon_repro.parallel import ParallelDims


def _spec(name: str, shape: tuple[int, ...], use_muon: bool = True, tp_dim: int | None = None, tp: int = 1) -> ParamSpec:
    return ParamSpec(name, shape, tp_dim, tp, use_muon)


# Odd sizes, so that no bucket fills a multiple of dp by chance.
MIXED = [
    _spec("emb", (7, 3), use_muon=False),
    _spec("w1", (5, 4)),
    _spec("norm", (5,), use_muon=False),
    _spec("w2", (4, 6)),
    _spec("w3", (3, 3)),
    _spec("head", (7, 3), use_muon=False),
]


# ---------------------------------------------------------------- layout


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dp", [1, 2, 3, 4])
def test_every_parameter_is_tiled_by_its_pieces_inside_its_ranks_shards(layout: str, dp: int) -> None:
    """Each bucket is padded to a multiple of dp and holds its members whole; the pieces of a parameter cover it
    exactly once, in order, each inside the shard of the rank holding it."""
    kwargs = {"bucket_elems": 20} if layout == "bucketed" else {}
    plan = ShardPlan(MIXED, dp, layout, **kwargs)
    cursor = 0
    for b, bucket in enumerate(plan.buckets):
        assert bucket.start == cursor and bucket.size % dp == 0
        members = [s for s in plan.slots if s.bucket == b]
        assert bucket.size >= sum(s.spec.numel for s in members)
        cursor += bucket.size
    assert plan.total == cursor
    for slot in plan.slots:
        bucket = plan.buckets[slot.bucket]
        assert bucket.start <= slot.flat_start and slot.flat_start + slot.spec.numel <= bucket.start + bucket.size
        covered = 0
        for piece in slot.pieces:
            assert piece.param_start == covered and piece.flat_start == slot.flat_start + covered and piece.length > 0
            lo = bucket.shard_start(piece.dp_rank)
            assert lo <= piece.flat_start and piece.flat_start + piece.length <= lo + bucket.shard_size
            covered += piece.length
        assert covered == slot.spec.numel


def test_whole_matrix_balances_the_adamw_tensors_by_size_largest_first() -> None:
    """The rest (non-Muon) are placed largest first on the emptiest owner: sizes 2, 1, 1 over two ranks give 2 and
    2 (smallest first would give 3 and 1)."""
    specs = [_spec("a", (1,), False), _spec("b", (1,), False), _spec("c", (2,), False)]
    plan = ShardPlan(specs, 2, "whole_matrix")
    held = [sum(p.length for _, p in plan.pieces_of(r)) for r in range(2)]
    assert held == [2, 2]
    # c, the largest, goes first, to rank 0: of owners equally loaded the plan takes the lowest DP rank
    assert plan.slots[2].holders == (0,)


def test_whole_matrix_hands_equal_matrices_out_in_buffer_order() -> None:
    """Equal-FLOP Muon matrices: ties go to the parameter earlier in buffer order (the model's last), so four equal
    matrices in model order a, b, c, d go d -> rank 0, c -> rank 1, b -> rank 0, a -> rank 1 (of ranks tied on FLOPs
    and elements, the lowest)."""
    plan = ShardPlan([_spec(n, (4, 4)) for n in "abcd"], 2, "whole_matrix")
    assert [s.holders for s in plan.slots] == [(1,), (0,), (1,), (0,)]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_cap_below_every_matrix_gives_one_unit_per_matrix_and_no_empty_unit(layout: str) -> None:
    """A matrix larger than ``ns_unit_elems`` is a unit of its own; no unit is empty."""
    plan = ShardPlan(MIXED, 2, layout, ns_unit_elems=1)
    assert all(unit.slots for unit in plan.ns_units)
    per_rank = [[i for u in plan.ns_units for i in plan.ns_slots(u, r)] for r in range(2)]
    for r in range(2):  # every rank orthogonalizes each of its matrices once, one per unit
        assert sorted(per_rank[r]) == sorted(set(per_rank[r]))
    if layout == "bucketed":
        assert len(plan.ns_units) == 3  # three matrices, one unit each


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_unit_lists_its_matrices_in_buffer_order(layout: str) -> None:
    specs = [_spec(f"w{i}", (3 + i, 4)) for i in range(6)]
    kwargs = {"bucket_elems": 30} if layout == "bucketed" else {}
    for cap in (None, 20, 40):
        plan = ShardPlan(specs, 2, layout, ns_unit_elems=cap, **kwargs)
        for unit in plan.ns_units:
            assert list(unit.slots) == sorted(unit.slots, reverse=True)  # buffer order is reverse model order


def test_a_gathered_units_send_buffer_is_its_largest_ranks_total() -> None:
    """``send_elems`` is the largest of the ranks' totals, and each rank's pieces sit back to back in its buffer."""
    plan = ShardPlan([_spec("a", (3, 5)), _spec("b", (4, 4)), _spec("c", (2, 3))], 3, "bucketed")
    (unit,) = plan.ns_units
    totals = {r: 0 for r in range(3)}
    for i in unit.slots:  # in unit order, as the send buffer is filled
        for piece in plan.slots[i].pieces:
            assert unit.send_offsets[i][piece.dp_rank] == totals[piece.dp_rank]
            totals[piece.dp_rank] += piece.length
    assert sum(totals.values()) == 15 + 16 + 6 and len(set(totals.values())) > 1
    assert unit.send_elems == max(totals.values())


def test_contiguous_gathers_only_the_straddling_matrix_and_each_holder_orthogonalizes_it() -> None:
    """Buffer (reverse model order): c [0, 6), b [6, 22), a [22, 38); two shards of 19: b straddles the boundary."""
    plan = ShardPlan([_spec("a", (4, 4)), _spec("b", (4, 4)), _spec("c", (2, 3))], 2, "contiguous")
    assert [s.holders for s in plan.slots] == [(1,), (0, 1), (0,)]
    held = [u for u in plan.ns_units if not u.dp_gathered]
    gathered = [u for u in plan.ns_units if u.dp_gathered]
    assert [u.slots for u in held] == [(2, 0)]  # buffer order
    assert [u.slots for u in gathered] == [(1,)]
    assert not gathered[0].everyone_orthogonalizes
    assert [plan.ns_slots(gathered[0], r) for r in range(2)] == [(1,), (1,)]
    assert [plan.ns_slots(held[0], r) for r in range(2)] == [(2,), (0,)]


def test_a_plan_without_parameters_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one parameter"):
        ShardPlan([], 2)


def test_the_bucketed_default_is_megatrons_40m_elements() -> None:
    """docs/method.md: ``bucket_elems`` defaults to 40,000,000 (Megatron's DDP bucket); other layouts record none."""
    assert DEFAULT_BUCKET_ELEMS == 40_000_000
    assert ShardPlan(MIXED, 2, "bucketed").bucket_elems == 40_000_000
    assert ShardPlan(MIXED, 2, "contiguous").bucket_elems is None


# ---------------------------------------------------------------- zero1 (one rank: ParallelDims(1, 1))


def _adamw(groups: list[dict], **kwargs):
    from muon_repro.optim.distributed import DistributedAdamW

    return DistributedAdamW(groups, ParallelDims(1, 1), **kwargs)


@pytest.mark.parametrize(
    ("group", "message"),
    [
        ({"names": ["only"]}, r"param_groups\[0\] has 2 params but 1 names"),
        ({"model_indices": [0]}, r"param_groups\[0\] has 2 params but 1 model_indices"),
        ({"model_indices": [0, -1]}, "model_indices must be distinct non-negative integers"),
        ({"model_indices": [0, 1.5]}, "model_indices must be distinct non-negative integers"),
    ],
)
def test_a_zero1_optimizer_refuses_inconsistent_names_and_model_indices(group: dict, message: str) -> None:
    params = [torch.nn.Parameter(torch.zeros(2, 2)), torch.nn.Parameter(torch.zeros(3))]
    with pytest.raises(ValueError, match=message):
        _adamw([{"params": params, **group}])


def test_a_zero1_optimizer_refuses_parameters_that_are_not_fp32() -> None:
    with pytest.raises(ValueError, match="is torch.float16; the ZeRO-1 optimizers keep fp32 parameters"):
        _adamw([torch.nn.Parameter(torch.zeros(4, dtype=torch.float16))])


def test_a_gradient_of_another_shape_is_refused_by_name() -> None:
    w = torch.nn.Parameter(torch.zeros(2, 3))
    opt = _adamw([{"params": [w], "names": ["w"]}])
    w.grad = torch.zeros(2, 3)
    w.grad.data = torch.zeros(3, 2)  # torch checks the shape on assignment to .grad, not to .grad.data
    with pytest.raises(ValueError, match=r"gradient of 'w' has shape \(3, 2\), expected \(2, 3\)"):
        opt.step()


def test_shard_elems_by_rule_splits_one_ranks_shard_by_update_rule() -> None:
    from muon_repro.optim.distributed import DistributedMuon

    w, b = torch.nn.Parameter(torch.zeros(4, 6)), torch.nn.Parameter(torch.zeros(5))
    opt = DistributedMuon([{"params": [w], "use_muon": True}, {"params": [b], "use_muon": False}], ParallelDims(1, 1))
    assert opt.shard_elems_by_rule() == {"muon": 24, "adamw": 5}


def _saved(params: list[torch.nn.Parameter], **kwargs) -> dict:
    opt = _adamw([{"params": params, "names": [f"p{i}" for i in range(len(params))]}], **kwargs)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    return opt.state_dict()


def test_a_checkpoint_without_its_zero1_entry_is_refused() -> None:
    saved = _saved([torch.nn.Parameter(torch.zeros(4))])
    del saved["zero1"]
    with pytest.raises(ValueError, match="has no 'zero1' entry"):
        _adamw([{"params": [torch.nn.Parameter(torch.zeros(4))], "names": ["p0"]}]).load_state_dict(saved)


def test_a_checkpoint_of_another_layout_is_refused() -> None:
    saved = _saved([torch.nn.Parameter(torch.zeros(4))], layout="whole_matrix")
    opt = _adamw([{"params": [torch.nn.Parameter(torch.zeros(4))], "names": ["p0"]}], layout="contiguous")
    with pytest.raises(ValueError, match="saved with layout='whole_matrix', this optimizer has layout='contiguous'"):
        opt.load_state_dict(saved)


def test_a_checkpoint_of_other_parameters_is_refused() -> None:
    """Same element count, other shape: the flat buffer would load, with every value in the wrong place."""
    saved = _saved([torch.nn.Parameter(torch.zeros(2, 4))])
    with pytest.raises(ValueError, match=r"parameter 0 is \['p0', \[2, 4\], False\], but this model has"):
        _adamw([{"params": [torch.nn.Parameter(torch.zeros(4, 2))], "names": ["p0"]}]).load_state_dict(saved)
    saved = _saved([torch.nn.Parameter(torch.zeros(4)), torch.nn.Parameter(torch.zeros(3))])
    with pytest.raises(ValueError, match="holds 2 parameters, this model 1"):
        _adamw([{"params": [torch.nn.Parameter(torch.zeros(4))], "names": ["p0"]}]).load_state_dict(saved)


# ---------------------------------------------------------------- update_rules


@pytest.mark.parametrize("many", [False, True])
def test_an_unknown_momentum_form_is_refused(many: bool) -> None:
    from muon_repro.optim.update_rules import muon_momentum_, muon_momentum_many_

    buf, grad = torch.zeros(2, 2), torch.ones(2, 2)
    with pytest.raises(ValueError, match="momentum_form must be 'sum' or 'ema', got 'nesterov'"):
        if many:
            muon_momentum_many_([buf], [grad], 0.9, True, "nesterov")  # type: ignore[arg-type]
        else:
            muon_momentum_(buf, grad, 0.9, True, "nesterov")  # type: ignore[arg-type]


# ---------------------------------------------------------------- newton_schulz


def _quintic_chain(X: torch.Tensor, steps: int) -> torch.Tensor:
    """The documented chain, written out: ``A = X X^T``, ``B = b A + c A A``, ``X = a X + B X``, each in one BLAS call."""
    from muon_repro.optim.newton_schulz import NS_COEFFICIENTS

    a, b, c = NS_COEFFICIENTS
    for _ in range(steps):
        A = torch.mm(X, X.mT)
        B = torch.addmm(A, A, A, beta=b, alpha=c)
        X = torch.addmm(X, B, X, beta=a)
    return X


def test_only_tall_matrices_are_transposed() -> None:
    """A square matrix runs as it is (rows <= columns already), a tall one as its transpose: the bits say which."""
    from muon_repro.optim.newton_schulz import NS_EPS, orthogonalize

    gen = torch.Generator().manual_seed(0)
    square, tall = torch.randn(6, 6, generator=gen), torch.randn(7, 4, generator=gen)
    assert torch.equal(orthogonalize(square), _quintic_chain(square / (square.norm() + NS_EPS), 5))
    t = tall.mT.contiguous()
    assert torch.equal(orthogonalize(tall), _quintic_chain(t / (t.norm() + NS_EPS), 5).mT)


@pytest.mark.parametrize("method", ["quintic", "polar_express", "gram"])
def test_a_zero_matrix_orthogonalizes_to_zeros_not_nan(method: str) -> None:
    """The norm's epsilon: a zero gradient (a dead unit, the first step of a frozen-then-thawed layer) gives a zero
    update."""
    from muon_repro.optim.newton_schulz import orthogonalize, orthogonalize_many

    assert torch.equal(orthogonalize(torch.zeros(3, 5), method=method), torch.zeros(3, 5))
    updates, rms = orthogonalize_many([torch.zeros(4, 2)], method=method)
    assert torch.equal(updates[0], torch.zeros(4, 2)) and rms[0].item() == 0.0


def test_one_polar_express_step_scales_the_norm_by_the_safety_factor() -> None:
    """Step 1 of Polar Express by hand in float64: ``X = G / (1.01 ||G|| + eps)``, then ``a X + b X X^T X + c (X X^T)^2 X``
    with the first polynomial's raw coefficients divided by 1.01, 1.01^3, 1.01^5."""
    from muon_repro.optim.newton_schulz import NS_EPS, orthogonalize

    G = torch.randn(3, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    a, b, c = 8.28721201814563 / 1.01, -23.595886519098837 / 1.01**3, 17.300387312530933 / 1.01**5
    X = G / (1.01 * torch.linalg.matrix_norm(G) + NS_EPS)
    A = X @ X.T
    want = a * X + b * A @ X + c * A @ A @ X
    got = orthogonalize(G, steps=1, dtype=torch.float64, method="polar_express")
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_negative_steps_are_refused() -> None:
    from muon_repro.optim.newton_schulz import orthogonalize

    with pytest.raises(ValueError, match="Newton-Schulz steps must be >= 0, got -1"):
        orthogonalize(torch.ones(2, 3), steps=-1)


def test_orthogonalize_many_refuses_a_vector_by_position() -> None:
    from muon_repro.optim.newton_schulz import orthogonalize_many

    with pytest.raises(ValueError, match=r"orthogonalize_many takes matrices, got shape \(3,\) at position 1"):
        orthogonalize_many([torch.ones(2, 3), torch.ones(3)])


# ---------------------------------------------------------------- muon


def test_muon_runs_the_groups_ns_steps() -> None:
    """momentum 0, no weight decay, a square matrix (keller scale 1): one step is ``W - lr * NS_k(G)``, with
    ``k = ns_steps`` quintic steps, here 1 and 2, against the chain written out."""
    from muon_repro.optim import Muon
    from muon_repro.optim.newton_schulz import NS_EPS

    G = torch.randn(4, 4, generator=torch.Generator().manual_seed(2))
    for steps in (1, 2):
        w = torch.nn.Parameter(torch.zeros(4, 4))
        opt = Muon([w], lr=0.5, weight_decay=0.0, momentum=0.0, nesterov=False, ns_steps=steps, update_scale="keller")
        w.grad = G.clone()
        opt.step()
        torch.testing.assert_close(w.detach(), -0.5 * _quintic_chain(G / (G.norm() + NS_EPS), steps))


def test_muon_steps_only_the_parameters_with_a_gradient() -> None:
    """torch.optim's rule: a parameter whose ``.grad`` is None is left alone, weight decay included, and gets no state."""
    from muon_repro.optim import Muon

    stepped, idle = torch.nn.Parameter(torch.ones(3, 4)), torch.nn.Parameter(torch.ones(3, 4))
    bias = torch.nn.Parameter(torch.ones(4))
    opt = Muon([{"params": [stepped, idle], "use_muon": True}, {"params": [bias], "use_muon": False}], lr=0.1)
    stepped.grad = torch.randn(3, 4, generator=torch.Generator().manual_seed(3))
    opt.step()
    assert not torch.equal(stepped.detach(), torch.ones(3, 4))
    assert torch.equal(idle.detach(), torch.ones(3, 4)) and torch.equal(bias.detach(), torch.ones(4))
    assert idle not in opt.state and bias not in opt.state


def test_muon_step_evaluates_its_closure_with_grad_enabled() -> None:
    """``step(closure)`` re-evaluates the loss with autograd on, though the step itself runs under no_grad."""
    from muon_repro.optim import Muon

    w = torch.nn.Parameter(torch.ones(2, 3))
    opt = Muon([w], lr=0.1)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = (w**2).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == 6.0
    torch.testing.assert_close(w.grad, 2 * torch.ones(2, 3))


def test_muon_keeps_adamw_betas_as_a_tuple() -> None:
    """Given as a list, the betas are stored as a tuple, as torch's AdamW keeps them (the ZeRO-1 ranks compare
    their groups by repr, where a list and a tuple differ)."""
    from muon_repro.optim import Muon

    opt = Muon([torch.nn.Parameter(torch.ones(2, 2))], adamw_betas=[0.9, 0.95])  # type: ignore[arg-type]
    assert opt.defaults["adamw_betas"] == (0.9, 0.95) and isinstance(opt.param_groups[0]["adamw_betas"], tuple)


# ---------------------------------------------------------------- param_groups


def _named(*specs: tuple[str, tuple[int, ...]]) -> list[tuple[str, torch.nn.Parameter]]:
    return [(name, torch.nn.Parameter(torch.zeros(shape))) for name, shape in specs]


def test_embeddings_and_heads_go_to_adamw_by_every_documented_pattern() -> None:
    """``*embed*``, ``*lm_head*``, ``*wte*``, ``*wpe*`` (GPT-2's token and position tables) route matrices to AdamW."""
    from muon_repro.optim.param_groups import split_muon_params

    named = _named(
        ("transformer.wte.weight", (8, 4)),
        ("transformer.wpe.weight", (6, 4)),
        ("tok_embeddings.weight", (8, 4)),
        ("lm_head.weight", (8, 4)),
        ("h.0.attn.c_attn.weight", (4, 12)),
        ("h.0.ln_1.weight", (4,)),
    )
    muon, adamw = split_muon_params(named)
    assert [n for n, _ in muon] == ["h.0.attn.c_attn.weight"]
    assert [n for n, _ in adamw] == [n for n, _ in named if n != "h.0.attn.c_attn.weight"]


def test_name_patterns_match_case_sensitively() -> None:
    """fnmatch patterns as on POSIX: ``*embed*`` does not route ``Embedding``; an override must match the case."""
    from muon_repro.optim.param_groups import split_muon_params

    named = _named(("Embedding.weight", (8, 4)), ("blocks.0.w", (4, 4)))
    muon, adamw = split_muon_params(named, adamw_names=["Blocks.*"])
    assert [n for n, _ in muon] == ["Embedding.weight", "blocks.0.w"] and adamw == []


def test_parameters_that_do_not_require_grad_are_left_out() -> None:
    from muon_repro.optim.param_groups import split_muon_params

    named = _named(("frozen.w", (4, 4)), ("frozen.b", (4,)), ("w", (4, 4)), ("b", (4,)))
    for _, p in named[:2]:
        p.requires_grad_(False)
    muon, adamw = split_muon_params(named)
    assert [n for n, _ in muon] == ["w"] and [n for n, _ in adamw] == ["b"]


def test_a_name_in_both_override_lists_is_refused() -> None:
    from muon_repro.optim.param_groups import split_muon_params

    with pytest.raises(ValueError, match="parameter 'w' is named in both muon_names and adamw_names"):
        split_muon_params(_named(("w", (4, 4))), muon_names=["w"], adamw_names=["*"])


def test_model_indices_count_every_parameter_frozen_ones_included() -> None:
    """``model_indices`` are indices in ``model.named_parameters()``, frozen parameters counted though left out."""
    from muon_repro.optim import muon_param_groups

    model = torch.nn.Module()
    model.frozen = torch.nn.Parameter(torch.zeros(4, 4), requires_grad=False)
    model.w = torch.nn.Parameter(torch.zeros(4, 4))
    model.b = torch.nn.Parameter(torch.zeros(4))
    groups = muon_param_groups(model)
    assert [(g["names"], g["model_indices"]) for g in groups] == [(["w"], [1]), (["b"], [2])]


# ---------------------------------------------------------------- hyperparameters


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("nesterov", 1, "nesterov must be True or False, got 1"),
        ("ns_steps", True, "ns_steps must be an integer >= 0, got True"),
    ],
)
def test_a_flag_or_count_of_the_wrong_type_is_refused(key: str, value: object, message: str) -> None:
    """``nesterov`` is a bool, not a truthy number; ``ns_steps`` an integer, not a bool (``True`` is an int)."""
    from muon_repro.optim.hyperparameters import MOONLIGHT_ADAMW_KEYS, check_group

    with pytest.raises(ValueError, match=f"param_groups\\[0\\]: {message}"):
        check_group({key: value}, MOONLIGHT_ADAMW_KEYS, "param_groups[0]")


def test_renaming_moonlights_adamw_keys_keeps_torchs_where_the_group_has_them() -> None:
    from muon_repro.optim.hyperparameters import rename_torch_adamw_keys

    old = {"adamw_betas": (0.8, 0.9), "adamw_eps": 1e-6}
    both = {"betas": (0.9, 0.95), "adamw_betas": (0.8, 0.9)}
    rename_torch_adamw_keys([old, both])
    assert old == {"betas": (0.8, 0.9), "eps": 1e-6}
    assert both["betas"] == (0.9, 0.95)


# ---------------------------------------------------------------- comm_model


def test_param_specs_leave_frozen_parameters_out_and_mark_all_adamw_for_adamw() -> None:
    from muon_repro.optim.comm_model import param_specs

    named = _named(("frozen", (4, 4)), ("w", (4, 4)), ("b", (4,)))
    named[0][1].requires_grad_(False)
    assert [(s.name, s.use_muon) for s in param_specs(named, 1)] == [("w", True), ("b", False)]
    assert [s.use_muon for s in param_specs(named, 1, muon=False)] == [False, False]


def test_state_comparison_by_hand() -> None:
    """w (4x4, Muon) and b (8, AdamW) over dp=2: buffer b [0, 8), w [8, 24), shards of 12. Rank 0 holds b and 4 of
    w, rank 1 the other 12 of w. Muon: 4 B per element it manages, 8 per element AdamW manages; AdamW: 8 B for all."""
    from muon_repro.optim.comm_model import compare_state

    cmp = compare_state([_spec("w", (4, 4)), _spec("b", (8,), use_muon=False)], dp=2)
    assert cmp.muon == [{"muon": 16, "adamw": 64}, {"muon": 48, "adamw": 0}]
    assert cmp.adamw == [{"muon": 0, "adamw": 96}, {"muon": 0, "adamw": 96}]
    assert cmp.muon_managed_ratio == [0.5, 0.5]
    assert cmp.whole_model_ratio == [80 / 96, 48 / 96]
    assert cmp.largest_rank_ratio == 80 / 96  # the largest rank under each optimizer
    assert cmp.muon_fraction == 16 / 24 and cmp.even_floor == pytest.approx(1 - 16 / 24 / 2)
    assert cmp.largest_rank_ratio >= cmp.even_floor


def test_a_rank_without_muon_matrices_has_no_managed_ratio() -> None:
    """b (16) [0, 16), w (2x2) [16, 20), shards of 10: rank 0 holds only b."""
    from muon_repro.optim.comm_model import compare_state

    cmp = compare_state([_spec("w", (2, 2)), _spec("b", (16,), use_muon=False)], dp=2)
    assert cmp.muon_managed_ratio == [None, 0.5]


def test_without_dp_there_is_no_bytes_ratio() -> None:
    """dp=1: AdamW sends nothing, so Muon's bytes over AdamW's is None, not 0."""
    from muon_repro.optim.comm_model import bytes_ratio, optimizer_bytes

    specs = [_spec("w", (4, 4)), _spec("b", (8,), use_muon=False)]
    by = {o: optimizer_bytes(specs, dp=1, tp=1, dp_rank=0, optimizer=o) for o in ("muon", "adamw")}
    assert sum(by["adamw"].values()) == 0
    assert bytes_ratio(by["muon"], by["adamw"]) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dp_rank": 2, "optimizer": "muon"}, r"dp_rank must be in \[0, 2\), got 2"),
        ({"dp_rank": -1, "optimizer": "muon"}, r"dp_rank must be in \[0, 2\), got -1"),
        ({"dp_rank": 0, "optimizer": "sgd"}, "optimizer must be 'muon' or 'adamw', got 'sgd'"),
    ],
)
def test_the_analytic_model_refuses_a_rank_or_optimizer_it_does_not_have(kwargs: dict, message: str) -> None:
    from muon_repro.optim.comm_model import muon_managed_state_bytes, optimizer_bytes, state_bytes

    specs = [_spec("w", (4, 4))]
    for price in (
        lambda: optimizer_bytes(specs, dp=2, tp=1, **kwargs),
        lambda: state_bytes(specs, dp=2, **kwargs),
        lambda: muon_managed_state_bytes(specs, dp=2, **kwargs),
    ):
        with pytest.raises(ValueError, match=message):
            price()
