"""Tensor-parallel GPT: configs, sharded initialization, layouts, and tp in {2, 4} == tp=1 on gloo.

Tolerance (fp32 everywhere). TP changes only the order of floating-point sums: a column-parallel
layer computes the same dot products, a row-parallel layer splits each length-K dot product into
tp partial sums added by the all-reduce, and the gathered logits feed the same cross-entropy (the
vocab-parallel one adds its sum of exponentials as tp partial sums; its max and target logit are exact).
Reordering a sum of K terms moves it by at most ~K*u*sum|terms| (u = 2**-24 ~ 6e-8), typically
~sqrt(K)*u; through two blocks, forward and backward, we observe at most ~7e-7 of each tensor's
largest magnitude (about 10 u). We require ``max|a - b| <= 1e-5 * max|b|`` per tensor: ~15x above
what reordering produces, and orders of magnitude below what any real bug produces (a wrong shard,
permutation, missing or doubled all-reduce gives errors of order max|b| itself). The bound is
normwise per tensor, so near-zero entries (q/k gradients at initialization are ~1e-4) do not need an
absolute floor.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from muon_repro.model import GPT, PRESETS, GPTConfig, assemble_tensor, init_full_tensors
from muon_repro.parallel.comm import CommLedger, Group
from muon_repro.parallel.tensor_parallel import (
    copy_to_tp,
    gather_from_tp,
    reduce_from_tp,
    scatter_to_tp,
    tp_partition_dim,
)

RTOL = 1e-5  # normwise, relative to the largest magnitude in the reference tensor; see module docstring

TINY = GPTConfig.preset("tiny")
TINY_SPLIT = GPTConfig.preset("tiny", qkv="split")


def fake_tp_group(rank: int, size: int) -> Group:
    """A TP group seen from ``rank`` with no process group: enough to build (building never communicates)."""
    return Group(name="tp", ranks=tuple(range(size)), rank=rank, process_group=None, ledger=CommLedger())


def assert_close_normwise(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    err = (actual - expected).abs().max().item()
    scale = expected.abs().max().item()
    assert err <= RTOL * scale, f"{what}: max abs error {err:.3g} > {RTOL} * max|expected| = {RTOL * scale:.3g}"


def batch(config: GPTConfig, b: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    shape = (b, config.max_seq_len)
    return torch.randint(0, config.vocab_size, shape, generator=gen), torch.randint(0, config.vocab_size, shape, generator=gen)


def reference(config: GPTConfig, tokens: torch.Tensor, targets: torch.Tensor) -> tuple[GPT, torch.Tensor]:
    model = GPT(config, Group.single("tp"))
    loss = model(tokens, targets)
    loss.backward()
    return model, loss.detach()


# ---------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"hidden": 0}, "hidden must be a positive integer, got 0"),
        ({"n_layers": 2.0}, "n_layers must be a positive integer, got 2.0"),
        ({"vocab_size": -1}, "vocab_size must be a positive integer, got -1"),
        ({"qkv": "packed"}, "qkv must be one of ('fused', 'split'), got 'packed'"),
        ({"seed": -3}, "seed must be a non-negative integer, got -3"),
        ({"init_std": 0.0}, "init_std must be a positive number, got 0.0"),
        ({"hidden": 34}, "hidden=34 is not divisible by n_heads=4"),
        ({"hidden": 28, "n_heads": 4}, "head_dim = hidden/n_heads = 7 must be even"),
    ],
)
def test_config_rejects_bad_values(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        replace(TINY, **overrides)


def test_presets() -> None:
    assert set(PRESETS) >= {"tiny", "small", "medium", "large"}
    tiny = GPTConfig.preset("tiny")
    for name in ("hidden", "n_heads", "ffn_hidden", "vocab_size"):
        assert getattr(tiny, name) % 4 == 0, name
    assert 1e6 < GPTConfig.preset("small").num_params() < 1e7
    assert 80e6 < GPTConfig.preset("medium").num_params() < 150e6
    assert 300e6 < GPTConfig.preset("large").num_params() < 420e6
    assert GPTConfig.preset("tiny", qkv="split", seed=7).seed == 7
    with pytest.raises(ValueError, match="unknown model preset 'huge'"):
        GPTConfig.preset("huge")
    with pytest.raises(ValueError, match="unknown GPTConfig field"):
        GPTConfig.preset("tiny", hiden=8)


@pytest.mark.parametrize("config", [TINY, TINY_SPLIT, GPTConfig.preset("small")], ids=["tiny", "tiny-split", "small"])
def test_num_params_and_flops(config: GPTConfig) -> None:
    model = GPT(config, Group.single("tp"))
    assert model.num_params() == sum(p.numel() for p in model.parameters()) == config.num_params()
    assert model.num_params(full=False) == config.num_params()
    assert config.flops_per_token() > 6 * (config.num_params() - config.vocab_size * config.hidden)


# ---------------------------------------------------------------- building under tp


@pytest.mark.parametrize(
    ("field", "value"),
    [("hidden", 30), ("n_heads", 2), ("ffn_hidden", 130), ("vocab_size", 130)],
)
def test_indivisible_by_tp_raises(field: str, value: int) -> None:
    config = replace(TINY, **{field: value}) if field != "hidden" else replace(TINY, hidden=30, n_heads=3)
    with pytest.raises(ValueError, match=f"{field}={value} is not divisible by tp=4"):
        GPT(config, fake_tp_group(0, 4))


def test_parameter_names_and_partition_dims() -> None:
    expected_dims = {
        "embed.weight": 0,
        "attn_norm.weight": None,
        "attn.qkv.weight": 0,
        "attn.q.weight": 0,
        "attn.k.weight": 0,
        "attn.v.weight": 0,
        "attn.proj.weight": 1,
        "mlp_norm.weight": None,
        "mlp.fc1.weight": 0,
        "mlp.fc2.weight": 1,
        "final_norm.weight": None,
        "lm_head.weight": 0,
    }
    for config, qkv_names in ((TINY, ["qkv"]), (TINY_SPLIT, ["q", "k", "v"])):
        model = GPT(config, fake_tp_group(1, 4))
        names = [n for n, _ in model.named_parameters()]
        block = [
            "attn_norm.weight",
            *(f"attn.{m}.weight" for m in qkv_names),
            "attn.proj.weight",
            "mlp_norm.weight",
            "mlp.fc1.weight",
            "mlp.fc2.weight",
        ]
        assert names == [
            "embed.weight",
            *(f"blocks.{i}.{b}" for i in range(2) for b in block),
            "final_norm.weight",
            "lm_head.weight",
        ]
        for name, param in model.named_parameters():
            key = name.split(".", 2)[-1] if name.startswith("blocks.") else name
            assert tp_partition_dim(param) == expected_dims[key], name
        h, f, v = config.hidden, config.ffn_hidden, config.vocab_size
        shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
        assert shapes["embed.weight"] == shapes["lm_head.weight"] == (v // 4, h)
        assert shapes["blocks.0.mlp.fc1.weight"] == (f // 4, h)
        assert shapes["blocks.0.mlp.fc2.weight"] == (h, f // 4)
        assert shapes["blocks.0.attn.proj.weight"] == (h, h // 4)
        assert shapes["blocks.0.attn_norm.weight"] == (h,)


@pytest.mark.parametrize("tp", [2, 4])
@pytest.mark.parametrize("config", [TINY, TINY_SPLIT], ids=["fused", "split"])
def test_sharded_init_reassembles_to_tp1_weights(config: GPTConfig, tp: int) -> None:
    full = dict(init_full_tensors(config))
    ref = GPT(config, Group.single("tp"))
    ranks = [GPT(config, fake_tp_group(r, tp)) for r in range(tp)]
    for name, param in ref.named_parameters():
        assert torch.equal(param, full[name]), name
        shards = [dict(m.named_parameters())[name].detach() for m in ranks]
        assert torch.equal(ranks[0].assemble_full_tensor(name, shards), param), name
        for r, m in enumerate(ranks):
            assert torch.equal(m.shard_full_tensor(name, param.detach()), shards[r]), name
    assert ranks[0].full_state_dict_from_shards([dict(m.named_parameters()) for m in ranks]).keys() == full.keys()


def test_fused_qkv_shards_hold_their_heads_q_k_v() -> None:
    """Concatenated fused shards = rows q_0 k_0 v_0 q_1 k_1 v_1 of [Wq; Wk; Wv] (documented permutation)."""
    tp, h = 2, TINY.hidden
    s = h // tp
    canonical = dict(init_full_tensors(TINY))["blocks.0.attn.qkv.weight"]
    concat = torch.cat(
        [dict(GPT(TINY, fake_tp_group(r, tp)).named_parameters())["blocks.0.attn.qkv.weight"].detach() for r in range(tp)]
    )
    rows = [part * h + r * s + i for r in range(tp) for part in range(3) for i in range(s)]
    assert sorted(rows) == list(range(3 * h))
    assert torch.equal(concat, canonical[rows])
    # tp=1: the local layout is the canonical one.
    assert torch.equal(assemble_tensor("blocks.0.attn.qkv.weight", [canonical], 0), canonical)


def test_seed_fixes_weights() -> None:
    a, b = GPT(TINY, Group.single("tp")), GPT(TINY, Group.single("tp"))
    c = GPT(replace(TINY, seed=1), Group.single("tp"))
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.embed.weight, c.embed.weight)


# ---------------------------------------------------------------- single process behaviour


def test_forward_logits_and_loss() -> None:
    tokens, targets = batch(TINY)
    model = GPT(TINY, Group.single("tp"))
    logits = model(tokens)
    assert logits.shape == (4, TINY.max_seq_len, TINY.vocab_size)
    loss = model(tokens, targets)
    assert torch.allclose(loss, F.cross_entropy(logits.flatten(0, 1), targets.flatten()))
    assert abs(loss.item() - torch.log(torch.tensor(128.0)).item()) < 0.5  # near-uniform at init
    # Causal: changing the last token leaves earlier positions' logits unchanged.
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % TINY.vocab_size
    assert torch.equal(model(changed)[:, :-1], logits[:, :-1])
    with pytest.raises(ValueError, match="sequence length 17 exceeds max_seq_len=16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match=r"tokens must be \[batch, seq\]"):
        model(torch.zeros(17, dtype=torch.long))


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("bad", [-1, 128], ids=["negative", "vocab_size"])
def test_a_token_id_outside_the_vocabulary_is_refused_at_every_tp(tp: int, bad: int) -> None:
    """At tp > 1 no rank owns such an id: the lookup would give a row of zeros and the loss a target logit of 0,
    silently. The model refuses it at every tp, before any communication (the fake group could not communicate)."""
    tokens, targets = batch(TINY)
    model = GPT(TINY, fake_tp_group(0, tp) if tp > 1 else Group.single("tp"))
    found = r"from -1 to \d+" if bad < 0 else r"from \d+ to 128"
    expected = rf"must be token ids in \[0, 128\) \(the vocabulary\), got ids {found}"
    with pytest.raises(ValueError, match=rf"tokens {expected}"):
        model(tokens.index_fill(1, torch.tensor([3]), bad), targets)
    if tp == 1:  # the loss checks its targets too (at tp > 1 the forward's first all-reduce comes before it)
        with pytest.raises(ValueError, match=rf"targets {expected}"):
            model(tokens, targets.index_fill(1, torch.tensor([3]), bad))


def test_fused_and_split_qkv_compute_the_same_function() -> None:
    tokens, targets = batch(TINY)
    fused, loss_f = reference(TINY, tokens, targets)
    split, loss_s = reference(TINY_SPLIT, tokens, targets)
    assert_close_normwise(loss_s, loss_f, "loss")
    for i in range(TINY.n_layers):
        qkv_grad = fused.blocks[i].attn.qkv.weight.grad
        for part, name in zip(qkv_grad.chunk(3), ("q", "k", "v")):
            assert_close_normwise(getattr(split.blocks[i].attn, name).weight.grad, part, f"blocks.{i}.attn.{name}")


def test_cross_entropy_modes() -> None:
    """Both losses are one function on one process; under TP only "gathered" builds a gathering LM head."""
    tokens, targets = batch(TINY)
    models = {mode: GPT(TINY, Group.single("tp"), cross_entropy=mode) for mode in ("vocab_parallel", "gathered")}
    losses = {mode: model(tokens, targets) for mode, model in models.items()}
    for loss in losses.values():
        loss.backward()
    assert torch.equal(losses["vocab_parallel"], losses["gathered"])
    for (name, p), q in zip(models["vocab_parallel"].named_parameters(), models["gathered"].parameters()):
        assert torch.equal(p.grad, q.grad), name
    assert GPT(TINY, Group.single("tp")).cross_entropy == "vocab_parallel"  # the default
    for rank in range(4):
        vocab_parallel = GPT(TINY, fake_tp_group(rank, 4))
        assert not vocab_parallel.lm_head.gather_output and vocab_parallel.vocab_start == rank * TINY.vocab_size // 4
        assert GPT(TINY, fake_tp_group(rank, 4), cross_entropy="gathered").lm_head.gather_output
    with pytest.raises(ValueError, match=re.escape("unknown cross_entropy 'fused'; choose one of vocab_parallel, gathered")):
        GPT(TINY, Group.single("tp"), cross_entropy="fused")


def test_comm_pairs_are_identity_on_one_rank() -> None:
    group = Group.single("tp")
    x = torch.randn(3, 8, requires_grad=True)
    for fn in (copy_to_tp, reduce_from_tp, scatter_to_tp, gather_from_tp):
        assert fn(x, group) is x
    assert group.ledger.records == []


def test_load_full_state_dict_rejects_mismatch() -> None:
    model = GPT(TINY, Group.single("tp"))
    full = dict(init_full_tensors(TINY))
    with pytest.raises(ValueError, match="missing"):
        model.load_full_state_dict({k: v for k, v in full.items() if k != "lm_head.weight"})
    with pytest.raises(ValueError, match="unexpected parameter 'blocks.0.attn.q.weight'"):
        model.load_full_state_dict(dict(init_full_tensors(TINY_SPLIT)))


# ---------------------------------------------------------------- tp in {2, 4} on gloo == tp=1


@pytest.mark.slow
@pytest.mark.parametrize("tp", [2, 4])
def test_tp_matches_tp1(tp: int) -> None:
    from tp_workers import tp_parity_worker

    from muon_repro.parallel.launch import launch

    # Vocab-parallel loss with either QKV layout, and the gathered loss the recorded runs used.
    variants = [(TINY, "vocab_parallel"), (TINY_SPLIT, "vocab_parallel"), (TINY, "gathered")]
    tokens, targets = batch(TINY)
    local_vocab = TINY.vocab_size // tp
    assert set((targets // local_vocab).flatten().tolist()) == set(range(tp)), "every rank must own some targets"
    results = launch(tp_parity_worker, tp, tp, variants, tokens, targets)
    assert [r["tp_rank"] for r in results] == list(range(tp))

    for r in results:
        for check, err in r["pairs"].items():
            assert err <= 1e-6, f"rank {r['tp_rank']}: {check} error {err}"

    b, t, h, v = tokens.shape[0], tokens.shape[1], TINY.hidden, TINY.vocab_size
    for index, (config, cross_entropy) in enumerate(variants):
        what = f"{config.qkv} {cross_entropy} tp={tp}"
        ref, ref_loss = reference(config, tokens, targets)
        with torch.no_grad():
            ref_logits = ref(tokens)
        per_rank = [r["models"][index] for r in results]
        for rank, out in enumerate(per_rank):
            assert_close_normwise(out["loss"], ref_loss, f"{what} rank {rank} loss")
            assert_close_normwise(out["logits"], ref_logits, f"{what} rank {rank} logits")
        for name, param in ref.named_parameters():
            dim = tp_partition_dim(param)
            assert all(out["dims"][name] == dim for out in per_rank), name
            if dim is None:  # replicated: every rank holds the full gradient
                for rank, out in enumerate(per_rank):
                    assert_close_normwise(out["grads"][name], param.grad, f"{what} rank {rank} {name}.grad")
            else:
                assert dim == (1 if name.endswith(("proj.weight", "fc2.weight")) else 0), name
                weight = assemble_tensor(name, [out["params"][name] for out in per_rank], dim)
                assert torch.equal(weight, param.detach()), name
                grad = assemble_tensor(name, [out["grads"][name] for out in per_rank], dim)
                assert_close_normwise(grad, param.grad, f"{what} {name}.grad")
        # Forward: all-reduces of [b, t, h] for the embedding and per block the attention and MLP outputs;
        # then either one all-gather of the logits, or the vocab-parallel loss's three all-reduces of [b*t]
        # (row max, target logit, sum of exponentials) and no gather. Backward: the attention and MLP
        # inputs per block (split QKV enters the TP region once) and the LM head input; the loss's own
        # backward communicates nothing.
        loss_ops = (
            {("tp_all_gather", "all_gather", b * t * v): 1}
            if cross_entropy == "gathered"
            else {("tp_all_reduce", "all_reduce", b * t): 3}
        )
        for out in per_rank:
            assert out["forward_ops"] == {("tp_all_reduce", "all_reduce", b * t * h): 1 + 2 * config.n_layers, **loss_ops}
            assert out["backward_ops"] == {("tp_all_reduce", "all_reduce", b * t * h): 1 + 2 * config.n_layers}
            assert out["ledger_groups"] == {"tp"}
