"""``torch.tpu.profiler``: vTPU programs in ``torch.profiler`` traces.

Under ``torch.profiler.profile(activities=[ProfilerActivity.CPU,
ProfilerActivity.PrivateUse1])`` (or with
``experimental_config=torch.tpu.profiler.TpuProfilerConfig()``), the
runtime records one event per program it runs (a fused graph, or one op in
Strict/Debug Eager): its IR ops, program (cache) key, chip and stream,
start/end on the stream's worker, bytes moved and dot FLOPs. The events are
on ``prof.tpu_events`` after the block and appear in
``prof.export_chrome_trace(path)`` as a ``tpu:N`` process (one row per
stream) next to the CPU events. ``python -m torch_tpu.profile script.py``
prints a top-programs table.
"""
import gzip
import json
import os

import torch
from torch.profiler import ProfilerActivity
from torch.profiler import profiler as _prof

from . import _C

__all__ = ["TpuProfilerConfig"]

_PID_BASE = 10000  # chrome-trace pid of tpu:N is _PID_BASE + N


def _fmt(v):
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


class TpuProfilerConfig(torch.profiler._ExperimentalConfig):
    """TorchTPU's profiler options (XLA profiling defaults). On the vTPU:
    ``device_tracer_level`` 0 turns the program events off, 1 (default)
    records them; ``host_tracer_level``/``python_tracer_level`` are kept for
    compatibility (host events come from torch.profiler itself); ``run_dir``
    (default: TORCH_TPU_PROFILER_OUTPUT_DIR, else none) receives
    ``<host>[_<worker_rank>].tpu_trace.json`` with the tpu events when the
    profile stops."""

    def __init__(self, *, host_tracer_level=2, device_tracer_level=1, python_tracer_level=0,
                 run_dir=None, worker_rank=None, experimental_options=None,
                 check_experimental_options=True):
        super().__init__()
        if worker_rank is not None:
            if not isinstance(worker_rank, str):
                raise TypeError(f"worker_rank must be a string, got {type(worker_rank)}")
            if ":" in worker_rank or "," in worker_rank:
                raise ValueError(f"worker_rank must not contain ':' or ',', got {worker_rank!r}")
        for name, v, hi in (("host_tracer_level", host_tracer_level, 3),
                            ("device_tracer_level", device_tracer_level, 1),
                            ("python_tracer_level", python_tracer_level, 1)):
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= hi:
                raise ValueError(f"{name} must be an int in [0, {hi}], got {v!r}")
        opts = dict(experimental_options or {})
        for k, v in opts.items():
            if not isinstance(k, str) or ":" in k or "," in k:
                raise ValueError(f"experimental option key {k!r} must be a str without ':' or ','")
            if not isinstance(v, (int, bool, str)):
                raise TypeError(f"experimental option {k!r}: value must be int, bool or str, "
                                f"got {type(v).__name__}")
        self.host_tracer_level = host_tracer_level
        self.device_tracer_level = device_tracer_level
        self.python_tracer_level = python_tracer_level
        self.run_dir = os.fspath(run_dir) if run_dir is not None else os.environ.get(
            "TORCH_TPU_PROFILER_OUTPUT_DIR") or None
        self.worker_rank = worker_rank
        self.experimental_options = opts
        self.check_experimental_options = check_experimental_options

    def config_string(self):
        """The options as TorchTPU passes them to its profiler backend."""
        items = {"host_tracer_level": self.host_tracer_level,
                 "device_tracer_level": self.device_tracer_level,
                 "python_tracer_level": self.python_tracer_level,
                 "check_experimental_options": self.check_experimental_options}
        if self.run_dir:
            items["run_dir"] = self.run_dir
        if self.worker_rank is not None:
            items["worker_rank"] = self.worker_rank
        items.update(self.experimental_options)
        return ",".join(f"{k}:{_fmt(v)}" for k, v in items.items())


def _wants_tpu(prof):
    cfg = getattr(prof, "experimental_config", None)
    if isinstance(cfg, TpuProfilerConfig):
        return cfg.device_tracer_level > 0
    return ProfilerActivity.PrivateUse1 in (getattr(prof, "activities", None) or ())


def _sync_all():
    for d in range(_C._device_count()):
        if _C._is_initialized(d):
            _C._synchronize(d)


def chrome_events(events, base_ns):
    """Chrome-trace events (ph X, plus process/thread names) for tpu events;
    ``base_ns`` is the trace's ``baseTimeNanoseconds``."""
    out, seen = [], set()
    for e in events:
        pid, tid = _PID_BASE + e["device"], e["stream"]
        if (pid, None) not in seen:
            seen.add((pid, None))
            out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                        "args": {"name": f"tpu:{e['device']} (vTPU)"}})
        if (pid, tid) not in seen:
            seen.add((pid, tid))
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                        "args": {"name": f"stream {tid}"}})
        out.append({"ph": "X", "cat": "tpu_program", "name": e["name"], "pid": pid, "tid": tid,
                    "ts": (e["start_ns"] - base_ns) / 1000.0,
                    "dur": max(e["end_ns"] - e["start_ns"], 0) / 1000.0,
                    "args": {"program": f"{e['program']:016x}", "ops": e["ops"],
                             "flush reason": e["reason"], "bytes": e["bytes"],
                             "flops": e["flops"], "device": e["device"],
                             "stream": e["stream"]}})
    return out


def _write_run_dir(prof, events):
    cfg = getattr(prof, "experimental_config", None)
    if not isinstance(cfg, TpuProfilerConfig) or not cfg.run_dir:
        return
    import socket

    os.makedirs(cfg.run_dir, exist_ok=True)
    name = socket.gethostname() + (f"_{cfg.worker_rank}" if cfg.worker_rank else "")
    with open(os.path.join(cfg.run_dir, name + ".tpu_trace.json"), "w") as f:
        json.dump({"traceEvents": chrome_events(events, 0), "displayTimeUnit": "ms"}, f)


def _install():
    """Hook torch.profiler (once): tpu tracing follows the profile's
    start/stop, and chrome exports gain the tpu events."""
    K = _prof._KinetoProfile
    if getattr(K, "_torch_tpu", False):
        return
    start0, stop0, export0 = K.start_trace, K.stop_trace, K.export_chrome_trace

    def start_trace(self):
        self.tpu_events = []
        self._tpu_on = _wants_tpu(self)
        if self._tpu_on:
            _sync_all()  # earlier work is not part of this profile
            _C._trace_enable(True)
        return start0(self)

    def stop_trace(self):
        if getattr(self, "_tpu_on", False):
            _sync_all()  # let the traced programs finish
            events, self.tpu_events_dropped = _C._trace_drain()
            _C._trace_enable(False)
            self.tpu_events = list(getattr(self, "tpu_events", [])) + events
            self._tpu_on = False
            _write_run_dir(self, events)
        return stop0(self)

    def export_chrome_trace(self, path, *args, **kwargs):
        ret = export0(self, path, *args, **kwargs)
        events = getattr(self, "tpu_events", None)
        if events:
            opener = gzip.open if str(path).endswith(".gz") else open
            with opener(path, "rt") as f:
                trace = json.load(f)
            trace["traceEvents"] = trace.get("traceEvents", []) + chrome_events(
                events, int(trace.get("baseTimeNanoseconds", 0)))
            with opener(path, "wt") as f:
                json.dump(trace, f)
        return ret

    K.start_trace, K.stop_trace, K.export_chrome_trace = start_trace, stop_trace, export_chrome_trace
    K._torch_tpu = True


_install()
