"""Build torch_tpu: the C runtime (runtime/, via make) and the thin C++ glue
(torch_tpu/csrc) as the extension torch_tpu._C.

Install with `pip install --no-build-isolation -e .` (build isolation would
download a multi-GB CUDA torch)."""
import glob
import os
import subprocess
import sysconfig

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
RUNTIME = os.path.join(ROOT, "runtime")
# oneDNN 3.x as pip installs it (onednn-cpu-gomp): under Python's data prefix
ONEDNN_LIB = os.path.join(sysconfig.get_paths()["data"], "lib")


class BuildWithRuntime(BuildExtension):
    def run(self):
        subprocess.check_call(["make", "-C", RUNTIME, "-j2", "all"])
        super().run()


ext = CppExtension(
    "torch_tpu._C",
    sources=sorted(glob.glob(os.path.join("torch_tpu", "csrc", "*.cpp"))),
    include_dirs=[os.path.join(RUNTIME, "include")],
    extra_objects=[os.path.join(RUNTIME, "build", "libtpurt.a")],
    extra_compile_args=["-O2", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
                        # export only PyInit__C and the runtime's TPU_API functions
                        "-fvisibility=hidden", "-fvisibility-inlines-hidden"],
    # oneDNN: the matrix unit (runtime/src/mxu/dnnl.c); SLEEF: vector math
    # (runtime/src/exec/vtpu/vmath.c)
    libraries=[":libdnnl.so.3", "sleef", "gomp", "m"],  # gomp: oneDNN's OpenMP
    library_dirs=[ONEDNN_LIB],
    runtime_library_dirs=[ONEDNN_LIB],
    extra_link_args=["-Wl,--version-script=" + os.path.join("torch_tpu", "csrc", "exports.map")],
)

setup(
    name="torch-vtpu",  # NOT "torch-tpu": PyPI serves Google's wheel under that name
    version="0.1.0",
    description="PyTorch on TPUs, with a C runtime and an embedded vTPU executor",
    packages=["torch_tpu", "torch_tpu.ops", "torch_tpu.distributed", "torch_tpu.kernels"],
    python_requires=">=3.10",
    install_requires=["torch==2.13.0"],
    ext_modules=[ext],
    cmdclass={"build_ext": BuildWithRuntime},
    entry_points={"torch.backends": ["torch_tpu = torch_tpu:_autoload"]},
)
