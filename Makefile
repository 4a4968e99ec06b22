# torch_tpu - top-level commands (see README.md).
#   make demo   install what is missing, build, train a small model on tpu
#   make test   install what is missing, build, run every test
#               (C runtime tests, the same under ASan+UBSan, pytest suite)
PY      ?= python3

.PHONY: all deps build demo test test-c test-asan test-py test-fused test-pjrt bench opinfo-full opinfo-pjrt zoo zoo-pjrt clean

all: build

# System library the C runtime links: SLEEF (vector math) from Debian's
# libsleef-dev; installed with apt-get when missing (needs root, as on CI),
# else the build stops with what to install.
SYSDEPS_HDR = sleef.h
SYSDEPS_PKG = libsleef-dev
# oneDNN 3.x (the matrix unit's GEMM and convolution engine): PyPI's OpenMP
# build, library and headers, under Python's data prefix (runtime/Makefile)
ONEDNN_PIP = onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0

# Python packages: torch 2.13.0 (the CPU wheel on disk) and the test tools.
deps:
	@missing=; for h in $(SYSDEPS_HDR); do \
	  printf '#include <%s>\n' $$h | $${CC:-cc} -E -x c - >/dev/null 2>&1 || missing=1; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing $(SYSDEPS_PKG) (apt-get)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(SYSDEPS_PKG) >/dev/null || exit 1; \
	  else \
	    echo "error: missing system libraries; install them with: sudo apt-get install $(SYSDEPS_PKG)" >&2; exit 1; \
	  fi; \
	fi
	@$(PY) -c "import sysconfig,os,sys;d=sysconfig.get_paths()['data'];sys.exit(not all(os.path.exists(os.path.join(d,f)) for f in ('include/oneapi/dnnl/dnnl.h','lib/libdnnl.so.3')))" || \
	  $(PY) -m pip install -q $(ONEDNN_PIP)
	@TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PY) -c "import torch,sys;sys.exit(torch.__version__.split('+')[0]!='2.13.0')" 2>/dev/null || \
	  $(PY) -m pip install -q torch==2.13.0
	@$(PY) -c "import pytest,numpy,transformers,expecttest" 2>/dev/null || \
	  $(PY) -m pip install -q pytest numpy transformers expecttest
	@# Helion: @helion.kernel on tpu tensors (reference mode); helion declares no torch
	@# dependency, so this never replaces torch 2.13.0
	@$(PY) -c "import importlib.util as u,sys;sys.exit(u.find_spec('helion') is None)" 2>/dev/null || \
	  $(PY) -m pip install -q helion==1.5.1
	@# JAX (CPU wheel): torch.tpu.pallas lowers JAX/Pallas functions with it (tests/test_pallas.py)
	@$(PY) -c "import jax,jaxlib" 2>/dev/null || \
	  $(PY) -m pip install -q jax jaxlib
	@# XLA:CPU PJRT plugin + the official pjrt_c_api.h the runtime builds against
	@$(PY) -c "import xla_plugins.xla_cpu_pjrt" 2>/dev/null || \
	  $(PY) -m pip install -q xla-cpu-pjrt

# The package must be installed from THIS checkout (editable, which also
# registers the torch.backends autoload entry point); after that only the
# extension is rebuilt, incrementally.
INSTALLED = $(shell cd / && $(PY) -I -c "import importlib.util as u,os;s=u.find_spec('torch_tpu');print(os.path.realpath(os.path.dirname(s.origin)) if s else '')" 2>/dev/null)

build: deps
	$(MAKE) -C runtime -j2 all
	@if [ "$(INSTALLED)" != "$(realpath torch_tpu)" ]; then \
	  echo "installing torch-vtpu (editable) from $(CURDIR)"; \
	  TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PY) -m pip install -q --no-build-isolation -e . ; \
	else \
	  TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PY) setup.py -q build_ext --inplace ; \
	fi

demo: build
	$(PY) examples/train_mlp.py

test-c:
	$(MAKE) -C runtime -j2 test
test-asan:
	$(MAKE) -C runtime -j2 test-asan
test-py: build
	$(PY) -m pytest tests
# The suite again in Fused Eager (DeferAndFuse) mode (OpInfo and zoo run once).
test-fused: build
	TORCH_TPU_DEFER_AND_FUSE=1 $(PY) -m pytest tests --ignore=tests/test_opinfo.py --ignore=tests/test_zoo.py --ignore=tests/test_pjrt_tier.py
# PJRT tier: the op tests again with every program compiled by XLA:CPU
# (inside test-py: tests/test_pjrt.py adds an OpInfo subset, training and
# the error paths; tests/test_pjrt_tier.py the OpInfo float32 sweep, one
# sample per OpInfo, and the zoo forward of a subset, with every exclusion
# and its reason).
test-pjrt: build
	TORCH_TPU_BACKEND=pjrt $(PY) -m pytest tests/test_ops.py
test: build test-c test-asan test-py test-fused test-pjrt

bench: build
	$(PY) benchmarks/mxu.py --quick
	$(PY) benchmarks/conv.py
	$(PY) benchmarks/fused_eager.py --steps 3
	$(PY) benchmarks/vtpu_jit.py --rounds 3
	$(PY) benchmarks/c_kernel.py
	$(PY) benchmarks/inference.py --reps 3
	$(PY) benchmarks/attention.py
	$(PY) benchmarks/ops.py

# Full-dtype OpInfo sweep (CI runs the float32 form inside test-py).
opinfo-full: build
	$(PY) -m torch_tpu.ops --opinfo --dtypes all --report docs/opinfo_report.md

# Float32 OpInfo sweep through XLA:CPU PJRT (~15 min on 2 cores).
opinfo-pjrt: build
	TORCH_TPU_BACKEND=pjrt $(PY) -m torch_tpu.ops --opinfo --dtypes float32 --budget 20 --report docs/opinfo_pjrt_report.md

# Hugging Face architecture zoo report.
zoo: build
	$(PY) tools/zoo.py --report docs/zoo_report.md

# The zoo (every architecture, forward and backward) through XLA:CPU PJRT.
zoo-pjrt: build
	TORCH_TPU_BACKEND=pjrt $(PY) tools/zoo.py --stages forward,backward --report docs/zoo_pjrt_report.md

clean:
	$(MAKE) -C runtime clean
	rm -rf build torch_tpu/_C*.so *.egg-info
