"""Builds the native CPU kernels (gsprestore/native/kernels.cpp) into shared libraries next to
their loader when the package is built or installed; everything else is in pyproject.toml.

The kernels use no PyTorch or Python headers (plain C++ on raw pointers, called through ctypes),
so the isolated PEP 517 build needs only setuptools and a C++ compiler, and the library does not
depend on the torch version. On x86-64 two copies are built: ``_kernels`` for the baseline
instruction set and ``_kernels_avx2`` with AVX2 + FMA (chosen at run time from torch's CPU
capability). Without a C++ compiler the build goes on without them (``optional=True``) and
gsprestore runs its PyTorch path, saying so once.
"""

import os
import platform
import shutil

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# -fno-trapping-math: no kernel relies on floating-point exceptions; without it GCC keeps the
# float comparisons of the ADMM edge backward as branches and leaves that loop scalar (the values
# are the same: it allows no reassociation)
FLAGS = ["-O3", "-g0", "-std=c++20", "-fvisibility=hidden", "-pthread", "-Wno-psabi", "-fno-trapping-math"]


def kernel(name, source, extra=()):
    return Extension(
        f"gsprestore.native.{name}",
        sources=[f"gsprestore/native/{source}"],
        language="c++",
        extra_compile_args=FLAGS + list(extra),
        extra_link_args=["-pthread"],
        optional=True,
    )


ext_modules = [kernel("_kernels", "kernels.cpp")]
if platform.machine().lower() in ("x86_64", "amd64"):
    ext_modules.append(kernel("_kernels_avx2", "kernels_avx2.cpp", ["-mavx2", "-mfma"]))

class BuildExt(build_ext):
    """build_ext whose in-place copy (``pip install -e .``, ``setup.py build_ext --inplace``)
    replaces a library by renaming a finished copy over it instead of rewriting the file: a
    process that has the old library loaded (e.g. a training run of the same checkout) keeps its
    mapped copy instead of crashing. Every source the copies include counts as a dependency
    (kernels_avx2.cpp includes kernels.cpp), so a change to it rebuilds both."""

    def build_extension(self, ext):
        ext.depends = sorted(set(ext.depends) | {"gsprestore/native/kernels.cpp"})
        super().build_extension(ext)

    def copy_file(self, infile, outfile, *args, **kwargs):
        if not str(outfile).endswith((".so", ".pyd", ".dylib")):
            return super().copy_file(infile, outfile, *args, **kwargs)
        tmp = f"{outfile}.{os.getpid()}.tmp"
        shutil.copyfile(infile, tmp)
        shutil.copymode(infile, tmp)
        os.replace(tmp, outfile)
        return outfile, True


# the copies compile side by side (about 15 s each on one core)
setup(ext_modules=ext_modules, cmdclass={"build_ext": BuildExt},
      options={"build_ext": {"parallel": min(len(ext_modules), os.cpu_count() or 1)}})
