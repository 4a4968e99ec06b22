"""The host line benchmarks print next to their figures (CPU kinds differ
between machines; a ratio means little without them)."""


def cpu_model():
    """The CPU's model name and its bf16 matrix/vector ISA flags."""
    try:
        with open("/proc/cpuinfo") as f:
            txt = f.read()
    except OSError:
        return "unknown CPU"
    name = next((ln.split(":", 1)[1].strip() for ln in txt.splitlines()
                 if ln.startswith("model name")), "unknown CPU")
    flags = next((ln.split(":", 1)[1].split() for ln in txt.splitlines()
                  if ln.startswith("flags")), [])
    isa = [f for f in ("amx_bf16", "avx512_bf16", "avx512f", "avx2") if f in flags]
    return f"{name} ({', '.join(isa) or 'no AVX2'})"
