# torch_tpu - top-level commands (see README.md).
#   make demo   install what is missing, build, train a small model on tpu
#   make test   install what is missing, build, run every test
#               (C runtime tests, the same under ASan+UBSan, pytest suite)
PY      ?= python3
EXT     := $(shell $(PY) -c "import sysconfig;print('torch_tpu/_C'+sysconfig.get_config_var('EXT_SUFFIX'))" 2>/dev/null)
RT_SRCS := $(wildcard runtime/src/*.c runtime/src/*.h runtime/include/*.h)
GLUE    := $(wildcard torch_tpu/csrc/*.cpp torch_tpu/csrc/*.h)

.PHONY: all deps build demo test test-c test-asan test-py test-fused bench opinfo-full zoo clean

all: build

# Python packages: torch 2.13.0 (the CPU wheel on disk) and the test tools.
deps:
	@$(PY) -c "import torch,sys;sys.exit(torch.__version__.split('+')[0]!='2.13.0')" 2>/dev/null || \
	  $(PY) -m pip install -q torch==2.13.0
	@$(PY) -c "import pytest,numpy,transformers,expecttest" 2>/dev/null || \
	  $(PY) -m pip install -q pytest numpy transformers expecttest

runtime/build/libtpurt.a: $(RT_SRCS)
	$(MAKE) -C runtime -j2 all

# First time: an editable install (registers the torch.backends autoload
# entry point); afterwards only the extension is rebuilt when sources change.
$(EXT): runtime/build/libtpurt.a $(GLUE) setup.py
	@if $(PY) -c "import importlib.metadata as m;m.distribution('torch-vtpu')" 2>/dev/null; then \
	  $(PY) setup.py -q build_ext --inplace; \
	else \
	  $(PY) -m pip install -q --no-build-isolation -e .; \
	fi
	@touch $(EXT)

build: deps $(EXT)

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
	TORCH_TPU_DEFER_AND_FUSE=1 $(PY) -m pytest tests --ignore=tests/test_opinfo.py --ignore=tests/test_zoo.py
test: build test-c test-asan test-py test-fused

bench: build
	$(PY) benchmarks/mxu.py --quick
	$(PY) benchmarks/conv.py
	$(PY) benchmarks/fused_eager.py --steps 3

# Full-dtype OpInfo sweep (CI runs the float32 form inside test-py).
opinfo-full: build
	$(PY) -m torch_tpu.ops --opinfo --dtypes all --report docs/opinfo_report.md

# Hugging Face architecture zoo report.
zoo: build
	$(PY) -m torch_tpu.zoo --report docs/zoo_report.md

clean:
	$(MAKE) -C runtime clean
	rm -rf build torch_tpu/_C*.so *.egg-info
