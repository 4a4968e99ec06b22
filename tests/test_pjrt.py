"""The PJRT executor (TORCH_TPU_BACKEND=pjrt) through XLA:CPU (xla-cpu-pjrt).

The executor is chosen once per process, so every check runs in a child
process with the backend set; the parent (this pytest process) stays on
the vTPU. Skipped when the xla-cpu-pjrt plugin is not installed (`make test`
installs it)."""
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

from torch_tpu import pjrt

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPU_PLUGIN = pjrt.discover().get("cpu")
needs_plugin = pytest.mark.skipif(CPU_PLUGIN is None, reason="xla-cpu-pjrt is not installed")


def run_child(code, **env):
    e = dict(os.environ)
    e.pop("TORCH_TPU_PJRT_PLUGIN", None)
    e.update({"PYTHONPATH": ROOT + os.pathsep + e.get("PYTHONPATH", ""),
              "TORCH_TPU_CPU_FALLBACK": "0",
              # its own chips: this pytest process may hold chip 0
              "TORCH_TPU_LOCK_DIR": tempfile.mkdtemp(prefix="torch_tpu_pjrt_locks_")})
    e.update(env)
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


@needs_plugin
def test_pjrt_matches_cpu_and_trains():
    """Matmul at every precision, an MLP and a small transformer block train
    with decreasing loss, Strict and Fused Eager, everything compiled by XLA."""
    rc, out = run_child("""
        import torch, torch_tpu
        import torch.nn as nn
        from torch_tpu import execution_mode as em
        assert torch_tpu.pjrt.executor() == "pjrt"
        name = torch.tpu.get_device_name()
        assert "PJRT" in name and "cpu" in name, name
        torch.manual_seed(0)
        a, b = torch.randn(33, 70), torch.randn(70, 17)
        for p in (torch.tpu.Precision.DEFAULT, torch.tpu.Precision.HIGH,
                  torch.tpu.Precision.HIGHEST):
            with torch.tpu.precision(p):
                got = (a.to("tpu") @ b.to("tpu")).cpu()
            # XLA:CPU computes f32 exactly at every precision
            torch.testing.assert_close(got, a @ b, rtol=1e-5, atol=1e-5)

        def train(model_fn, x, y, steps, mode, dev="tpu"):
            with em.eager_mode(mode):
                torch.manual_seed(1)
                m = model_fn().to(dev)
                opt = torch.optim.SGD(m.parameters(), lr=0.1)
                losses = []
                for _ in range(steps):
                    opt.zero_grad()
                    loss = nn.functional.mse_loss(m(x.to(dev)), y.to(dev))
                    loss.backward()
                    opt.step()
                    losses.append(loss.item())
            return losses

        x, y = torch.randn(64, 16), torch.randn(64, 4)
        mlp = lambda: nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
        ref = train(mlp, x, y, 15, "DEFER_NEVER", "cpu")
        for mode in ("DEFER_NEVER", "DEFER_AND_FUSE"):
            l = train(mlp, x, y, 15, mode)
            assert l[-1] < 0.9 * l[0], (mode, l)
            torch.testing.assert_close(torch.tensor(l), torch.tensor(ref), rtol=1e-4, atol=1e-5)
        block = lambda: nn.Sequential(
            nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True),
            nn.Flatten(), nn.Linear(16 * 8, 4))
        xs = torch.randn(8, 8, 16)
        ys = torch.randn(8, 4)
        l = train(block, xs, ys, 10, "DEFER_AND_FUSE")
        ref = train(block, xs, ys, 10, "DEFER_NEVER", "cpu")
        assert l[-1] < 0.9 * l[0], l
        torch.testing.assert_close(torch.tensor(l), torch.tensor(ref), rtol=1e-3, atol=1e-4)
        # the vTPU's run-time checks hold on PJRT too
        t = torch.randn(10, 4).to("tpu")
        try:
            torch.nn.functional.embedding(torch.tensor([[1, 10]]).to("tpu"), t).cpu()
            raise SystemExit("no IndexError")
        except IndexError as e:
            assert "index out of range" in str(e), e
        s = torch_tpu.pjrt.stats()
        assert s["compiles"] > 0 and s["executions"] >= s["compiles"], s
        assert s["fallbacks"] == 0, s
        print("OK", s)
    """, TORCH_TPU_BACKEND="pjrt")
    assert rc == 0 and "OK" in out, out


@needs_plugin
def test_transformer_inference_fast_path_on_pjrt():
    """Eval-mode nn.MultiheadAttention (with and without the weights) and
    nn.TransformerEncoderLayer lower to explicit scores on PJRT (its emitter
    has no attention node) and match CPU."""
    rc, out = run_child("""
        import torch, torch_tpu
        torch.manual_seed(0)
        x = torch.randn(2, 7, 16)
        kpm = torch.zeros(2, 7, dtype=torch.bool)
        kpm[0, -2:] = True
        mha = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
        layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
        with torch.no_grad(), torch.tpu.precision(torch.tpu.Precision.HIGHEST):
            for nw in (False, True):
                r = mha(x, x, x, key_padding_mask=kpm, need_weights=nw)
                o = mha.to("tpu")(x.to("tpu"), x.to("tpu"), x.to("tpu"),
                                  key_padding_mask=kpm.to("tpu"), need_weights=nw)
                mha.to("cpu")
                torch.testing.assert_close(o[0].cpu(), r[0], atol=2e-5, rtol=2e-5)
                assert (o[1] is None) == (not nw)
                if nw:
                    torch.testing.assert_close(o[1].cpu(), r[1], atol=2e-6, rtol=2e-5)
            r = layer(x)
            torch.testing.assert_close(layer.to("tpu")(x.to("tpu")).cpu(), r, atol=3e-5, rtol=3e-5)
        assert torch_tpu.pjrt.stats()["fallbacks"] == 0
        print("OK")
    """, TORCH_TPU_BACKEND="pjrt")
    assert rc == 0 and "OK" in out, out


@needs_plugin
def test_torch_compile_runs_through_pjrt():
    """torch.compile(backend="tpu") replays its captured programs through the
    same executor: a compiled MLP trains like the CPU model."""
    rc, out = run_child("""
        import torch, torch_tpu, torch.nn as nn
        def run(dev, compiled):
            torch.manual_seed(0)
            m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).to(dev)
            opt = torch.optim.SGD(m.parameters(), lr=0.1)
            f = torch.compile(m, backend="tpu") if compiled else m
            g = torch.Generator().manual_seed(1)
            x, y = torch.randn(64, 16, generator=g), torch.randn(64, 4, generator=g)
            ls = []
            for _ in range(6):
                opt.zero_grad()
                loss = nn.functional.mse_loss(f(x.to(dev)), y.to(dev))
                loss.backward()
                opt.step()
                ls.append(loss.item())
            return ls
        got, ref = run("tpu", True), run("cpu", False)
        torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), rtol=1e-4, atol=1e-5)
        assert got[-1] < got[0]
        s = torch_tpu.pjrt.stats()
        assert s["executions"] > 0 and s["fallbacks"] == 0, s
        print("OK", s)
    """, TORCH_TPU_BACKEND="pjrt")
    assert rc == 0 and "OK" in out, out


_CACHE_WORKLOAD = """
    import json, torch, torch_tpu, torch.nn as nn
    from torch_tpu import execution_mode as em
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4)).to("tpu")
    opt = torch.optim.AdamW(m.parameters(), lr=0.01)
    x, y = torch.randn(32, 16).to("tpu"), torch.randn(32, 4).to("tpu")
    losses = []
    for mode in ("DEFER_NEVER", "DEFER_AND_FUSE"):
        with em.eager_mode(mode):
            for _ in range(3):
                opt.zero_grad()
                loss = nn.functional.mse_loss(m(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
    s = torch.tpu._get_cache_stats()["pjrt"]
    print("STATS", json.dumps({"losses": losses, "pjrt": s}))
"""


def _stats(out):
    import json
    line = [l for l in out.splitlines() if l.startswith("STATS ")]
    assert line, out
    return json.loads(line[-1][6:])


@needs_plugin
def test_executables_come_from_the_disk_tier_in_a_second_process(tmp_path):
    """Compile once, run many: the first process compiles every program once
    (a program seen again reuses its loaded executable) and stores the
    serialized executables beside the graph cache; a second process with the
    same TORCH_TPU_COMPILATION_CACHE_DIR compiles nothing (0 XLA compiles,
    no StableHLO emitted) and computes the same losses bit for bit."""
    env = dict(TORCH_TPU_BACKEND="pjrt", TORCH_TPU_COMPILATION_CACHE_DIR=str(tmp_path))
    rc, out = run_child(_CACHE_WORKLOAD, **env)
    assert rc == 0, out
    cold = _stats(out)
    c = cold["pjrt"]
    assert c["compiles"] > 0 and c["disk_loads"] == 0, c
    assert c["disk_stores"] == c["compiles"] == c["emits"], c
    # 6 training steps, but a step's programs are compiled once, not per step
    assert c["executions"] > 2 * c["compiles"], c
    assert len(list(tmp_path.glob("*.pjrtx"))) == c["disk_stores"]
    rc, out = run_child(_CACHE_WORKLOAD, **env)
    assert rc == 0, out
    warm = _stats(out)
    w = warm["pjrt"]
    assert w["compiles"] == 0 and w["emits"] == 0, w
    assert w["disk_loads"] == c["compiles"], (c, w)
    assert warm["losses"] == cold["losses"]
    # a damaged file is compiled afresh (and rewritten), never trusted
    for f in tmp_path.glob("*.pjrtx"):
        f.write_bytes(f.read_bytes()[:40])
    rc, out = run_child(_CACHE_WORKLOAD, **env)
    assert rc == 0, out
    bad = _stats(out)
    assert bad["pjrt"]["compiles"] == c["compiles"], bad
    assert bad["losses"] == cold["losses"]


_ALIAS_WORKLOAD = """
    import json, torch, torch_tpu, torch.nn as nn
    from torch_tpu import execution_mode as em
    def work(dev):
        torch.manual_seed(0)
        x = torch.randn(4096).to(dev)
        r = {}
        with em.eager_mode("DEFER_NEVER"):
            a = x.clone(); a.add_(1.5)                      # donated: out == in
            r["inplace"] = a
            b = x.clone(); b[1:] = b[:-1] * 2                # overlapping views
            r["overlap"] = b
            c = x.clone(); c.copy_(c.flip(0))                # reads all, writes all
            r["flip"] = c
            d = x.clone(); d[:2048].mul_(d[2048:])           # disjoint halves
            r["halves"] = d
            e, f, h = x.clone(), x.clone(), x.clone()        # materialized
        with em.eager_mode("DEFER_AND_FUSE"):
            z = e * 2                      # reads e before the in-place update
            e.add_(1)
            w = e + z                      # reads the updated e
            v = e.view(64, 64).t().contiguous()
            r["fused_e"], r["fused_z"], r["fused_w"], r["fused_v"] = e, z, w, v
            g = f[::2]                     # strided view of a donated input
            f.mul_(3)
            r["fused_f"], r["fused_g"] = f, g.clone()
            h[1:] = h[:-1] * 2 + h[1:]     # output overlaps an input it is not
            r["fused_h"] = h
        torch.manual_seed(1)
        m = nn.Linear(64, 64).to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=0.1)
        inp = torch.randn(16, 64).to(dev)
        for mode in ("DEFER_NEVER", "DEFER_AND_FUSE"):
            with em.eager_mode(mode):
                for _ in range(3):
                    opt.zero_grad()
                    m(inp).square().mean().backward()
                    opt.step()
        r["weight"], r["bias"] = m.weight, m.bias
        return {k: v.detach().cpu() for k, v in r.items()}
    got, ref = work("tpu"), work("cpu")
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-5, atol=1e-6, msg=k)
    print("STATS", json.dumps({"pjrt": torch.tpu._get_cache_stats()["pjrt"],
                               "sums": {k: float(v.double().sum()) for k, v in got.items()}}))
"""


@needs_plugin
def test_donation_and_in_place_outputs_keep_aliasing_semantics():
    """On XLA:CPU the runtime's memory is the device's: inputs go zero-copy,
    an input an output overwrites is donated, other outputs are written
    straight into their storage. Overlapping views, inputs read after an
    in-place update, flips and strided views of donated inputs must give
    CPU's results, and the same as with every output copied back
    (TORCH_TPU_PJRT_COPY=1)."""
    rc, out = run_child(_ALIAS_WORKLOAD, TORCH_TPU_BACKEND="pjrt")
    assert rc == 0, out
    zc = _stats(out)
    s = zc["pjrt"]
    assert s["donated_inputs"] > 0 and s["direct_outputs"] > 0, s
    rc, out = run_child(_ALIAS_WORKLOAD, TORCH_TPU_BACKEND="pjrt", TORCH_TPU_PJRT_COPY="1")
    assert rc == 0, out
    cp = _stats(out)
    assert cp["pjrt"]["donated_inputs"] == 0 and cp["pjrt"]["direct_outputs"] == 0, cp
    assert cp["sums"] == zc["sums"]
    # zero-copy moved fewer bytes through the plugin than copying everything
    assert s["bytes_h2d"] + s["bytes_d2h"] < cp["pjrt"]["bytes_h2d"] + cp["pjrt"]["bytes_d2h"]


@needs_plugin
def test_unsupported_op_is_a_clear_error_or_a_counted_fallback():
    code = """
        import torch, torch_tpu
        a = torch.randn(4, 4) + 4 * torch.eye(4)
        try:
            lu, piv = torch.linalg.lu_factor(a.to("tpu"))
            lu.cpu()
            print("RAN", torch_tpu.pjrt.stats())
        except RuntimeError as e:
            print("ERR", e)
    """
    rc, out = run_child(code, TORCH_TPU_BACKEND="pjrt")
    assert "ERR" in out and "unsupported on PJRT: " in out, out
    rc, out = run_child(code, TORCH_TPU_BACKEND="pjrt", TORCH_TPU_PJRT_FALLBACK="vtpu")
    assert "RAN" in out and "'fallbacks': 0" not in out, out


def test_bad_plugin_fails_with_a_clear_message(tmp_path):
    rc, out = run_child("""
        import torch, torch_tpu
        try:
            torch.tpu.get_device_name()
        except RuntimeError as e:
            print("ERR", e)
    """, TORCH_TPU_BACKEND="pjrt", TORCH_TPU_PJRT_PLUGIN=str(tmp_path / "nope.so"))
    assert "ERR PJRT plugin" in out and "cannot load" in out, out


def test_libtpu_without_tpu_fails_with_a_clear_message(tmp_path):
    """The installed libtpu (or TORCH_TPU_TEST_LIBTPU, or a stand-in file
    named libtpu.so: the check runs before the library is loaded) on a
    machine without TPU device nodes fails at once with a clear message
    (the real libtpu otherwise retries the GCE metadata server for minutes)."""
    import glob

    if glob.glob("/dev/accel[0-9]*") or glob.glob("/dev/vfio/[0-9]*"):
        pytest.skip("this machine has TPU device nodes")
    path = pjrt.discover().get("tpu") or os.environ.get("TORCH_TPU_TEST_LIBTPU")
    if not path:
        path = str(tmp_path / "libtpu.so")
        open(path, "wb").close()
    rc, out = run_child("""
        import torch, torch_tpu
        try:
            print("NAME", torch.tpu.get_device_name())
        except RuntimeError as e:
            print("ERR", e)
    """, TORCH_TPU_BACKEND="pjrt", TORCH_TPU_PJRT_PLUGIN=path)
    assert "ERR PJRT plugin" in out and "no TPU on this machine" in out, out
    assert "libtpu runs only on a TPU VM" in out, out


def test_discovery_and_configure():
    found = pjrt.discover()
    assert set(found) <= {"tpu", "cuda", "cpu"}
    assert all(os.path.exists(p) for p in found.values())
    env = {"TORCH_TPU_BACKEND": "vtpu"}
    assert pjrt.configure(env) is None and "TORCH_TPU_PJRT_PLUGIN" not in env
    env = {"TORCH_TPU_BACKEND": "pjrt", "TORCH_TPU_PJRT_PLUGIN": "/x.so"}
    assert pjrt.configure(env) == "/x.so"
    env = {"TORCH_TPU_BACKEND": "pjrt"}
    got = pjrt.configure(env)
    want = found.get("tpu") or found.get("cuda") or found.get("cpu")
    assert got == want and env.get("TORCH_TPU_PJRT_PLUGIN") == want
    env = {}
    got = pjrt.configure(env)
    accel = found.get("tpu") or found.get("cuda")
    assert got == accel
    assert env.get("TORCH_TPU_BACKEND") == ("auto" if accel else None)


# OpInfo CI subset through XLA:CPU: one or two OpInfos per emitter family
# (elementwise, CHLO transcendental, compare/select, shape, reductions with
# regions, argmax, dot_general, convolution, pooling windows, gather/scatter,
# sort, cumulative ops, softmax/norms/losses, FFT, Cholesky, triangular
# solve, the Philox RNG). The full float32 sweep is `make opinfo-pjrt`.
PJRT_OPINFO_SUBSET = (
    "add mul div.no_rounding_mode pow atan2 exp tanh erf erfinv lgamma sigmoid where clamp "
    "eq isnan cat transpose flip nn.functional.pad.constant narrow sum mean amax prod argmax "
    "var std matmul bmm addmm einsum nn.functional.conv2d nn.functional.conv_transpose1d "
    "nn.functional.max_pool2d nn.functional.avg_pool2d gather scatter_add index_select "
    "index_add take_along_dim sort topk cumsum softmax log_softmax nn.functional.layer_norm "
    "nn.functional.cross_entropy nn.functional.embedding fft.rfft linalg.cholesky "
    "triangular_solve nn.functional.dropout rand_like"
).split()


@needs_plugin
def test_opinfo_subset_through_xla_cpu(tmp_path):
    out_json = tmp_path / "pjrt_opinfo.json"
    e = dict(os.environ, TORCH_TPU_BACKEND="pjrt",
             TORCH_TPU_LOCK_DIR=tempfile.mkdtemp(prefix="torch_tpu_pjrt_locks_"),
             PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    e.pop("TORCH_TPU_PJRT_PLUGIN", None)
    p = subprocess.run([sys.executable, "-m", "torch_tpu.ops", "--opinfo", "--dtypes", "float32",
                        "--budget", "30", "--ops", ",".join(PJRT_OPINFO_SUBSET),
                        "--json", str(out_json)],
                       env=e, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    import json

    res = json.loads(out_json.read_text())["results"]
    seen = {r["op"] for r in res}
    assert seen == set(PJRT_OPINFO_SUBSET), set(PJRT_OPINFO_SUBSET) - seen
    bad = {r["op"]: (r["counts"], r["examples"][:1]) for r in res
           if any(r["counts"].get(k) for k in ("fail", "unsupported", "error", "crash", "skipped"))}
    assert not bad, bad
    passed = sum(r["counts"].get("pass", 0) + r["counts"].get("random", 0) for r in res)
    assert passed >= 2 * len(PJRT_OPINFO_SUBSET)
