"""The tiled engine: tiled == untiled for halo-bounded methods (exact when overlap >= halo),
tiles on the 2x2 Bayer grid, blending weights a partition of unity, odd and tiny sizes, devices,
precision, NaN/Inf checks, out-of-memory retry, and the numpy/torch Python API."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gsprestore
from gsprestore.runtime import tiling as engine
from gsprestore.core.errors import GspError, UsageError
from gsprestore.methods.registry import Restorer, get_restorer
from gsprestore.physics.sampling import mosaic


def box_demosaic(radius: int = 1, calls: list | None = None) -> Restorer:
    """A fake demosaicker with a known halo: channel c = (2r+1)^2 box mean applied c+1 times
    (replicate padding), so its output depends on exactly 3 * radius pixels around it."""

    def fn(y: torch.Tensor, pattern: str) -> torch.Tensor:
        if calls is not None:
            calls.append((tuple(y.shape), pattern))
        k = 2 * radius + 1
        outs, x = [], y
        for _ in range(3):
            x = F.avg_pool2d(F.pad(x, (radius,) * 4, mode="replicate"), k, stride=1)
            outs.append(x)
        return torch.cat(outs, dim=1)

    return Restorer("box", "demosaic", fn, halo=3 * radius)


def nearest_upscale(radius: int = 1) -> Restorer:
    """A fake 2x method: box mean (halo ``radius`` LR pixels) then nearest-neighbour 2x."""

    def fn(y: torch.Tensor, pattern: str) -> torch.Tensor:
        k = 2 * radius + 1
        x = F.avg_pool2d(F.pad(y, (radius,) * 4, mode="replicate"), k, stride=1)
        return x.repeat_interleave(2, -2).repeat_interleave(2, -1)

    return Restorer("nearest", "upscale2x", fn, halo=2 * radius)


@pytest.fixture
def rng():
    return torch.Generator().manual_seed(7)


# --------------------------------------------------------------------------- plan


@pytest.mark.parametrize("n", [2, 17, 64, 65, 301, 1000])
@pytest.mark.parametrize("tile", [0, 8, 32, 50, 256])
def test_axis_plan_even_and_partition_of_unity(n, tile):
    for scale in (1, 2):
        tiles = engine.plan_axis(n, tile, overlap=8, blend=4, scale=scale)
        cores = [(t.core_lo, t.core_hi) for t in tiles]
        assert cores[0][0] == 0 and cores[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(cores, cores[1:]))
        for t in tiles:
            assert t.lo % 2 == 0 and t.core_lo % 2 == 0  # every window starts on a 2x2 Bayer block
            assert t.lo <= t.core_lo and t.hi >= t.core_hi
            assert scale * t.lo <= t.out_lo and t.out_hi <= scale * t.hi
        total = np.zeros(scale * n)
        for t in tiles:
            total[t.out_lo : t.out_hi] += t.weight
        np.testing.assert_allclose(total, 1.0, atol=1e-6)


def test_cores_are_balanced():
    cores = engine.split_axis(1000, 256)
    sizes = [b - a for a, b in cores]
    assert len(cores) == 4 and max(sizes) - min(sizes) <= 2 and max(sizes) <= 256


# --------------------------------------------------------------------------- tiled == untiled


@pytest.mark.parametrize("shape", [(64, 64), (37, 101), (130, 71)])
@pytest.mark.parametrize("tile,overlap", [(16, 6), (32, 8), (24, 12), (40, 32)])
def test_tiled_equals_untiled_fake(rng, shape, tile, overlap):
    r = box_demosaic(radius=2)  # halo 6
    y = torch.rand(1, *shape, generator=rng)
    whole = engine.restore(r, y, tile=10**6)
    tiled = engine.restore(r, y, tile=tile, overlap=overlap)
    assert tiled.shape == (*shape, 3)
    torch.testing.assert_close(tiled, whole, atol=1e-6, rtol=0)


def test_crop_only_is_bit_exact(rng):
    """overlap == halo leaves no room to blend: tiles are cropped and the result is identical."""
    r = box_demosaic(radius=2)
    y = torch.rand(1, 90, 70, generator=rng)
    assert torch.equal(engine.restore(r, y, tile=20, overlap=6), engine.restore(r, y, tile=10**6))


def test_overlap_below_halo_differs_and_is_noticed(rng):
    r = box_demosaic(radius=2)
    y = torch.rand(1, 90, 70, generator=rng)
    notes = []
    tiled = engine.restore(r, y, tile=20, overlap=2, notice=notes.append)
    assert (tiled - engine.restore(r, y, tile=10**6)).abs().max() > 1e-3
    assert any("halo" in n for n in notes)


@pytest.mark.parametrize("method", ["bilinear", "malvar", "menon"])
@pytest.mark.parametrize("pattern", ["RGGB", "GBRG"])
def test_tiled_equals_untiled_baselines(rng, method, pattern):
    r = get_restorer(method, "demosaic")
    y = mosaic(torch.rand(3, 96, 130, generator=rng), pattern)
    whole = engine.restore(r, y, pattern, tile=10**6)
    # the engine adds nothing for even images: one tile is the method itself
    torch.testing.assert_close(whole.permute(2, 0, 1), r(y[None], pattern)[0], atol=0, rtol=0)
    tiled = engine.restore(r, y, pattern, tile=32, overlap=r.halo + r.halo % 2)
    torch.testing.assert_close(tiled, whole, atol=1e-6, rtol=0)


@pytest.mark.parametrize("method", ["bicubic", "bicubic-halfpixel"])
def test_tiled_equals_untiled_upscale(rng, method):
    r = get_restorer(method, "upscale2x")
    y = torch.rand(3, 45, 62, generator=rng)
    whole = engine.restore(r, y, tile=10**6)
    assert whole.shape == (90, 124, 3)
    torch.testing.assert_close(whole.permute(2, 0, 1), r(y[None])[0], atol=0, rtol=0)
    for tile, overlap in [(16, 2), (20, 8)]:
        torch.testing.assert_close(engine.restore(r, y, tile=tile, overlap=overlap), whole, atol=1e-6, rtol=0)


def test_upscale_fake_maps_tiles_to_2x(rng):
    r = nearest_upscale(radius=1)
    y = torch.rand(2, 33, 50, generator=rng)
    whole = engine.restore(r, y, tile=10**6)
    torch.testing.assert_close(engine.restore(r, y, tile=10, overlap=4), whole, atol=1e-6, rtol=0)


def test_tiles_are_bounded_and_keep_the_pattern(rng):
    calls = []
    r = box_demosaic(radius=1, calls=calls)
    engine.restore(r, torch.rand(1, 100, 100, generator=rng), "GRBG", tile=24, overlap=8)
    assert len(calls) == 25  # ceil(100 / 24) = 5 cores per axis
    for shape, pattern in calls:
        assert pattern == "GRBG"
        assert shape[-2] % 2 == 0 and shape[-1] % 2 == 0
        assert shape[-2] <= 24 + 2 + 2 * 8 and shape[-1] <= 24 + 2 + 2 * 8


def test_progress_reports_every_tile(rng):
    seen = []
    engine.restore(box_demosaic(), torch.rand(1, 64, 64, generator=rng), tile=32, overlap=4,
                   progress=lambda d, t: seen.append((d, t)))
    assert seen[0] == (0, 4) and seen[-1] == (4, 4) and len(seen) == 5


# --------------------------------------------------------------------------- sizes


def test_odd_size_mirrors_with_the_bayer_phase():
    """A uniform colour's mosaic demosaics back to that colour wherever the method's own border
    handling is not involved; a phase-breaking extension would corrupt the last row/column."""
    colour = torch.tensor([0.8, 0.5, 0.2])[:, None, None]
    for pattern in ("RGGB", "BGGR", "GRBG", "GBRG"):
        y = mosaic(colour.expand(3, 31, 45).clone(), pattern)
        out = engine.restore(get_restorer("bilinear", "demosaic"), y, pattern, tile=0)
        assert out.shape == (31, 45, 3)
        torch.testing.assert_close(out[2:, 2:], colour.permute(1, 2, 0).expand(29, 43, 3), atol=1e-6, rtol=0)


@pytest.mark.parametrize("shape", [(2, 2), (3, 5), (7, 4), (16, 9)])
def test_tiny_images(rng, shape):
    r = get_restorer("malvar", "demosaic")
    y = torch.rand(1, *shape, generator=rng)
    out = engine.restore(r, y, tile=8, overlap=4)
    assert out.shape == (*shape, 3) and torch.isfinite(out).all()
    torch.testing.assert_close(out, engine.restore(r, y, tile=0), atol=1e-6, rtol=0)
    up = engine.restore(get_restorer("bicubic", "upscale2x"), torch.rand(2, *shape, generator=rng), tile=8)
    assert up.shape == (2 * shape[0], 2 * shape[1], 2)


def test_min_side_declared_by_a_method_is_honoured(rng):
    def fn(y, pattern):
        assert min(y.shape[-2:]) >= 8, "this method needs 8x8"
        return y.repeat(1, 3, 1, 1)

    r = Restorer("big-only", "demosaic", fn, halo=0, info={"min_side": 8})
    y = torch.rand(1, 3, 5, generator=rng)
    out = engine.restore(r, y)
    assert out.shape == (3, 5, 3)
    torch.testing.assert_close(out[..., 0], y[0], atol=0, rtol=0)


# --------------------------------------------------------------------------- devices, precision, failures


def test_devices_and_precision():
    assert engine.resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert engine.resolve_device("CPU").type == "cpu"
    with pytest.raises(UsageError, match="unknown device"):
        engine.resolve_device("gpu")
    if not torch.cuda.is_available():
        for name in ("cuda", "cuda:1"):
            with pytest.raises(GspError, match="no CUDA device") as info:
                engine.resolve_device(name)
            assert not isinstance(info.value, UsageError)  # a missing device is exit 1, not usage
    cpu = torch.device("cpu")
    assert engine.check_precision("fp32", cpu) is None
    for p in ("bf16", "fp16"):
        with pytest.raises(UsageError, match="needs a CUDA device"):
            engine.check_precision(p, cpu)
    with pytest.raises(UsageError, match="unknown precision"):
        engine.check_precision("fp64", cpu)


def test_nan_output_is_an_error(rng):
    def fn(y, pattern):
        out = y.repeat(1, 3, 1, 1)
        out[..., 0, 0] = float("inf")
        return out

    with pytest.raises(GspError, match="NaN or Inf"):
        engine.restore(Restorer("bad", "demosaic", fn, halo=0), torch.rand(1, 8, 8, generator=rng))


def _oom_above(pixels: int, calls: list) -> Restorer:
    def fn(y, pattern):
        calls.append(y.shape[-2] * y.shape[-1])
        if y.shape[-2] * y.shape[-1] > pixels:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return y.repeat(1, 3, 1, 1)

    return Restorer("hungry", "demosaic", fn, halo=0, info={"bytes_per_pixel": 1})


def test_oom_in_automatic_mode_halves_the_tile(rng, monkeypatch):
    monkeypatch.setattr(engine, "auto_tile", lambda *a, **k: 256)
    calls, notes = [], []
    y = torch.rand(1, 300, 300, generator=rng)
    out = engine.restore(_oom_above(100 * 100, calls), y, tile=0, overlap=4, notice=notes.append)
    torch.testing.assert_close(out[..., 1], y[0])
    assert any("retrying with 128-pixel tiles" in n for n in notes)
    assert any("retrying with 64-pixel tiles" in n for n in notes)


def test_oom_with_a_fixed_tile_is_a_clear_error(rng):
    with pytest.raises(GspError, match="out of memory .* --tile 256"):
        engine.restore(_oom_above(100, []), torch.rand(1, 300, 300, generator=rng), tile=256, overlap=4)


def test_automatic_tile_fits_the_budget():
    r = box_demosaic()
    r.info["bytes_per_pixel"] = 4096
    tile = engine.tile_for_budget(1 << 30, 4096, overlap=32, scale=1)
    assert (tile + 64) ** 2 * 4096 <= 1 << 30 and tile % 16 == 0
    assert engine.tile_for_budget(1 << 30, 4096, overlap=32, scale=2) < tile
    auto = engine.auto_tile(r, torch.zeros(1, 8, 8), "RGGB", torch.device("cpu"), None, 32)
    assert engine.MIN_TILE <= auto and (auto + 64) ** 2 * 4096 <= engine.CPU_BUDGET_CAP
    assert engine.available_memory() > 0


def _computed_pixels(h: int, w: int, tile: int, overlap: int) -> tuple[int, int]:
    """(pixels computed in all, pixels of the largest window) of a plan, in input pixels."""
    rows, cols = engine.axis_windows(h, tile, overlap), engine.axis_windows(w, tile, overlap)
    return sum(rows) * sum(cols), max(rows) * max(cols)


def test_automatic_tile_is_the_whole_image_when_it_fits():
    """Issue 24's case: a 384x260 image through a learned 2x model (8 KB/pixel planned). The old
    1 GiB cap cut it into 12 tiles (~112-pixel cores, each output pixel computed ~2.3 times); with
    a quarter of 23 GB it is one tile."""
    old = engine.tile_for_budget(engine.LEGACY_CPU_BUDGET_CAP, 8192, 32, 2)
    assert old == 112 and len(engine.make_plan(260, 384, old, 32, 16, 2)) == 12
    new = engine.choose_tile(260, 384, 0.25 * 23e9, 8192, 32, 2)
    assert len(engine.make_plan(260, 384, new, 32, 16, 2)) == 1
    assert engine.choose_tile(8, 8, 1e9, 8192, 32, 1) == 66  # never below twice the overlap


@pytest.mark.parametrize("shape", [(260, 384), (512, 768), (4000, 6000), (300, 5000), (96, 1000)])
@pytest.mark.parametrize("budget", [2**26, 2**28, 2**30, 2**32])
@pytest.mark.parametrize("scale", [1, 2])
def test_automatic_tile_fits_the_budget_and_computes_no_more_than_the_square_rule(shape, budget, scale):
    h, w = shape
    bpp, overlap = 8192, 32
    tile = engine.choose_tile(h, w, budget, bpp, overlap, scale)
    assert tile % 2 == 0 and tile >= 2 * overlap + 2
    computed, window = _computed_pixels(h, w, tile, overlap)
    floor = engine.tile_for_budget(budget, bpp, overlap, scale)
    if floor > engine.MIN_TILE:  # the budget holds more than the smallest tile: the new one fits it
        assert window * scale * scale * bpp <= budget
        assert computed <= _computed_pixels(h, w, floor, overlap)[0]  # the old rule's tiles, same budget
    if h * w * scale * scale * bpp <= budget:
        assert len(engine.split_axis(h, tile)) == len(engine.split_axis(w, tile)) == 1


def test_cpu_budget_is_bounded(monkeypatch):
    monkeypatch.setattr(engine, "available_memory", lambda: 1 << 40)  # a huge machine: the cap holds
    assert engine.cpu_tile_budget() == engine.CPU_BUDGET_CAP
    assert engine.cpu_tile_budget(room=1 << 30) == 1 << 29  # half what the output leaves
    monkeypatch.setattr(engine, "available_memory", lambda: 1 << 30)
    assert engine.cpu_tile_budget() == engine.CPU_MEMORY_FRACTION * (1 << 30)


@pytest.mark.parametrize("memory,one", [(1 << 34, True), (40 << 20, False)])
def test_automatic_tiles_follow_available_memory_and_match_one_pass(rng, monkeypatch, memory, one):
    """Plenty of memory: one tile; little: several, within the budget; the same pixels either way."""
    r = box_demosaic(radius=2)  # halo 6
    r.info["bytes_per_pixel"] = 4096
    y = torch.rand(1, 200, 240, generator=rng)
    whole = engine.restore(r, y, tile=10**6, overlap=6)
    monkeypatch.setattr(engine, "available_memory", lambda: memory)
    totals, calls = [], []
    r.fn = box_demosaic(radius=2, calls=calls).fn
    out = engine.restore(r, y, tile=0, overlap=6, progress=lambda done, total: totals.append(total))
    assert (totals[-1] == 1) == one and len(calls) == totals[-1]
    budget = engine.cpu_tile_budget()
    assert all(s[-2] * s[-1] * 4096 <= budget for s, _p in calls)
    assert torch.equal(out, whole)  # overlap == halo: tiles are cropped, bit-identical


def test_cpu_restore_keeps_freed_memory_in_the_heap(rng, monkeypatch):
    """The CPU engine asks glibc once to keep freed memory (the learned models' time halves);
    ``CPU_KEEP_FREED_MEMORY`` off (GSPRESTORE_KEEP_FREED_MEMORY=0) leaves the allocator alone."""
    from gsprestore.core import memory

    assert memory.keep_freed_heap_memory() is memory.keep_freed_heap_memory()  # once per process
    calls = []
    monkeypatch.setattr(memory, "keep_freed_heap_memory", lambda: calls.append(1) or True)
    y = torch.rand(1, 16, 16, generator=rng)
    engine.restore(box_demosaic(), y, device="cpu")
    assert calls == [1]
    monkeypatch.setattr(engine, "CPU_KEEP_FREED_MEMORY", False)
    engine.restore(box_demosaic(), y, device="cpu")
    assert calls == [1]


def test_argument_checks(rng):
    y = torch.rand(1, 16, 16, generator=rng)
    with pytest.raises(UsageError, match="single-channel"):
        engine.restore(box_demosaic(), torch.rand(3, 16, 16, generator=rng))
    with pytest.raises(UsageError, match="tile size"):
        engine.restore(box_demosaic(), y, tile=-1)
    with pytest.raises(UsageError, match="pattern"):
        engine.restore(box_demosaic(), y, "RGBG")


# --------------------------------------------------------------------------- Python API


def test_api_numpy_and_torch(rng):
    raw = torch.rand(40, 50, generator=rng).numpy()
    out = gsprestore.demosaic(raw, method="malvar", pattern="BGGR", tile=16, overlap=4)
    assert isinstance(out, np.ndarray) and out.shape == (40, 50, 3) and out.dtype == np.float32
    direct = get_restorer("malvar", "demosaic")(torch.from_numpy(raw)[None, None], "BGGR")[0].permute(1, 2, 0)
    np.testing.assert_allclose(out, direct.numpy(), atol=1e-6)
    # integer arrays are scaled by their type's range
    ints = (raw * 65535).astype(np.uint16)
    np.testing.assert_allclose(gsprestore.demosaic(ints, method="bilinear"),
                               gsprestore.demosaic(ints / np.float32(65535), method="bilinear"), atol=1e-6)
    batch = torch.rand(2, 1, 20, 24, generator=rng)
    tout = gsprestore.demosaic(batch, method="bilinear")
    assert isinstance(tout, torch.Tensor) and tout.shape == (2, 3, 20, 24)
    up = gsprestore.upscale2x(torch.rand(3, 10, 12, generator=rng), method="bicubic")
    assert up.shape == (3, 20, 24)
    with pytest.raises(UsageError, match="single-channel"):
        gsprestore.demosaic(np.zeros((8, 8, 3)), method="bilinear")
    with pytest.raises(UsageError, match="does not do"):
        gsprestore.upscale2x(np.zeros((8, 8)), method="menon")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu_and_runs_reduced_precision(rng):
    r = get_restorer("malvar", "demosaic")
    y = mosaic(torch.rand(3, 200, 260, generator=rng))
    cpu = engine.restore(r, y, tile=64, device="cpu")
    gpu = engine.restore(r, y, tile=64, device="cuda")
    assert gpu.device.type == "cpu"  # assembled on the CPU
    torch.testing.assert_close(gpu, cpu, atol=1e-5, rtol=0)
    for p in ("bf16", "fp16"):
        low = engine.restore(r, y, tile=0, device="cuda", precision=p)
        assert (low - cpu).abs().max() < 0.05


def test_the_graph_buffers_serve_a_jobs_tiles_and_are_freed_after_it(monkeypatch):
    """A learned network keeps its graph buffers from one tile's forward to the next (one
    allocation for the tiles of a job) and the engine frees them when the job ends."""
    r = get_restorer("ugtv-lite", "demosaic")
    net = r.module
    seen = []
    forward = type(net).forward

    def spy(self, *args, **kwargs):
        out = forward(self, *args, **kwargs)
        seen.append(id(self.__dict__.get("_workspace")))
        return out

    monkeypatch.setattr(type(net), "forward", spy)
    y = mosaic(torch.rand(1, 3, 96, 96, generator=torch.Generator().manual_seed(3)), "RGGB")[0]
    out = engine.restore(r, y, "RGGB", tile=48, overlap=8)
    assert out.shape == (96, 96, 3) and len(seen) > 2
    assert len(set(seen)) == 1 and seen[0] != id(None)  # the same buffers for every tile
    assert "_workspace" not in net.__dict__  # and freed when the job ended
