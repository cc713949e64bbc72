"""The reference Muon and AdamW against independent evaluations of the same update rules."""

import math

import pytest
import torch
from torch import nn

from muon_repro.optim import AdamW, Muon, muon_param_groups, split_muon_params
from muon_repro.optim.update_rules import muon_momentum_, muon_momentum_many_, muon_update_scale

LR, WD, MU = 0.02, 0.1, 0.95
STEPS = 10


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.embed = nn.Parameter(torch.randn(11, 8, generator=g))
        self.w_wide = nn.Parameter(torch.randn(8, 24, generator=g) / 5)
        self.w_tall = nn.Parameter(torch.randn(24, 8, generator=g) / 5)
        self.experts = nn.Parameter(torch.randn(3, 8, 12, generator=g) / 5)  # batched matrices
        self.norm = nn.Parameter(torch.ones(8))
        self.lm_head = nn.Parameter(torch.randn(11, 8, generator=g))


def gradients(model: nn.Module, step: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    return {n: torch.randn(p.shape, generator=g) for n, p in model.named_parameters()}


def run(optimizer_factory, steps=STEPS):
    model = TinyNet()
    opt = optimizer_factory(model)
    history = []
    for step in range(steps):
        for name, p in model.named_parameters():
            p.grad = gradients(model, step)[name].clone()
        opt.step()
        history.append({n: p.detach().clone() for n, p in model.named_parameters()})
    return model, opt, history


def moonlight_float64(steps=STEPS):
    """Moonlight's toy_train.py update, written out again in float64 (sum momentum, Nesterov)."""
    model = TinyNet()
    params = {n: p.detach().double().clone() for n, p in model.named_parameters()}
    muon_names = {"w_wide", "w_tall", "experts"}
    buf = {n: torch.zeros_like(p) for n, p in params.items()}
    m = {n: torch.zeros_like(p) for n, p in params.items()}
    v = {n: torch.zeros_like(p) for n, p in params.items()}
    history = []
    for step in range(steps):
        grads = {n: g.double() for n, g in gradients(model, step).items()}
        for n, p in params.items():
            g = grads[n]
            if n in muon_names:
                buf[n] = MU * buf[n] + g
                x = g + MU * buf[n]
                if x.shape[-2] > x.shape[-1]:
                    x = x.mT
                x = x / (torch.linalg.matrix_norm(x, keepdim=True) + 1e-7)
                for _ in range(5):
                    A = x @ x.mT
                    x = 3.4445 * x + (-4.7750 * A + 2.0315 * A @ A) @ x
                if p.shape[-2] > p.shape[-1]:
                    x = x.mT
                scale = 0.2 * math.sqrt(max(p.shape[-2], p.shape[-1]))
                params[n] = p * (1 - LR * WD) - LR * scale * x
            else:  # torch's AdamW arithmetic
                t = step + 1
                m[n] = 0.9 * m[n] + 0.1 * g
                v[n] = 0.95 * v[n] + 0.05 * g * g
                denom = v[n].sqrt() / math.sqrt(1 - 0.95**t) + 1e-8
                params[n] = p * (1 - LR * WD) - LR / (1 - 0.9**t) * m[n] / denom
        history.append({n: p.clone() for n, p in params.items()})
    return history


def make_muon(model, **kw):
    return Muon(muon_param_groups(model), lr=LR, weight_decay=WD, momentum=MU, **kw)


def test_param_split_rule():
    muon, adamw = split_muon_params(TinyNet().named_parameters())
    assert [n for n, _ in muon] == ["w_wide", "w_tall", "experts"]
    assert [n for n, _ in adamw] == ["embed", "norm", "lm_head"]
    muon, adamw = split_muon_params(TinyNet().named_parameters(), adamw_names=["w_*"], muon_names=["lm_head"])
    assert [n for n, _ in muon] == ["experts", "lm_head"]


def test_fp32_matches_float64_moonlight_update():
    _, _, ours = run(lambda m: make_muon(m, ns_dtype=torch.float32))
    reference = moonlight_float64()
    for step, (got, want) in enumerate(zip(ours, reference)):
        for name in want:
            diff = (got[name].double() - want[name]).abs().max().item()
            assert diff < 2e-5, f"step {step} {name}: max abs diff {diff}"


def test_update_rms_recorded_and_matched_to_adamw():
    model, opt, _ = run(lambda m: make_muon(m, ns_dtype=torch.float32), steps=1)
    for p in (model.w_wide, model.w_tall, model.experts):
        # 0.2*sqrt(max(A,B)) * NS output, whose singular values are ~0.7-1.2: RMS ~0.2.
        assert 0.12 < float(opt.state[p]["update_rms"]) < 0.25


@pytest.mark.parametrize("form", ["sum", "ema"])
def test_bf16_matches_torch_optim_muon(form):
    """torch.optim.Muon runs EMA momentum and its iteration in bf16.

    The sum-form Nesterov input is ``1/(1-mu)`` times the EMA one; Newton-Schulz normalizes that
    away, so the updates agree up to bf16 rounding (which the different scale perturbs): the
    tolerance is a few bf16 ulps of the update (2^-8 relative, times lr*scale, over 10 steps).
    """
    names = ("w_wide", "w_tall")
    ours_model, _, _ = run(lambda m: make_muon(m, ns_dtype=torch.bfloat16, momentum_form=form))
    torch_model = TinyNet()
    opt = torch.optim.Muon(
        [getattr(torch_model, n) for n in names],
        lr=LR,
        weight_decay=WD,
        momentum=MU,
        nesterov=True,
        adjust_lr_fn="match_rms_adamw",
    )
    for step in range(STEPS):
        for name in names:
            getattr(torch_model, name).grad = gradients(torch_model, step)[name].clone()
        opt.step()
    for name in names:
        got, want = getattr(ours_model, name).detach(), getattr(torch_model, name).detach()
        step_size = LR * 0.2 * math.sqrt(24)
        assert (got - want).abs().max() < STEPS * step_size * 2**-6, name
        assert not torch.equal(got, TinyNet().get_parameter(name)), "parameters did not move"


def test_adamw_path_equals_torch_adamw():
    names = ("embed", "norm", "lm_head")
    ours_model, _, _ = run(lambda m: make_muon(m))
    torch_model = TinyNet()
    opt = torch.optim.AdamW(
        [getattr(torch_model, n) for n in names], lr=LR, weight_decay=WD, betas=(0.9, 0.95), eps=1e-8, foreach=False
    )
    for step in range(STEPS):
        for name in names:
            getattr(torch_model, name).grad = gradients(torch_model, step)[name].clone()
        opt.step()
    for name in names:
        torch.testing.assert_close(getattr(ours_model, name), getattr(torch_model, name), rtol=1e-6, atol=1e-7)


def test_adamw_baseline_equals_torch_adamw_on_all_params():
    ours_model, _, _ = run(lambda m: AdamW(muon_param_groups(m), lr=LR, weight_decay=WD))
    torch_model, _, _ = run(lambda m: torch.optim.AdamW(m.parameters(), lr=LR, weight_decay=WD, betas=(0.9, 0.95), foreach=False))
    for (name, got), want in zip(ours_model.named_parameters(), torch_model.parameters()):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7, msg=name)


def test_vector_in_muon_set_is_rejected():
    model = TinyNet()
    with pytest.raises(ValueError, match="'norm'.*shape \\(8,\\)"):
        muon_param_groups(model, muon_names=["norm"])
    with pytest.raises(ValueError, match="shape \\(8,\\)"):
        Muon([{"params": [model.norm], "use_muon": True}])


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"lr": -1}, "lr"),
        ({"momentum": 1.0}, "momentum"),
        ({"update_scale": "x"}, "update_scale"),
        ({"momentum_form": "y"}, "momentum_form"),
    ],
)
def test_bad_hyperparameters(kwargs, field):
    with pytest.raises(ValueError, match=field):
        Muon(muon_param_groups(TinyNet()), **kwargs)


def test_gather_dtype_rounds_the_newton_schulz_input():
    """``gather_dtype`` rounds the NS input as DistributedMuon's gathers do, and nothing else."""
    from muon_repro.optim.newton_schulz import zeropower_via_newtonschulz5
    from muon_repro.optim.update_rules import apply_decoupled_update_, muon_update_scale

    model, _, _ = run(lambda m: make_muon(m, ns_dtype=torch.float32, gather_dtype=torch.bfloat16), steps=1)
    fresh = TinyNet()
    for name in ("w_wide", "w_tall", "experts"):
        g = gradients(fresh, 0)[name]
        ns_input = g.add(g, alpha=MU).to(torch.bfloat16).float()  # first Nesterov input (buf = g), rounded
        want = fresh.get_parameter(name).detach().clone()
        update = zeropower_via_newtonschulz5(ns_input, dtype=torch.float32)
        apply_decoupled_update_(want, update, LR, WD, muon_update_scale(g.shape, "moonlight"))
        assert torch.equal(model.get_parameter(name).detach(), want), name
    unrounded, _, _ = run(lambda m: make_muon(m, ns_dtype=torch.float32), steps=1)
    assert not torch.equal(unrounded.w_wide, model.w_wide)
    assert torch.equal(unrounded.embed, model.embed)  # AdamW parameters are untouched by it


def test_bf16_gather_changes_nothing_under_bf16_newton_schulz():
    rounded, _, _ = run(lambda m: make_muon(m, ns_dtype=torch.bfloat16, gather_dtype=torch.bfloat16), steps=3)
    plain, _, _ = run(lambda m: make_muon(m, ns_dtype=torch.bfloat16), steps=3)
    for (name, got), want in zip(rounded.named_parameters(), plain.parameters()):
        assert torch.equal(got, want), name


def test_bad_gather_dtype():
    with pytest.raises(ValueError, match="gather_dtype must be None or a floating-point torch.dtype, got torch.int8"):
        Muon(muon_param_groups(TinyNet()), gather_dtype=torch.int8)


def test_muon_momentum_by_hand_and_as_the_foreach_form():
    mu = 0.9
    # sum, Nesterov, g = 1 twice: buf 1 then 1.9; input g + mu*buf = 1.9 then 2.71.
    # ema, Nesterov: buf 0.1 then 0.19; input lerp(g, buf, mu) = 0.19 then 0.271, (1 - mu) times the sum's.
    for form, inputs, bufs in (("sum", (1.9, 2.71), (1.0, 1.9)), ("ema", (0.19, 0.271), (0.1, 0.19))):
        buf = torch.zeros(3, dtype=torch.float64)
        for want_input, want_buf in zip(inputs, bufs):
            got = muon_momentum_(buf, torch.ones(3, dtype=torch.float64), mu, True, form)
            assert torch.allclose(got, torch.full((3,), want_input, dtype=torch.float64), rtol=1e-12), form
            assert torch.allclose(buf, torch.full((3,), want_buf, dtype=torch.float64), rtol=1e-12), form
    # the one-tensor form and the foreach form (which the optimizers run) agree element for element
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(5, 7, generator=g) for _ in range(3)]
    for form in ("sum", "ema"):
        for nesterov in (True, False):
            one, many = torch.zeros(5, 7), [torch.zeros(5, 7)]
            for grad in grads:
                a = muon_momentum_(one, grad, 0.95, nesterov, form)
                (b,) = muon_momentum_many_(many, [grad], 0.95, nesterov, form)
                assert torch.equal(a, b) and torch.equal(one, many[0]), (form, nesterov)


def test_keller_scale_is_sqrt_of_rows_over_cols_at_least_one():
    # Keller Jordan's Muon: update *= max(1, rows/cols)**0.5 (torch.optim.Muon's adjust_lr_fn="original").
    assert muon_update_scale((1024, 256), "keller") == 2.0
    assert muon_update_scale((256, 1024), "keller") == 1.0
    assert muon_update_scale((3, 512, 128), "keller") == 2.0  # the last two dims are the matrix
    assert muon_update_scale((256, 1024), "moonlight") == pytest.approx(0.2 * math.sqrt(1024))
