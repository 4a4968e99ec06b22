"""pytest setup: the suite runs on its own vTPU chips (a private lock dir)
with the CPU fallback disabled, so anything that is not native fails."""
import os
import tempfile

# Every temporary directory this process makes (its lock dir, the child
# processes' lock dirs, sweeps' scratch) goes under one root, removed when
# the run ends.
_TMP_ROOT = tempfile.TemporaryDirectory(prefix="torch_tpu_tests_")
tempfile.tempdir = _TMP_ROOT.name

# Must happen before torch (and its torch_tpu autoload) initialises the runtime.
os.environ.setdefault("TORCH_TPU_LOCK_DIR", tempfile.mkdtemp(prefix="torch_tpu_test_locks_"))
os.environ.setdefault("TORCH_TPU_CPU_FALLBACK", "0")

import pytest  # noqa: E402
import torch  # noqa: E402

import torch_tpu  # noqa: E402,F401

DEV = torch.device("tpu")


@pytest.fixture(autouse=True)
def _highest_precision_and_sync():
    """Tests compare against CPU fp32: run matmuls at HIGHEST unless a test
    says otherwise; make sure nothing is left queued between tests."""
    with torch.tpu.precision(torch.tpu.Precision.HIGHEST):
        yield
    torch.tpu.synchronize()


def assert_close(actual, expected, **kw):
    """Compare a tpu result with a CPU reference (dtype and values)."""
    assert actual.device.type == "tpu", actual.device
    torch.testing.assert_close(actual.cpu(), expected, **kw)
