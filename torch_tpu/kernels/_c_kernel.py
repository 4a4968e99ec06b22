"""User kernels written in C: ``torch_tpu.kernels.c_kernel``.

A kernel is a C function plus a signature that states its inputs and
outputs with dtypes and how the output shapes derive from the input shapes::

    rmsnorm = c_kernel("rmsnorm", SOURCE,
                       "(float32[N,D] x, float32[D] w, float eps) -> float32[N,D]")
    y = rmsnorm(x, w, 1e-6)          # x, w: tpu tensors

The source is compiled once with the system C compiler (``$CC`` or ``cc``,
``-O2 -fPIC -shared -march=native``) into a shared object kept on disk
(``$TORCH_TPU_COMPILATION_CACHE_DIR/c_kernels/``, else
``~/.cache/torch_tpu/c_kernels/``), named by a hash of the source, the
signature, the compiler's identity, the flags and the host CPU, so a later
process loads it without compiling. The runtime ``dlopen``s it and the vTPU
executor runs the function as one node (``custom_call``) of the program the
call belongs to: in Fused Eager and under ``torch.compile(backend="tpu")``
the kernel is fused into one program with the ops around it, and the
program is cached like any other (the kernel's hash is part of the key).

The C function takes, in order: each argument in signature order (a tensor
as a pointer to contiguous row-major data, ``const T *``; a scalar by value),
then each output (``T *``, contiguous, to be written), then each size symbol
as ``int64_t`` in order of first appearance. Types: float32 ``float``,
float64 ``double``, float16 ``_Float16``, bfloat16 ``uint16_t`` (raw bits),
int8/uint8/int16/int32/int64 ``int8_t``..``int64_t``, bool ``_Bool``.
Scalar argument types: ``float`` (C float), ``double``, ``int`` (int64_t),
``bool``, or any of the dtype names above without brackets.

``parallel="N"`` declares the rows of size symbol N independent: the vTPU
then runs the function on blocks of rows on its threads.

Each kernel is also a ``torch.library`` custom op (``torch.ops.tpu_kernels.
<name>``) with a fake implementation, so ``torch.compile`` traces it.
"""
import ast
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time

import torch

from .. import _C

__all__ = ["c_kernel", "CKernel", "CKernelCompileError", "stats"]

_ABI = "tpuk1"  # generated wrapper / entry ABI version (part of the key)
_NS = "tpu_kernels"
_ENTRY = "torch_tpu_kernel_entry"

# tpu_base.h tpu_dtype codes
_TPU_DTYPE = {torch.bool: 0, torch.uint8: 1, torch.int8: 2, torch.int16: 3, torch.int32: 4,
              torch.int64: 5, torch.float16: 6, torch.bfloat16: 7, torch.float32: 8,
              torch.float64: 9}
_DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
           "bfloat16": torch.bfloat16, "int8": torch.int8, "uint8": torch.uint8,
           "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "bool": torch.bool}
_SCALAR_ALIASES = {"float": "float32", "double": "float64", "int": "int64"}
_CTYPE = {torch.float32: "float", torch.float64: "double", torch.float16: "_Float16",
          torch.bfloat16: "uint16_t", torch.int8: "int8_t", torch.uint8: "uint8_t",
          torch.int16: "int16_t", torch.int32: "int32_t", torch.int64: "int64_t",
          torch.bool: "_Bool"}
# output-size programs (tpu_exec.h TPUX_KOP_*)
_KOP_END, _KOP_LIT, _KOP_SYM, _KOP_ADD, _KOP_SUB, _KOP_MUL, _KOP_DIV, _KOP_MOD = range(8)
_BINOPS = {ast.Add: _KOP_ADD, ast.Sub: _KOP_SUB, ast.Mult: _KOP_MUL, ast.FloorDiv: _KOP_DIV,
           ast.Div: _KOP_DIV, ast.Mod: _KOP_MOD}

_lock = threading.RLock()
_kernels = {}  # key -> CKernel
_op_names = {}  # op name -> key
_stats = {"compiles": 0, "disk_hits": 0, "loads": 0, "compile_time_s": 0.0}
_lib = None


class CKernelCompileError(RuntimeError):
    """The C compiler rejected a kernel's source; the message holds its output."""


def stats():
    """Counters: ``compiles`` (compiler runs), ``disk_hits`` (kernels found
    compiled on disk), ``loads`` (kernels loaded in this process),
    ``compile_time_s``, ``runs`` (kernel executions by the vTPU)."""
    with _lock:
        d = dict(_stats)
    d["runs"] = _C._c_kernel_runs()
    return d


def _reset_stats():
    with _lock:
        _stats.update(compiles=0, disk_hits=0, loads=0, compile_time_s=0.0)


# ---- signature ---------------------------------------------------------------

class _Arg:
    def __init__(self, name, dtype, dims):
        self.name, self.dtype, self.dims = name, dtype, dims  # dims None: scalar

    @property
    def scalar(self):
        return self.dims is None


class _Sig:
    """A parsed signature: args (_Arg), syms (names), outs [(dtype, [ast expr])]."""

    def __init__(self, text, args, syms, outs, out_names):
        self.text, self.args, self.syms, self.outs, self.out_names = (
            text, args, syms, outs, out_names)

    def canonical(self):
        def dims(ds):
            return "[" + ",".join(str(d) for d in ds) + "]"
        a = ", ".join(f"{str(x.dtype)[6:]}{'' if x.scalar else dims(x.dims)} {x.name}"
                      for x in self.args)
        o = ", ".join(f"{str(dt)[6:]}[{','.join(ast.unparse(e) for e in es)}]"
                      for dt, es in self.outs)
        return f"({a}) -> ({o})"


def _split_top(s, sep=","):
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def _bad(sig, why):
    return ValueError(f"c_kernel signature {sig!r}: {why}")


def _parse_dtype(sig, name, scalar):
    n = _SCALAR_ALIASES.get(name, name) if scalar else name
    if n not in _DTYPES:
        raise _bad(sig, f"unknown {'scalar type' if scalar else 'dtype'} {name!r} (known: "
                   f"{', '.join(list(_DTYPES) + (list(_SCALAR_ALIASES) if scalar else []))})")
    return _DTYPES[n]


_IDENT = re.compile(r"[A-Za-z_]\w*\Z")
_ARG_RE = re.compile(r"(\w+)\s*\[([^\]]*)\]\s*(\w+)\Z|(\w+)\s+(\w+)\Z")
_OUT_RE = re.compile(r"(\w+)\s*\[([^\]]*)\]\s*(\w*)\Z")


def _parse_signature(sig):
    if not isinstance(sig, str):
        raise TypeError(f"c_kernel: signature must be a str, not {type(sig).__name__}")
    parts = sig.split("->")
    if len(parts) != 2:
        raise _bad(sig, "expected '(inputs) -> outputs'")
    lhs, rhs = parts[0].strip(), parts[1].strip()
    if not (lhs.startswith("(") and lhs.endswith(")")):
        raise _bad(sig, "the inputs must be in parentheses")
    args, syms, seen = [], [], set()
    body = lhs[1:-1].strip()
    for p in (_split_top(body) if body else []):
        m = _ARG_RE.match(p)
        if not m:
            raise _bad(sig, f"cannot parse argument {p!r} (expected 'dtype[dims] name' or "
                       "'scalar_type name')")
        if m.group(1):
            dtype = _parse_dtype(sig, m.group(1), False)
            name = m.group(3)
            dims = []
            for d in ([x.strip() for x in m.group(2).split(",")] if m.group(2).strip() else []):
                if re.fullmatch(r"\d+", d):
                    dims.append(int(d))
                elif _IDENT.match(d):
                    if d not in syms:
                        syms.append(d)
                    dims.append(d)
                else:
                    raise _bad(sig, f"dimension {d!r} of {name!r} must be a name or an integer")
        else:
            dtype = _parse_dtype(sig, m.group(4), True)
            if dtype in (torch.float16, torch.bfloat16):
                raise _bad(sig, f"scalar {m.group(5)!r}: float16/bfloat16 scalars are not "
                           "supported (use float)")
            name, dims = m.group(5), None
        if name in seen:
            raise _bad(sig, f"argument name {name!r} repeated")
        seen.add(name)
        args.append(_Arg(name, dtype, dims))
    if len(args) > 16:
        raise _bad(sig, "at most 16 arguments")
    if len(syms) > 16:
        raise _bad(sig, "at most 16 size symbols")
    if rhs.startswith("(") and rhs.endswith(")"):
        rhs = rhs[1:-1]
    outs, out_names = [], []
    for p in _split_top(rhs):
        m = _OUT_RE.match(p)
        if not m:
            raise _bad(sig, f"cannot parse output {p!r} (expected 'dtype[size exprs] [name]')")
        dtype = _parse_dtype(sig, m.group(1), False)
        exprs = []
        for d in (_split_top(m.group(2)) if m.group(2).strip() else []):
            try:
                e = ast.parse(d, mode="eval").body
            except SyntaxError:
                raise _bad(sig, f"output size {d!r} is not an expression") from None
            _check_expr(sig, e, syms)
            exprs.append(e)
        outs.append((dtype, exprs))
        out_names.append(m.group(3) or None)
    if not 1 <= len(outs) <= 8:
        raise _bad(sig, "1 to 8 outputs")
    return _Sig(sig, args, syms, outs, out_names)


def _check_expr(sig, e, syms):
    if isinstance(e, ast.Constant) and type(e.value) is int and e.value >= 0:
        return
    if isinstance(e, ast.Name):
        if e.id not in syms:
            raise _bad(sig, f"output size uses {e.id!r}, which is no input dimension "
                       f"(known: {', '.join(syms) or 'none'})")
        return
    if isinstance(e, ast.BinOp) and type(e.op) in _BINOPS:
        _check_expr(sig, e.left, syms)
        _check_expr(sig, e.right, syms)
        return
    raise _bad(sig, f"output size {ast.unparse(e)!r}: only names, integers, + - * // % allowed")


def _emit(e, syms, code):
    if isinstance(e, ast.Constant):
        code += [_KOP_LIT, e.value]
    elif isinstance(e, ast.Name):
        code += [_KOP_SYM, syms.index(e.id)]
    else:
        _emit(e.left, syms, code)
        _emit(e.right, syms, code)
        code += [_BINOPS[type(e.op)], 0]


def _eval(e, env):
    if isinstance(e, ast.Constant):
        return e.value
    if isinstance(e, ast.Name):
        return env[e.id]
    x, y = _eval(e.left, env), _eval(e.right, env)
    op = type(e.op)
    if op is ast.Add:
        return x + y
    if op is ast.Sub:
        return x - y
    if op is ast.Mult:
        return x * y
    if op is ast.Mod:
        return x % y
    return x // y


# ---- compiling ---------------------------------------------------------------

_toolchain = None


def _compiler():
    """(argv0, identity string): the compiler and what identifies its output."""
    global _toolchain
    if _toolchain is None:
        cc = os.environ.get("CC") or "cc"
        path = shutil.which(cc.split()[0]) or cc
        try:
            ver = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=60).stdout.splitlines()[:1]
        except OSError as e:
            raise CKernelCompileError(f"c_kernel: no C compiler ({cc}): {e}") from None
        cpu = ""
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith(("model name", "flags")):
                        cpu += line
                    if line.strip() == "":
                        break
        except OSError:
            pass
        _toolchain = (path, "|".join(ver) + "|" + hashlib.sha256(cpu.encode()).hexdigest()[:16])
    return _toolchain


_FLAGS = ["-O2", "-fPIC", "-shared", "-march=native",
          "-Werror=implicit-function-declaration", "-Werror=incompatible-pointer-types",
          "-Werror=int-conversion"]


def cache_dir():
    """Where compiled kernels are kept."""
    base = os.environ.get("TORCH_TPU_COMPILATION_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "torch_tpu")
    return os.path.join(base, "c_kernels")


def _wrapper(name, sig):
    ins = []
    for k, a in enumerate(sig.args):
        t = _CTYPE[a.dtype]
        ins.append(f"*(const {t} *)in[{k}]" if a.scalar else f"(const {t} *)in[{k}]")
    outs = [f"({_CTYPE[dt]} *)out[{o}]" for o, (dt, _) in enumerate(sig.outs)]
    syms = [f"sym[{s}]" for s in range(len(sig.syms))]
    call = ", ".join(ins + outs + syms)
    return (f"\n\n/* generated by torch_tpu.kernels.c_kernel ({_ABI}) */\n"
            f"#include <stdint.h>\n"
            f"void {_ENTRY}(void *const *in, void *const *out, const int64_t *sym);\n"
            f"void {_ENTRY}(void *const *in, void *const *out, const int64_t *sym) {{\n"
            f"  (void)in; (void)out; (void)sym;\n"
            f"  {name}({call});\n}}\n")


def _compile(name, src, path):
    cc, _ = _compiler()
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    fd, tmp_c = tempfile.mkstemp(prefix=f"{name}-", suffix=".c", dir=d)
    tmp_so = tmp_c[:-2] + ".so"
    try:
        with os.fdopen(fd, "w") as f:
            f.write(src)
        cmd = [cc, *_FLAGS, tmp_c, "-o", tmp_so, "-lm"]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        dt = time.perf_counter() - t0
        if p.returncode != 0:
            msg = (p.stderr or p.stdout).replace(tmp_c, f"<c_kernel {name}>")
            raise CKernelCompileError(
                f"c_kernel {name!r}: the C compiler failed ({' '.join(cmd[:1] + _FLAGS)}):\n"
                f"{msg.rstrip()}")
        os.replace(tmp_so, path)  # atomic: concurrent processes see a whole file
        with _lock:
            _stats["compiles"] += 1
            _stats["compile_time_s"] += dt
    finally:
        for f in (tmp_c, tmp_so):
            try:
                os.unlink(f)
            except OSError:
                pass


# ---- the kernel object -------------------------------------------------------

def _as_i64(u):
    return u - (1 << 64) if u >= (1 << 63) else u


class CKernel:
    """A compiled C kernel; call it like a function on tpu tensors."""

    def __init__(self, name, source, sig, key, hexkey, so_path):
        self.name, self.source, self.signature = name, source, sig.text
        self._sig, self.key, self._hex, self.so_path = sig, key, hexkey, so_path
        self.op = None  # torch.ops.tpu_kernels.<op name>.default

    def __repr__(self):
        return f"<c_kernel {self.name} {self.signature} key={self._hex[:16]}>"

    # argument checks PyTorch's Python bindings would do (TypeError)
    def _check_call(self, args):
        sig = self._sig
        if len(args) != len(sig.args):
            raise TypeError(f"{self.name}() takes {len(sig.args)} positional argument"
                            f"{'s' if len(sig.args) != 1 else ''} ({sig.text}) but "
                            f"{len(args)} {'were' if len(args) != 1 else 'was'} given")
        dev = None
        for a, spec in zip(args, sig.args):
            if spec.scalar:
                ok = isinstance(a, (bool, int, float, torch.SymInt, torch.SymFloat)) and (
                    spec.dtype.is_floating_point or not isinstance(a, (float, torch.SymFloat)))
                if not ok:
                    raise TypeError(f"{self.name}(): argument '{spec.name}' must be "
                                    f"{'float' if spec.dtype.is_floating_point else 'int'}, "
                                    f"not {type(a).__name__}")
                continue
            if not isinstance(a, torch.Tensor):
                raise TypeError(f"{self.name}(): argument '{spec.name}' must be Tensor, not "
                                f"{type(a).__name__}")
            if dev is None:
                dev = a.device
            elif a.device != dev:
                raise RuntimeError("Expected all tensors to be on the same device, but found "
                                   f"at least two devices, {dev} and {a.device}!")
        if dev is not None and dev.type not in ("tpu", "meta"):
            raise RuntimeError(f"{self.name}(): C kernels run on tpu tensors (the vTPU "
                               f"executor), got tensors on {dev}")

    def __call__(self, *args):
        self._check_call(args)
        return self.op(*args)

    # the tpu implementation: the generic runtime op
    def _tpu_impl(self, *args):
        tensors, fs, is_ = [], [], []
        for a, spec in zip(args, self._sig.args):
            if not spec.scalar:
                tensors.append(a)
            elif spec.dtype.is_floating_point:
                fs.append(float(a))
            else:
                is_.append(int(a))
        outs = torch.ops.torch_tpu.c_kernel(_as_i64(self.key), tensors, fs, is_)
        return outs[0] if len(outs) == 1 else tuple(outs)

    # shapes and checks without running (FakeTensor / meta)
    def _fake_impl(self, *args):
        sig, env, where = self._sig, {}, {}
        for a, spec in zip(args, sig.args):
            if spec.scalar:
                continue
            sdims = f"[{', '.join(str(d) for d in spec.dims)}]"
            if a.dtype != spec.dtype:
                raise RuntimeError(
                    f"{self.name}(): expected argument '{spec.name}' to have dtype "
                    f"{str(spec.dtype)[6:]} (signature {sig.text}), but got dtype "
                    f"{str(a.dtype)[6:]}")
            if a.dim() != len(spec.dims):
                raise RuntimeError(
                    f"{self.name}(): expected argument '{spec.name}' to have {len(spec.dims)} "
                    f"dimension(s) {sdims} (signature {sig.text}), but got shape "
                    f"{list(a.shape)}")
            for i, d in enumerate(spec.dims):
                n = a.shape[i]
                if isinstance(d, int):
                    torch._check(n == d, lambda: (
                        f"{self.name}(): expected argument '{spec.name}' to have shape {sdims}, "
                        f"but got shape {list(a.shape)}"))
                elif d in env:
                    torch._check(n == env[d], lambda: (
                        f"{self.name}(): size mismatch for '{d}': argument '{where[d][0]}' has "
                        f"{d} = {env[d]} (dimension {where[d][1]}) but argument '{spec.name}' "
                        f"has {d} = {n} (dimension {i}); signature {sig.text}"))
                else:
                    env[d], where[d] = n, (spec.name, i)
        outs = []
        dev = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
        for dt, exprs in sig.outs:
            shape = [_eval(e, env) for e in exprs]
            outs.append(torch.empty(shape, dtype=dt, device=dev))
        return outs[0] if len(outs) == 1 else tuple(outs)


def _library():
    global _lib
    if _lib is None:
        _lib = torch.library.Library(_NS, "FRAGMENT")
    return _lib


def _schema(opname, sig):
    def ty(a):
        if not a.scalar:
            return "Tensor"
        if a.dtype.is_floating_point:
            return "float"
        return "bool" if a.dtype == torch.bool else "int"
    args = ", ".join(f"{ty(a)} {a.name}" for a in sig.args)
    ret = "Tensor" if len(sig.outs) == 1 else "(" + ", ".join("Tensor" for _ in sig.outs) + ")"
    return f"{opname}({args}) -> {ret}"


def c_kernel(name, source, signature, *, parallel=None):
    """Compile (once, cached on disk) and load the C function ``name`` from
    ``source``; returns a :class:`CKernel` callable on tpu tensors. See the
    module docstring for the signature and the C calling convention.

    ``parallel``: the name of a size symbol whose rows are independent (it
    must be dimension 0 of every output, exactly, and nowhere but dimension
    0 of the inputs): the vTPU then calls the function on blocks of rows on
    its threads (arguments with the symbol at dimension 0 and the outputs
    offset to the block's first row, the symbol = the block's row count,
    the other arguments whole). Default: one call on one thread.

    Raises ``ValueError`` for a bad name, signature or ``parallel`` and
    :class:`CKernelCompileError` (a ``RuntimeError``) with the compiler's
    message when the source does not compile."""
    if not isinstance(name, str) or not _IDENT.match(name):
        raise ValueError(f"c_kernel: name must be a C identifier, got {name!r}")
    if not isinstance(source, str):
        raise TypeError(f"c_kernel: source must be a str, not {type(source).__name__}")
    sig = _parse_signature(signature)
    for a in sig.args:
        if a.name in ("in", "out", "sym") or not _IDENT.match(a.name):
            raise _bad(signature, f"argument name {a.name!r} is reserved")
    par = 0
    if parallel is not None:
        if parallel not in sig.syms:
            raise _bad(signature, f"parallel={parallel!r} is not a size symbol "
                       f"(known: {', '.join(sig.syms) or 'none'})")
        for a in sig.args:
            if not a.scalar and parallel in a.dims[1:]:
                raise _bad(signature, f"parallel symbol {parallel!r} must be dimension 0 only "
                           f"(argument {a.name!r})")
        for dt, es in sig.outs:
            if not es or not (isinstance(es[0], ast.Name) and es[0].id == parallel) or any(
                    isinstance(n, ast.Name) and n.id == parallel
                    for e in es[1:] for n in ast.walk(e)):
                raise _bad(signature, f"parallel symbol {parallel!r} must be exactly dimension "
                           "0 of every output")
        par = sig.syms.index(parallel) + 1
    _, ident = _compiler()
    material = "\0".join([_ABI, name, source, sig.canonical(), ident, " ".join(_FLAGS),
                          f"parallel={parallel}"])
    hexkey = hashlib.sha256(material.encode()).hexdigest()
    key = int(hexkey[:16], 16)
    with _lock:
        k = _kernels.get(key)
        if k is not None:
            return k
        path = os.path.join(cache_dir(), f"{name}-{hexkey[:24]}.so")
        if os.path.exists(path):
            _stats["disk_hits"] += 1
        else:
            _compile(name, source + _wrapper(name, sig), path)
        _C._c_kernel_register(
            name, signature, path, _ENTRY, key,
            [_TPU_DTYPE[a.dtype] for a in sig.args],
            [-1 if a.scalar else len(a.dims) for a in sig.args],
            [[] if a.scalar else [d if isinstance(d, int) else -(sig.syms.index(d) + 1)
                                  for d in a.dims] for a in sig.args],
            [a.name for a in sig.args], list(sig.syms),
            [_TPU_DTYPE[dt] for dt, _ in sig.outs], [len(es) for _, es in sig.outs],
            _program(sig), par)
        _stats["loads"] += 1
        k = CKernel(name, source, sig, key, hexkey, path)
        opname = name if name not in _op_names else f"{name}_{hexkey[:8]}"
        lib = _library()
        lib.define(_schema(opname, sig))
        lib.impl(opname, k._tpu_impl, "PrivateUse1")
        torch.library.register_fake(f"{_NS}::{opname}", k._fake_impl, lib=lib)
        _op_names[opname] = key
        k.op = getattr(getattr(torch.ops, _NS), opname).default
        _kernels[key] = k
        return k


def _program(sig):
    code = []
    for _, exprs in sig.outs:
        for e in exprs:
            _emit(e, sig.syms, code)
            code += [_KOP_END, 0]
    return code
