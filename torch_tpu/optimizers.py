"""``torch.tpu.optimizers``: TorchTPU's stateless functional optimizers.

An optimizer holds only its hyperparameters (fixed at construction, read
through ``defaults``); the parameters and their state live in a
``ParamGroup`` (a pytree dataclass of name -> tensor dicts) made by
``init_param_group(model_or_params)``. ``step(param_group, grads)`` (or
calling the optimizer) updates the group's tensors in place and returns it.

The update math is PyTorch's own (``torch.optim.adamw.adamw``,
``torch.optim.sgd.sgd``, ``torch.optim._muon.muon``), so results match
``torch.optim`` step for step. On tpu a whole step, over every tensor, is
recorded in Fused Eager and runs as ONE program (one compiled, cached vTPU
program per step; ``torch.tpu._get_cache_stats()["programs_run"]`` counts
them). When the caller is already in Fused Eager the step joins the
caller's pending graph instead (forward + backward + step then flush
together)."""
import abc
import contextlib
import dataclasses
import types

import torch
import torch.optim._muon as _torch_muon
import torch.optim.adamw as _torch_adamw
import torch.optim.sgd as _torch_sgd
from torch.utils import _pytree

from . import _C
from . import execution_mode as _em

__all__ = ["AdamW", "Muon", "Optimizer", "Sgd", "SingleTraceTrainer"]


@contextlib.contextmanager
def _one_program(tensors):
    """Record the block in Fused Eager and run it as one program on each
    tpu device of ``tensors`` (no-op for CPU tensors)."""
    devs = sorted({t.device.index or 0 for t in tensors if t.device.type == "tpu"})
    if not devs or _em.get_eager_mode() is _em.EagerMode.DEFER_AND_FUSE:
        yield
        return
    for d in devs:  # whatever was pending before is not part of the step
        _C._flush(d)
    with _em.set_eager_mode(_em.EagerMode.DEFER_AND_FUSE):
        try:
            yield
        finally:
            for d in devs:
                _C._flush(d)


def _named(params):
    if isinstance(params, torch.nn.Module):
        return {n.replace(".", "_"): p.detach() for n, p in params.named_parameters()}
    return dict(params)


def _lists(group, grads, *state):
    keys = list(group.params)
    missing = [k for k in keys if k not in grads]
    if missing:
        raise KeyError(f"no gradient for parameter(s) {missing}")
    return ([group.params[k] for k in keys], [grads[k] for k in keys],
            *[[getattr(group, s)[k] for k in keys] for s in state])


class Optimizer(abc.ABC):
    """Base class of the stateless functional optimizers. Hyperparameters are
    fixed at construction (a traced step captures them as constants): make a
    new optimizer to change them."""

    _HYPERPARAMETER_NAMES = ("lr", "weight_decay")

    def __init__(self, lr=1e-3, weight_decay=0.0):
        self._lr = lr
        self._weight_decay = weight_decay

    @property
    def defaults(self):
        """Read-only mapping of the hyperparameters."""
        return types.MappingProxyType(
            {n: getattr(self, f"_{n}") for n in self._HYPERPARAMETER_NAMES})

    @abc.abstractmethod
    def init_param_group(self, params):
        """A fresh ParamGroup for ``params`` (a name -> tensor dict or a Module,
        whose dotted names become ``_``-joined)."""

    @abc.abstractmethod
    def step(self, param_group, grads):
        """Update ``param_group`` in place from ``grads`` (name -> tensor); returns it."""

    def __call__(self, param_group, grads):
        return self.step(param_group, grads)


def _register(cls, fields):
    _pytree.register_pytree_node(
        cls, lambda g: (tuple(getattr(g, f) for f in fields), None),
        lambda ch, _: cls(**dict(zip(fields, ch))))


def _zeros(params, dtype=None):
    return {n: torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
            for n, p in params.items()}


def _steps(params, start):
    return {n: torch.tensor(start, dtype=torch.float32, device=p.device) for n, p in params.items()}


# ---- AdamW ------------------------------------------------------------------------------


@dataclasses.dataclass
class _AdamWParamGroup:
    """Parameters and Adam state (first/second moments, step counts)."""

    params: dict
    opt_state_m: dict = dataclasses.field(default_factory=dict)
    opt_state_v: dict = dataclasses.field(default_factory=dict)
    opt_steps: dict = dataclasses.field(default_factory=dict)


_register(_AdamWParamGroup, ("params", "opt_state_m", "opt_state_v", "opt_steps"))


class AdamW(Optimizer):
    """AdamW (decoupled weight decay), ``torch.optim.AdamW``'s math. With
    ``use_bfloat16_moments`` (TorchTPU's default) the moments are stored in
    bf16 and updated in fp32. ``foreach``/``fused`` are accepted for
    TorchTPU compatibility; every step is one fused program regardless."""

    ParamGroup = _AdamWParamGroup
    _HYPERPARAMETER_NAMES = ("lr", "weight_decay", "beta1", "beta2", "eps", "use_bfloat16_moments",
                             "amsgrad", "maximize", "foreach", "capturable", "differentiable",
                             "fused", "grad_scale", "found_inf")

    def __init__(self, lr=1e-3, weight_decay=1e-2, beta1=0.9, beta2=0.999, eps=1e-8,
                 use_bfloat16_moments=True, amsgrad=False, maximize=False, foreach=False,
                 capturable=True, differentiable=False, fused=False, grad_scale=None,
                 found_inf=None):
        super().__init__(lr=lr, weight_decay=weight_decay)
        if amsgrad:
            raise ValueError("AdamW: amsgrad is not supported (TorchTPU keeps no max_exp_avg_sq state)")
        self._beta1, self._beta2, self._eps = beta1, beta2, eps
        self._use_bfloat16_moments = use_bfloat16_moments
        self._amsgrad, self._maximize = amsgrad, maximize
        self._foreach, self._capturable, self._differentiable = foreach, capturable, differentiable
        self._fused, self._grad_scale, self._found_inf = fused, grad_scale, found_inf

    def init_param_group(self, params):
        params = _named(params)
        dt = torch.bfloat16 if self._use_bfloat16_moments else None
        return self.ParamGroup(params=params, opt_state_m=_zeros(params, dt),
                               opt_state_v=_zeros(params, dt), opt_steps=_steps(params, 0.0))

    def step(self, param_group, grads):
        ps, gs, ms, vs, steps = _lists(param_group, grads, "opt_state_m", "opt_state_v",
                                       "opt_steps")
        with _one_program(ps):
            ms32 = [m.float() if m.dtype != p.dtype else m for m, p in zip(ms, ps)]
            vs32 = [v.float() if v.dtype != p.dtype else v for v, p in zip(vs, ps)]
            on_dev = all(p.device.type == "tpu" for p in ps)
            _torch_adamw.adamw(ps, gs, ms32, vs32, [], steps, foreach=False,
                               capturable=on_dev,
                               differentiable=self._differentiable, fused=False,
                               grad_scale=self._grad_scale, found_inf=self._found_inf,
                               amsgrad=False, beta1=self._beta1, beta2=self._beta2, lr=self._lr,
                               weight_decay=self._weight_decay, eps=self._eps,
                               maximize=self._maximize)
            for src, dst in zip(ms32 + vs32, ms + vs):
                if src is not dst:
                    dst.copy_(src)
        return param_group


# ---- SGD ----------------------------------------------------------------------------------


@dataclasses.dataclass
class _SgdParamGroup:
    """Parameters and SGD state (momentum buffers when momentum != 0, step counts)."""

    params: dict
    opt_state_m: dict = dataclasses.field(default_factory=dict)
    opt_steps: dict = dataclasses.field(default_factory=dict)


_register(_SgdParamGroup, ("params", "opt_state_m", "opt_steps"))


class Sgd(Optimizer):
    """SGD with optional momentum/dampening/Nesterov/weight decay,
    ``torch.optim.SGD``'s math (the first step seeds the momentum buffer with
    the gradient, as torch does)."""

    ParamGroup = _SgdParamGroup
    _HYPERPARAMETER_NAMES = ("lr", "momentum", "dampening", "weight_decay", "nesterov",
                             "maximize", "foreach", "fused", "grad_scale", "found_inf",
                             "has_sparse_grad")

    def __init__(self, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                 maximize=False, foreach=False, fused=True, grad_scale=None, found_inf=None,
                 has_sparse_grad=False):
        super().__init__(lr=lr, weight_decay=weight_decay)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        if grad_scale is not None or found_inf is not None:
            raise NotImplementedError("Sgd: grad_scale/found_inf (fused AMP scaling) are not "
                                      "supported; unscale the gradients before step()")
        self._momentum, self._dampening, self._nesterov = momentum, dampening, nesterov
        self._maximize, self._foreach, self._fused = maximize, foreach, fused
        self._grad_scale, self._found_inf, self._has_sparse_grad = grad_scale, found_inf, has_sparse_grad

    def init_param_group(self, params):
        params = _named(params)
        m = _zeros(params) if self._momentum != 0.0 else {}
        return self.ParamGroup(params=params, opt_state_m=m, opt_steps=_steps(params, 1.0))

    def step(self, param_group, grads):
        ps, gs, steps = _lists(param_group, grads, "opt_steps")
        keys = list(param_group.params)
        with _one_program(ps):
            if self._momentum != 0.0:
                # torch.optim.sgd seeds a missing (None) buffer with the gradient
                # on the first step; ours exist from the start, so seed on step 1
                # on the device (no host read of the step count).
                bufs = [param_group.opt_state_m[k] for k in keys]
                for b, g, p, s in zip(bufs, gs, ps, steps):
                    d_p = -g if self._maximize else g
                    if self._weight_decay != 0:
                        d_p = d_p.add(p, alpha=self._weight_decay)
                    b.copy_(torch.where(s == 1.0, d_p,
                                        b.mul(self._momentum).add_(d_p, alpha=1 - self._dampening)))
                    upd = d_p.add(b, alpha=self._momentum) if self._nesterov else b
                    p.add_(upd, alpha=-self._lr)
            else:
                _torch_sgd.sgd(ps, gs, [None] * len(ps), has_sparse_grad=self._has_sparse_grad,
                               foreach=False, fused=False, weight_decay=self._weight_decay,
                               momentum=0.0, lr=self._lr, dampening=self._dampening,
                               nesterov=False, maximize=self._maximize)
            for s in steps:
                s.add_(1.0)
        return param_group


def _newton_schulz(grad, coeffs, steps, eps):
    """torch.optim._muon._zeropower_via_newtonschulz, with the normalisation
    written out of place: an in-place write through the transposed view would
    make Fused Eager flush (alias), splitting the step into several programs.
    Same ops, same roundings."""
    if steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    a, b, c = coeffs
    x = grad.bfloat16()
    if grad.size(0) > grad.size(1):
        x = x.T
    x = x.div(x.norm().clamp(min=eps))
    for _ in range(steps):
        gram = x @ x.T
        x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.T if grad.size(0) > grad.size(1) else x


def _muon_update(param, grad, buf, o):
    if grad.ndim != 2:
        raise ValueError("Param gradient must be a 2D matrix")
    buf.lerp_(grad, 1 - o._momentum)
    update = grad.lerp(buf, o._momentum) if o._nesterov else buf
    update = _newton_schulz(update, o._ns_coefficients, o._ns_steps, o._eps)
    param.mul_(1 - o._lr * o._weight_decay)
    param.add_(update, alpha=-_torch_muon._adjust_lr(o._lr, o._adjust_lr_fn, param.shape))


# ---- Muon --------------------------------------------------------------------------------


@dataclasses.dataclass
class _MuonParamGroup:
    """Parameters (2-D) and Muon state (momentum buffers, step counts)."""

    params: dict
    opt_state_m: dict = dataclasses.field(default_factory=dict)
    opt_steps: dict = dataclasses.field(default_factory=dict)


_register(_MuonParamGroup, ("params", "opt_state_m", "opt_steps"))


class Muon(Optimizer):
    """Muon (momentum + Newton-Schulz orthogonalised update, for 2-D
    weights), ``torch.optim.Muon``'s math (``torch.optim._muon``'s single-tensor
    update): its bf16 Newton-Schulz matmuls run on the MXU."""

    ParamGroup = _MuonParamGroup
    _HYPERPARAMETER_NAMES = ("lr", "weight_decay", "momentum", "nesterov", "ns_coefficients",
                             "eps", "ns_steps", "adjust_lr_fn", "use_bfloat16_moments",
                             "foreach", "has_complex")

    def __init__(self, lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
                 ns_coefficients=(3.4445, -4.7750, 2.0315), eps=1e-7, ns_steps=5,
                 adjust_lr_fn=None, use_bfloat16_moments=False, foreach=False, has_complex=False):
        super().__init__(lr=lr, weight_decay=weight_decay)
        self._momentum, self._nesterov = momentum, nesterov
        self._ns_coefficients, self._eps, self._ns_steps = tuple(ns_coefficients), eps, ns_steps
        self._adjust_lr_fn, self._use_bfloat16_moments = adjust_lr_fn, use_bfloat16_moments
        self._foreach, self._has_complex = foreach, has_complex

    def init_param_group(self, params):
        params = _named(params)
        bad = [n for n, p in params.items() if p.dim() != 2]
        if bad:
            raise ValueError(f"Muon only supports 2D parameters, got {bad}")
        dt = torch.bfloat16 if self._use_bfloat16_moments else None
        return self.ParamGroup(params=params, opt_state_m=_zeros(params, dt),
                               opt_steps=_steps(params, 1.0))

    def step(self, param_group, grads):
        if self._has_complex:
            raise ValueError("Complex parameters are not supported")
        ps, gs, ms, steps = _lists(param_group, grads, "opt_state_m", "opt_steps")
        with _one_program(ps):
            ms32 = [m.float() if m.dtype != p.dtype else m for m, p in zip(ms, ps)]
            for p, g, buf in zip(ps, gs, ms32):
                _muon_update(p, g, buf, self)
            for src, dst in zip(ms32, ms):
                if src is not dst:
                    dst.copy_(src)
            for s in steps:
                s.add_(1.0)
        return param_group


# ---- SingleTraceTrainer --------------------------------------------------------------------


def _loss_of(model, key_map, params, buffers, inputs, targets, compute_loss_fn):
    from torch import func
    from torch.nn.utils import stateless

    p = {key_map[k]: v for k, v in params.items()}
    b = {key_map[k]: v for k, v in buffers.items()}
    if isinstance(inputs, dict):
        args, kwargs = (), inputs
    elif isinstance(inputs, (tuple, list)):
        args, kwargs = tuple(inputs), {}
    else:
        args, kwargs = (inputs,), {}
    if compute_loss_fn is not None:
        with stateless._reparametrize_module(model, {**p, **b}, tie_weights=True):
            return compute_loss_fn(model, args, kwargs), buffers
    out = func.functional_call(model, (p, b), args, kwargs)
    if targets is not None:
        return torch.nn.functional.mse_loss(out, targets), buffers
    for attr in ("loss", "logits", "sample"):
        v = out.get(attr) if isinstance(out, dict) else getattr(out, attr, None)
        if isinstance(v, torch.Tensor):
            return (v if attr == "loss" else v.mean()), buffers
    for item in _pytree.tree_leaves(out):
        if isinstance(item, torch.Tensor):
            return item.mean(), buffers
    raise TypeError(f"Cannot extract loss from output of type {type(out)}")


def _call_compile_fn(compile_fn, gm, flat_inputs):
    import inspect

    try:
        ps = list(inspect.signature(compile_fn).parameters.values())
    except (TypeError, ValueError):
        return compile_fn(gm, flat_inputs)
    pos = [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(pos) == 1 and not any(p.kind == p.VAR_POSITIONAL for p in ps):
        return compile_fn(gm)
    return compile_fn(gm, flat_inputs)


class SingleTraceTrainer:
    """Forward + loss + backward + optimizer step traced into ONE graph
    (``make_fx`` over ``torch.func.grad_and_value``), compiled by
    ``compile_fn(graph_module[, example_flat_inputs])`` and run as one vTPU
    program per step (the graph runs in Fused Eager and is flushed once).

    The loss is ``compute_loss_fn(model, args, kwargs)`` if given, else MSE
    against ``targets``, else the output's ``loss`` (or the mean of
    ``logits``/``sample``/the first tensor)."""

    def __init__(self, model, optimizer=None, compile_fn=None, compute_loss_fn=None):
        self._model = model
        self._optimizer = optimizer
        self._compile_fn = compile_fn
        self._compute_loss_fn = compute_loss_fn
        if callable(getattr(model, "tie_weights", None)):
            model.tie_weights()
        self._key_map, params, self._buffers = {}, {}, {}
        for name, p in model.named_parameters():
            self._key_map[name.replace(".", "_")] = name
            params[name.replace(".", "_")] = p.detach()
        for name, b in model.named_buffers():
            self._key_map[name.replace(".", "_")] = name
            self._buffers[name.replace(".", "_")] = b.detach()
        self._param_group = optimizer.init_param_group(params) if optimizer is not None else params

    @property
    def param_group(self):
        """The parameters and optimizer state the step updates."""
        return self._param_group

    @property
    def params(self):
        """Parameters under their original (dotted) names."""
        p = getattr(self._param_group, "params", self._param_group)
        return {self._key_map[k]: v for k, v in p.items()}

    def make_compiled_train_step(self, example_inputs, example_targets=None, compile_fn=None):
        """Trace the step for these example inputs; returns
        ``train_step(inputs, targets=None) -> loss``."""
        from torch import func
        from torch.fx.experimental.proxy_tensor import make_fx

        compile_fn = compile_fn or self._compile_fn
        if compile_fn is None:
            raise ValueError("A compilation callback (compile_fn) must be provided either to "
                             "SingleTraceTrainer or to make_compiled_train_step.")
        has_t = example_targets is not None
        flat, in_spec = _pytree.tree_flatten(
            (self._param_group, self._buffers, example_inputs) + ((example_targets,) if has_t else ()))
        out_spec = None

        def step(*flat_args):
            nonlocal out_spec
            st = _pytree.tree_unflatten(list(flat_args), in_spec)
            group, bufs, inps = st[:3]
            tgts = st[3] if has_t else None
            params = getattr(group, "params", group)

            def loss_fn(p, b):
                return _loss_of(self._model, self._key_map, p, b, inps, tgts,
                                self._compute_loss_fn)

            grads, (loss, new_bufs) = func.grad_and_value(loss_fn, has_aux=True)(params, bufs)
            if self._optimizer is not None:
                outs, out_spec = _pytree.tree_flatten((loss, self._optimizer(group, grads), new_bufs))
            else:
                outs, out_spec = _pytree.tree_flatten((loss, grads, new_bufs))
            return tuple(outs)

        gm = make_fx(step, tracing_mode="fake")(*flat)
        compiled = _call_compile_fn(compile_fn, gm, flat)

        def train_step(inputs, targets=None):
            if (targets is None) == has_t:
                raise ValueError("targets must be given exactly when example_targets were")
            args, _ = _pytree.tree_flatten(
                (self._param_group, self._buffers, inputs) + ((targets,) if has_t else ()))
            with _one_program([a for a in args if isinstance(a, torch.Tensor)]):
                result = compiled(*args)
            loss, state, bufs = _pytree.tree_unflatten(list(result), out_spec)
            self._buffers = bufs
            if self._optimizer is not None:
                self._param_group = state
            else:
                for name, p in self._model.named_parameters():
                    g = state.get(name.replace(".", "_"))
                    if g is not None:
                        p.grad = g
            self._model.load_state_dict({self._key_map[k]: v for k, v in bufs.items()},
                                        strict=False)
            return loss

        return train_step
