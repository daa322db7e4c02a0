"""The compiled kernel library (gsprestore/native): every built copy against the PyTorch path,
the loader's choice of copy, its argument checks, and the one-line fallback without a library.
(The kernel-by-kernel comparisons with the PyTorch formulas are in test_graph.py and
test_solvers.py; they run on the copy the loader picks.)"""

from __future__ import annotations

import glob
import logging
import math
import os

import pytest
import torch

from gsprestore.core import backend
from gsprestore.graph import operators as G
from gsprestore import native
from gsprestore.physics import sampling
from gsprestore.models import build_model
from gsprestore.methods.registry import observation

@pytest.fixture
def gen():
    return torch.Generator().manual_seed(16)


LIBRARIES = sorted(glob.glob(os.path.join(os.path.dirname(native.__file__), "_kernels*.*")))


@pytest.mark.parametrize("path", LIBRARIES or [None], ids=lambda p: os.path.basename(p) if p else "none")
@pytest.mark.parametrize("method", ["ugtv", "uglr", "ugtv-lite", "ugtv-lite-denoise"])
def test_every_built_library_gives_the_pytorch_forward(path, method, gen, monkeypatch):
    """Each shipped copy (baseline x86-64 and AVX2, whichever this CPU would not pick included)
    gives a whole inference forward equal to the PyTorch path; the width leaves a remainder
    after the 8-wide vectors and the height has interior and border rows. The CPU-size networks
    (the fused head and projection: 9 features, one group of six outputs and a remainder) and the
    noise-aware one with a noise level given (its denoiser's native CG) included."""
    if path is None:
        pytest.skip("no kernel library was built here")
    if "avx2" in os.path.basename(path) and torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("this CPU cannot run the AVX2 copy")
    lite = "lite" in method
    model = build_model(method, "demosaic", blocks=2, heads=3 if lite else 2, features=3, width=6, cg_iters=4,
                        **(dict(admm_iters=3) if method.startswith("ugtv") else {}),
                        **(dict(denoise_stages=2, denoise_iters=3) if method.endswith("denoise") else {}))
    gt = torch.rand(1, 3, 26 if lite else 13, 58 if lite else 29, generator=gen)
    known, mask = observation("demosaic", sampling.mosaic(gt))
    kw = {"noise": torch.tensor([[[3e-3, 2e-5]] * 3])} if method.endswith("denoise") else {}
    if method.endswith("denoise"):  # the trunk's noise channels and the passes' strength set to act
        with torch.no_grad():
            model.trunk.cnn.convs[0].weight.normal_(0, 0.2, generator=gen)
            model.denoiser.stages[0].log_strength.fill_(math.log(20.0))
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
        m, k, msk = model.to(dtype), known.to(dtype), mask.to(dtype)
        kwd = {n: v.to(dtype) for n, v in kw.items()}
        with backend.use(native.Kernels(path)), torch.no_grad():
            fast = m(k, msk, **kwd)
        with backend.use("torch"), torch.no_grad():
            slow = m(k, msk, **kwd)
        torch.testing.assert_close(fast, slow, rtol=tol, atol=tol)
        assert (fast - k).abs().max() > 0.01  # the solver changed the missing samples


def test_loader_picks_the_copy_for_the_cpu(monkeypatch):
    names = [os.path.basename(p).split(".")[0] for p in LIBRARIES]
    if "_kernels" not in names:
        pytest.skip("no baseline copy built here")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    assert os.path.basename(native.library_path()).split(".")[0] == "_kernels"
    if "_kernels_avx2" in names:
        monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
        assert os.path.basename(native.library_path()).split(".")[0] == "_kernels_avx2"


def test_kernels_check_dtypes_and_argument_counts():
    if not LIBRARIES:
        pytest.skip("no kernel library was built here")
    k = native.load()
    w = torch.zeros(1, 1, 12, 4, 5)
    x = torch.zeros(1, 1, 1, 4, 5)
    with pytest.raises(TypeError, match="one dtype"):
        k.diag_minus_adjacency(w, None, x.double(), x.clone())
    with pytest.raises(TypeError, match="float32/float64"):
        k.degree(w.half(), torch.zeros(1, 1, 1, 4, 5).half())
    with pytest.raises(ValueError, match="1 to 8"):
        k.admm_edge_replay([x] * 9, torch.zeros(1, 1, 24, 4, 5), torch.ones(1), x.clone())
    out = k.diag_minus_adjacency(w, None, x + 2, x.clone())  # no edges: out = x
    assert torch.equal(out, x + 2)


def test_missing_library_runs_the_pytorch_path_and_says_so_once(monkeypatch, caplog):
    monkeypatch.delenv("GSPRESTORE_NATIVE", raising=False)
    monkeypatch.setattr(native, "library_path", lambda: None)
    with backend.use("auto"), caplog.at_level(logging.WARNING, logger="gsprestore"):
        assert backend.native() is None
        assert not G.native_available()
        w = torch.rand(1, 1, 12, 6, 7)
        G._diag_minus_adjacency(w, None, torch.rand(1, 1, 1, 6, 7))
        assert "no compiled kernel library" in backend.error()
        with pytest.raises(native.NativeUnavailable):
            backend.use("native")
        assert backend.mode() == "auto"
    lines = [r.getMessage() for r in caplog.records if r.name == "gsprestore"]
    assert len(lines) == 1 and "\n" not in lines[0] and "PyTorch path" in lines[0]


def test_native_off_by_environment_says_nothing(monkeypatch, caplog):
    monkeypatch.setenv("GSPRESTORE_NATIVE", "0")
    with backend.use("auto"), caplog.at_level(logging.WARNING, logger="gsprestore"):
        assert backend.native() is None
        assert backend.error() == "disabled by GSPRESTORE_NATIVE"
    assert not [r for r in caplog.records if r.name == "gsprestore"]


def test_backend_use_switches_and_restores():
    before = (backend.mode(), backend.native())
    with backend.use("torch"):
        assert backend.native() is None and not G.native_available() and backend.mode() == "torch"
        with backend.use(before[1] if before[1] is not None else "torch"):
            assert backend.native() is before[1]
        assert backend.native() is None
    assert (backend.mode(), backend.native()) == before
    with pytest.raises(ValueError):
        backend.use("gpu")
    with backend.configure(fused_cg_mode=1, band_elements=0):
        assert backend.settings.fused_cg_mode == 1 and backend.settings.band_elements == 0
    assert backend.settings.fused_cg_mode == -1 and backend.settings.band_elements == 1 << 19
    with pytest.raises(TypeError):
        with backend.configure(no_such_setting=1):
            pass


@pytest.mark.slow
def test_the_wheel_carries_working_kernel_libraries(tmp_path, monkeypatch, built_wheel):
    """The wheel (what ``pip install .`` builds; setup.py compiles kernels.cpp, no PyTorch headers
    needed) carries the libraries; load each: its degrees equal the PyTorch formula's."""
    import shutil
    import zipfile

    if shutil.which("c++") is None and shutil.which("g++") is None:
        pytest.skip("no C++ compiler here")
    zf = zipfile.ZipFile(built_wheel)
    libs = [n for n in zf.namelist() if n.startswith("gsprestore/native/_kernels")]
    assert any(os.path.basename(n).split(".")[0] == "_kernels" for n in libs), zf.namelist()
    gen = torch.Generator().manual_seed(3)
    w = torch.rand(2, 3, 12, 7, 19, generator=gen)
    with backend.use("torch"):
        want = G.degree(w)
    for name in libs:
        if "avx2" in name and torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
            continue
        path = zf.extract(name, tmp_path / "unpacked")
        got = native.Kernels(path).degree(w, w.new_empty(2, 3, 1, 7, 19))
        torch.testing.assert_close(got, want)


def test_normalized_weights_native_equal_the_pytorch_ones_and_reuse_their_buffer(gen):
    """The native edge scaling (inference) gives the PyTorch formula's weights exactly, zero on the
    edges that leave the image; with a workspace the buffer of one call serves the next (another
    graph of the same size) without anything of the first left in it."""
    if not backend.native_available():
        pytest.skip("no native kernels in this install")
    ws: dict = {}
    for _ in range(2):
        w = torch.rand(2, 1, 12, 7, 9, generator=gen, dtype=torch.float64)
        with torch.no_grad():
            wn, diag = G.normalized_weights(w, workspace=ws)
            with backend.use("torch"):
                want, want_diag = G.normalized_weights(w)
        assert torch.equal(wn, want) and torch.equal(diag, want_diag)
        assert wn[..., 9, -2:, :].abs().sum() == 0  # offset 9, (2, 0), leaves the image on the last two rows
    assert ws["normalized_weights"] is wn
