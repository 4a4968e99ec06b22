"""torch.tpu.optimizers vs torch.optim on CPU, step for step, and one
program per step."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401
import torch_tpu.sync
from torch_tpu.execution_mode import EagerMode, eager_mode

from conftest import assert_close

DEV = torch.device("tpu")
opt = torch.tpu.optimizers


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def _muon_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16, bias=False), torch.nn.Tanh(),
                               torch.nn.Linear(16, 4, bias=False))


CASES = [
    ("adamw", lambda: opt.AdamW(lr=1e-2, weight_decay=0.1, use_bfloat16_moments=False),
     lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1), _model),
    ("adamw_max", lambda: opt.AdamW(lr=3e-3, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.0,
                                    maximize=True, use_bfloat16_moments=False),
     lambda ps: torch.optim.AdamW(ps, lr=3e-3, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.0,
                                  maximize=True), _model),
    ("sgd", lambda: opt.Sgd(lr=0.1), lambda ps: torch.optim.SGD(ps, lr=0.1), _model),
    ("sgd_momentum", lambda: opt.Sgd(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-2),
     lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-2),
     _model),
    ("sgd_nesterov", lambda: opt.Sgd(lr=0.05, momentum=0.9, nesterov=True, maximize=True),
     lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, maximize=True), _model),
    ("muon", lambda: opt.Muon(lr=2e-2, weight_decay=0.1),
     lambda ps: torch.optim.Muon(ps, lr=2e-2, weight_decay=0.1), _muon_model),
    ("muon_plain", lambda: opt.Muon(lr=1e-2, nesterov=False, adjust_lr_fn="match_rms_adamw"),
     lambda ps: torch.optim.Muon(ps, lr=1e-2, nesterov=False, adjust_lr_fn="match_rms_adamw"),
     _muon_model),
]


@pytest.mark.parametrize("name,make_tpu,make_ref,make_model", CASES, ids=[c[0] for c in CASES])
def test_matches_torch_optim_step_for_step_one_program_per_step(name, make_tpu, make_ref,
                                                                 make_model):
    fb0 = torch.tpu.fallback_counts()
    ref = make_model()
    dev = make_model().to(DEV)
    ref_opt = make_ref(list(ref.parameters()))
    o = make_tpu()
    group = o.init_param_group(dev)
    names = [n.replace(".", "_") for n, _ in dev.named_parameters()]
    assert list(group.params) == names
    torch.manual_seed(1)
    for it in range(6):
        x, y = torch.randn(5, 8), torch.randn(5, 4)
        ref_opt.zero_grad()
        F.mse_loss(ref(x), y).backward()
        ref_opt.step()
        dev.zero_grad()
        F.mse_loss(dev(x.to(DEV)), y.to(DEV)).backward()
        grads = {n: p.grad for n, p in zip(names, dev.parameters())}
        torch.tpu.synchronize()
        before = torch.tpu._get_cache_stats()["programs_run"]
        with eager_mode(EagerMode.DEFER_NEVER):  # (the suite also runs in Fused Eager)
            out = o(group, grads)
        after = torch.tpu._get_cache_stats()["programs_run"]
        assert out is group
        assert after - before == 1, f"step {it}: {after - before} programs"
        for (n, p), q in zip(dev.named_parameters(), ref.parameters()):
            assert_close(p.detach(), q.detach(), atol=1e-6, rtol=1e-6, msg=f"{name} step {it} {n}")
    assert all(float(s) == (6.0 if name.startswith("adamw") else 7.0)
               for s in group.opt_steps.values())
    assert torch.tpu.fallback_counts() == fb0  # nothing ran on the CPU fallback


def test_bf16_moments_and_defaults_and_pytree():
    o = opt.AdamW(lr=1e-3)
    assert o.defaults["use_bfloat16_moments"] is True and o.defaults["lr"] == 1e-3
    with pytest.raises(TypeError):
        o.defaults["lr"] = 1.0
    m = _model().to(DEV)
    g = o.init_param_group(m)
    assert all(t.dtype is torch.bfloat16 for t in g.opt_state_m.values())
    leaves, spec = torch.utils._pytree.tree_flatten(g)
    assert len(leaves) == 4 * 4
    g2 = torch.utils._pytree.tree_unflatten(leaves, spec)
    assert isinstance(g2, o.ParamGroup) and g2.params.keys() == g.params.keys()
    # bf16-moment AdamW follows fp32 AdamW closely
    ref = _model()
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    x, y = torch.randn(5, 8), torch.randn(5, 4)
    for _ in range(3):
        ref_opt.zero_grad()
        F.mse_loss(ref(x), y).backward()
        ref_opt.step()
        m.zero_grad()
        F.mse_loss(m(x.to(DEV)), y.to(DEV)).backward()
        o.step(g, {n.replace(".", "_"): p.grad for n, p in m.named_parameters()})
    for p, q in zip(m.parameters(), ref.parameters()):
        assert_close(p.detach(), q.detach(), atol=1e-4, rtol=1e-3)
    with pytest.raises(KeyError, match="no gradient"):
        o.step(g, {})
    with pytest.raises(ValueError, match="2D"):
        opt.Muon().init_param_group(_model())


def test_step_joins_a_fused_training_step():
    """In Fused Eager the update joins forward+backward: the whole train step
    is one program."""
    # shapes no other test uses: the loop detector has no history to cut at
    m = torch.nn.Sequential(torch.nn.Linear(7, 11), torch.nn.Tanh(), torch.nn.Linear(11, 3)).to(DEV)
    o = opt.Sgd(lr=0.1, momentum=0.9)
    g = o.init_param_group(m)
    x, y = torch.randn(5, 7, device=DEV), torch.randn(5, 3, device=DEV)
    torch.tpu.synchronize()
    with eager_mode(EagerMode.DEFER_AND_FUSE):
        before = torch.tpu._get_cache_stats()["programs_run"]
        m.zero_grad()
        F.mse_loss(m(x), y).backward()
        o(g, {n.replace(".", "_"): p.grad for n, p in m.named_parameters()})
        torch_tpu.sync.synchronize()
        assert torch.tpu._get_cache_stats()["programs_run"] - before == 1


def _model_6_10_3():
    # shapes no other test uses: the Fused Eager loop detector (when the
    # suite runs in that mode) has no earlier step to cut this one at
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.Tanh(), torch.nn.Linear(10, 3))


def test_single_trace_trainer_one_program_per_step():
    ref = _model_6_10_3()
    dev = _model_6_10_3().to(DEV)
    o = opt.AdamW(lr=1e-2, use_bfloat16_moments=False)
    tr = opt.SingleTraceTrainer(dev, o, compile_fn=lambda gm: gm)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    torch.manual_seed(2)
    x, y = torch.randn(5, 6), torch.randn(5, 3)
    step = tr.make_compiled_train_step(x.to(DEV), y.to(DEV))
    for it in range(4):
        ref_opt.zero_grad()
        lr_ = F.mse_loss(ref(x), y)
        lr_.backward()
        ref_opt.step()
        torch.tpu.synchronize()
        before = torch.tpu._get_cache_stats()["programs_run"]
        with eager_mode(EagerMode.DEFER_NEVER):
            ld = step(x.to(DEV), y.to(DEV))
        assert torch.tpu._get_cache_stats()["programs_run"] - before == 1
        assert abs(ld.item() - lr_.item()) < 1e-5
    for (n, p), q in zip(tr.params.items(), ref.parameters()):
        assert_close(p, q.detach(), atol=1e-5, rtol=1e-5, msg=n)
    for p, q in zip(dev.parameters(), ref.parameters()):  # the module itself was trained
        assert_close(p.detach(), q.detach(), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="targets"):
        step(x.to(DEV))
    with pytest.raises(ValueError, match="compile_fn"):
        opt.SingleTraceTrainer(dev, o).make_compiled_train_step(x.to(DEV), y.to(DEV))


def test_single_trace_trainer_without_optimizer_sets_grads():
    ref = _model()
    dev = _model().to(DEV)
    tr = opt.SingleTraceTrainer(dev, None, compile_fn=lambda gm, inputs: gm,
                                compute_loss_fn=lambda m, args, kw: m(*args).pow(2).mean())
    x = torch.randn(3, 8)
    loss = tr.make_compiled_train_step(x.to(DEV))(x.to(DEV))
    r = ref(x).pow(2).mean()
    r.backward()
    assert abs(loss.item() - r.item()) < 1e-5
    for p, q in zip(dev.parameters(), ref.parameters()):
        assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-5)
