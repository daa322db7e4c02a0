"""Benchmark protocol end to end with fake restorers registered in the one restorer registry, a
tiny fake data set, and numpy / scikit-image oracles for the expected scores."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from skimage.metrics import structural_similarity

from gsprestore.evaluation import benchmark, datasets
from gsprestore_lab import results_page as mr
from gsprestore.methods import registry as restorers
from gsprestore.core.errors import GspError, UsageError

FILL = 0.5037  # not on the 8-bit grid, so rounding matters
GAIN = 1.1037  # pushes bright pixels above 1 (clipping matters); k * GAIN is never a rounding tie


def _fill(y, pattern):
    """Fake demosaicker: known samples * GAIN, FILL elsewhere."""
    known, mask = restorers.observation("demosaic", y, pattern)
    return GAIN * known + FILL * (1 - mask)


def _nearest(y, pattern):
    """Fake 2x: nearest neighbour, known pixels at even coordinates."""
    return y.repeat_interleave(2, dim=-2).repeat_interleave(2, dim=-1)


def _make(name, task, **options):
    if name == "fake-fill":
        return restorers.Restorer(name, task, _fill, module=torch.nn.Linear(3, 2))
    if name == "fake-nearest":
        return restorers.Restorer(name, task, _nearest)
    seen = options["seen"]  # fake-record: remembers its inputs, returns the mosaic adjoint

    def record(y, pattern):
        seen.append(y.clone())
        return restorers.observation(task, y, pattern)[0]

    return restorers.Restorer(name, task, record)


@pytest.fixture(autouse=True)
def fake_methods(monkeypatch):
    for name, task in [("fake-fill", "demosaic"), ("fake-nearest", "upscale2x"), ("fake-record", "demosaic")]:
        monkeypatch.setitem(restorers.METHODS, name, restorers.MethodSpec(name, (task,), "test", _make, "test double"))


@pytest.fixture
def tiny_kodak(tmp_path, monkeypatch):
    """Three 8-bit PNGs (one of odd size) registered as the 'kodak' files; returns (parent, arrays)."""
    folder = tmp_path / "data" / "kodak24"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(7)
    arrays, sums = {}, {}
    for name, (h, w) in [("kodim01.png", (24, 32)), ("kodim02.png", (27, 33)), ("kodim03.png", (32, 20))]:
        base = rng.integers(0, 256, (h // 3 + 1, w // 3 + 1, 3)).astype(np.uint8)
        a = np.kron(base, np.ones((3, 3, 1), dtype=np.uint8))[:h, :w]
        Image.fromarray(a).save(folder / name)
        arrays[name] = a
        sums[name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    monkeypatch.setattr(datasets, "read_checksums", lambda spec: sums)
    return folder.parent, arrays


def _ssim(a, b):
    return structural_similarity(a, b, gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
                                 data_range=1.0, channel_axis=-1)


def _y(a):
    return (16 + a @ np.array([65.481, 128.553, 24.966])) / 255.0


def test_demosaic_scores_match_oracle(tiny_kodak):
    parent, arrays = tiny_kodak
    res = benchmark.run_benchmark("demosaic", "kodak", "fake-fill", parent, pattern="GRBG", per_image=True)
    (row,) = res["results"]
    assert set(benchmark.ROW_KEYS) <= set(row)
    assert row["method"] == "fake-fill" and row["images"] == 3 and row["params"] == 3 * 2 + 2
    mses, p8, ss = [], [], []
    for a in arrays.values():
        gt = a[: a.shape[0] // 2 * 2, : a.shape[1] // 2 * 2].astype(np.float32).astype(np.float64) / 255
        mask = np.zeros_like(gt)
        mask[0::2, 0::2, 1] = mask[1::2, 1::2, 1] = mask[0::2, 1::2, 0] = mask[1::2, 0::2, 2] = 1  # GRBG
        out = np.where(mask == 1, GAIN * gt, FILL)
        mses.append(((out - gt) ** 2).mean())
        q = np.round(np.clip(out, 0, 1) * 255) / 255
        p8.append(10 * np.log10(1 / ((q - gt) ** 2).mean()))
        ss.append(_ssim(np.clip(out, 0, 1), gt))
    assert row["psnr_dataset_mse"] == pytest.approx(10 * np.log10(1 / np.mean(mses)), abs=1e-4)
    assert row["psnr_mean"] == pytest.approx(np.mean(p8), abs=1e-4)
    assert row["ssim_mean"] == pytest.approx(np.mean(ss), abs=1e-5)
    assert [r["file"] for r in row["per_image"]] == ["kodim01.png", "kodim02.png", "kodim03.png"]
    assert row["seconds_per_image"] > 0 and row["megapixels_per_second"] > 0
    p = res["protocol"]
    assert p["pattern"] == "GRBG" and p["channel_space"].startswith("RGB") and p["dataset"] == "kodak"
    assert p["checksums_verified"] and p["device"] == "cpu" and p["noise"]["sigma"] == 0
    assert p["gsprestore_version"] and p["torch_version"] == torch.__version__


def test_upscale_scored_on_y(tiny_kodak):
    parent, arrays = tiny_kodak
    res = benchmark.run_benchmark("upscale2x", "kodak", ["fake-nearest"], parent)
    (row,) = res["results"]
    mses, p8, ss = [], [], []
    for a in arrays.values():
        gt = a[: a.shape[0] // 2 * 2, : a.shape[1] // 2 * 2].astype(np.float64) / 255
        out = np.repeat(np.repeat(gt[0::2, 0::2], 2, axis=0), 2, axis=1)
        mses.append(((_y(out) - _y(gt)) ** 2).mean())
        p8.append(10 * np.log10(1 / ((_y(out) - _y(gt)) ** 2).mean()))  # 8-bit already: rounding is a no-op
        ss.append(_ssim(_y(out)[..., None], _y(gt)[..., None]))
    assert row["psnr_dataset_mse"] == pytest.approx(10 * np.log10(1 / np.mean(mses)), abs=1e-4)
    assert row["psnr_mean"] == pytest.approx(np.mean(p8), abs=1e-4)
    assert row["ssim_mean"] == pytest.approx(np.mean(ss), abs=1e-5)
    assert res["protocol"]["pattern"] is None and res["protocol"]["channel_space"].startswith("Y, BT.601")


def test_noise_is_seeded_and_shared(tiny_kodak):
    parent, _ = tiny_kodak
    seen_a, seen_b, clean = [], [], []
    opts = {"fake-record": {"seen": seen_a}}
    benchmark.run_benchmark("demosaic", "kodak", "fake-record", parent, noise_sigma=20, restorer_options=opts,
                            warmup=False)
    benchmark.run_benchmark("demosaic", "kodak", "fake-record", parent, noise_sigma=20,
                            restorer_options={"fake-record": {"seen": seen_b}}, warmup=False)
    benchmark.run_benchmark("demosaic", "kodak", "fake-record", parent, restorer_options={"fake-record": {"seen": clean}},
                            warmup=False)
    assert len(seen_a) == 3
    for a, b in zip(seen_a, seen_b):
        assert torch.equal(a, b)
    noise = torch.cat([(a - c).flatten() for a, c in zip(seen_a, clean)])
    assert abs(noise.std().item() * 255 - 20) < 2 and abs(noise.mean().item() * 255) < 1.5
    assert not torch.equal(seen_a[0].flatten()[:100], seen_a[1].flatten()[:100])  # a new draw per image


def test_argument_errors(tiny_kodak):
    parent, _ = tiny_kodak
    with pytest.raises(UsageError, match="unknown method"):
        benchmark.run_benchmark("demosaic", "kodak", "nope", parent)
    with pytest.raises(UsageError, match="does not do upscale2x"):
        benchmark.run_benchmark("upscale2x", "kodak", "fake-fill", parent)
    with pytest.raises(UsageError, match="Bayer pattern"):
        benchmark.run_benchmark("demosaic", "kodak", "fake-fill", parent, pattern="RGBG")
    with pytest.raises(UsageError, match="unknown task"):
        benchmark.run_benchmark("denoise", "kodak", "fake-fill", parent)
    assert benchmark.parse_methods("demosaic", " fake-fill, FAKE-fill ,") == ["fake-fill"]
    real = {"demosaic": ["bilinear", "malvar", "menon", "iglr", "igtv", "uglr", "ugtv", "ugtv-lite", "ugtv-lite-denoise"],
            "upscale2x": ["bicubic", "bicubic-halfpixel", "iglr", "igtv", "uglr", "ugtv", "uglr-lite"]}
    for task, names in real.items():
        got = benchmark.default_methods(task)
        assert [m for m in got if not m.startswith("fake-")] == names


def test_bad_method_output_is_reported(tiny_kodak, monkeypatch):
    parent, _ = tiny_kodak
    monkeypatch.setitem(restorers.METHODS, "fake-fill", restorers.MethodSpec(
        "fake-fill", ("demosaic",), "test", lambda name, task: restorers.Restorer(name, task, lambda y, p: y[..., :-2, :]),
        "test double"))
    with pytest.raises(GspError, match="returned shape"):
        benchmark.run_benchmark("demosaic", "kodak", "fake-fill", parent)


def test_write_json_atomic_and_no_overwrite(tmp_path):
    out = tmp_path / "r.json"
    benchmark.write_json({"a": 1}, out)
    assert json.loads(out.read_text()) == {"a": 1}
    with pytest.raises(GspError, match="--overwrite"):
        benchmark.write_json({"a": 2}, out)
    benchmark.write_json({"a": 2}, out, overwrite=True)
    assert json.loads(out.read_text()) == {"a": 2} and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def _cli(monkeypatch, capsys, *args):
    from gsprestore.cli.app import main

    monkeypatch.setattr(sys, "argv", ["gsprestore", "benchmark", *args])
    with pytest.raises(SystemExit) as e:
        main()
    out = capsys.readouterr()
    return e.value.code or 0, out.out, out.err


def test_cli_table_and_json(tiny_kodak, monkeypatch, capsys, tmp_path):
    parent, _ = tiny_kodak
    out = tmp_path / "res.json"
    code, stdout, _ = _cli(monkeypatch, capsys, "--task", "demosaic", "--dataset", "kodak", "--data-dir",
                           str(parent), "--methods", "fake-fill", "--json", str(out))
    assert code == 0 and "fake-fill" in stdout
    data = json.loads(out.read_text())
    assert data["results"][0]["method"] == "fake-fill" and data["protocol"]["task"] == "demosaic"
    code, _, err = _cli(monkeypatch, capsys, "--task", "demosaic", "--dataset", "kodak", "--data-dir",
                        str(parent), "--methods", "fake-fill", "--json", str(out))
    assert code == 1 and "--overwrite" in err


@pytest.mark.parametrize(
    "args,code,needle",
    [
        (["--methods", "nope"], 2, "unknown method"),
        (["--methods", "fake-fill", "--pattern", "XYZW"], 2, "Bayer pattern"),
        (["--methods", "fake-fill", "--device", "tpu"], 2, "unknown device"),
        (["--methods", "fake-fill", "--noise-sigma", "-1"], 2, "noise sigma"),
        (["--methods", "fake-fill", "--noise-sigma", "10,x"], 2, "noise sigma must be a number"),
        (["--methods", "fake-fill", "--data-dir", "MISSING"], 1, "no such folder"),
    ],
)
def test_cli_errors_are_one_line(tiny_kodak, monkeypatch, capsys, tmp_path, args, code, needle):
    parent, _ = tiny_kodak
    args = [str(tmp_path / "missing") if a == "MISSING" else a for a in args]
    if "--data-dir" not in args:
        args += ["--data-dir", str(parent)]
    got, stdout, err = _cli(monkeypatch, capsys, "--task", "demosaic", "--dataset", "kodak", *args)
    assert got == code and needle in err and err.count("\n") == 1 and err.startswith("error: ")


def test_noise_levels_give_one_row_per_method_and_level(tiny_kodak):
    parent, _ = tiny_kodak
    seen = []
    res = benchmark.run_benchmark("demosaic", "kodak", "fake-record,fake-fill", parent, noise_sigma="0, 20,10,20",
                                  restorer_options={"fake-record": {"seen": seen}}, warmup=False)
    rows = [(r["method"], r["noise_sigma"]) for r in res["results"]]
    assert rows == [(m, s) for m in ("fake-record", "fake-fill") for s in (0.0, 20.0, 10.0)]
    assert res["protocol"]["noise"]["sigma"] == [0.0, 20.0, 10.0] and res["protocol"]["noise"]["seed"] == 0
    # seen: per image, sigma 0, 20, 10; one N(0,1) draw per image scaled by each sigma
    for i in range(3):
        clean, n20, n10 = seen[3 * i: 3 * i + 3]
        assert torch.allclose((n20 - clean), 2 * (n10 - clean), atol=1e-6)
        assert abs((n20 - clean).std().item() * 255 - 20) < 3
    psnr = {r["noise_sigma"]: r["psnr_dataset_mse"] for r in res["results"] if r["method"] == "fake-fill"}
    assert psnr[0.0] > psnr[10.0] > psnr[20.0]
    assert benchmark.parse_sigmas([30, 10, 30]) == [30.0, 10.0] and benchmark.parse_sigmas(None) == [0.0]
    with pytest.raises(UsageError, match=">= 0"):
        benchmark.parse_sigmas("10,-5")
    with pytest.raises(UsageError, match=">= 0"):
        benchmark.parse_sigmas(float("nan"))


def test_learned_without_weights_is_skipped(tiny_kodak, monkeypatch):
    from gsprestore.core.errors import WeightsError

    parent, _ = tiny_kodak

    def no_weights(name, task, **options):
        raise WeightsError("no weights for fake-learned (pass --weights)", "weights/")

    monkeypatch.setitem(restorers.METHODS, "fake-learned",
                        restorers.MethodSpec("fake-learned", ("demosaic",), "learned", no_weights, ""))
    res = benchmark.run_benchmark("demosaic", "kodak", "fake-fill,fake-learned", parent, noise_sigma=[0, 10])
    ok, skipped = res["results"][:2], res["results"][2:]
    assert all(r["skipped"] is None and r["psnr_dataset_mse"] > 0 for r in ok)
    assert [r["noise_sigma"] for r in skipped] == [0.0, 10.0]
    for r in skipped:
        assert r["method"] == "fake-learned" and r["kind"] == "learned" and r["psnr_dataset_mse"] is None
        assert "no weights for fake-learned" in r["skipped"]
    md = benchmark.to_markdown(res)
    assert "| fake-learned | 10 | skipped: weights/: no weights for fake-learned" in md


def test_csv_and_markdown_outputs(tiny_kodak, tmp_path):
    import csv
    import io

    parent, _ = tiny_kodak
    res = benchmark.run_benchmark("demosaic", "kodak", "fake-fill", parent, noise_sigma="0,10")
    text = benchmark.to_csv(res)
    comments = [ln for ln in text.splitlines() if ln.startswith("#")]
    assert f"# gsprestore_version: {res['protocol']['gsprestore_version']}" in comments
    assert any(ln.startswith("# noise: {") for ln in comments)
    rows = list(csv.DictReader(io.StringIO("\n".join(ln for ln in text.splitlines() if not ln.startswith("#")))))
    assert [r["noise_sigma"] for r in rows] == ["0.0", "10.0"] and rows[0]["skipped"] == ""
    for got, want in zip(rows, res["results"]):
        assert float(got["psnr_dataset_mse"]) == pytest.approx(want["psnr_dataset_mse"])
        assert float(got["megapixels_per_second"]) == pytest.approx(want["megapixels_per_second"])
    md = benchmark.to_markdown(res)
    assert res["protocol"]["gsprestore_version"] in md and md.count("| fake-fill |") == 2
    for writer, name in [(benchmark.write_csv, "r.csv"), (benchmark.write_markdown, "r.md")]:
        writer(res, tmp_path / name)
        with pytest.raises(GspError, match="--overwrite"):
            writer(res, tmp_path / name)
        writer(res, tmp_path / name, overwrite=True)
    assert (tmp_path / "r.csv").read_text() == text and (tmp_path / "r.md").read_text() == md
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "r.csv").stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's 0600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "r.csv", "r.md"]  # no temp files left


def test_custom_folder_dataset(tmp_path):
    d = tmp_path / "mine"
    d.mkdir()
    rng = np.random.default_rng(3)
    for n in ["x2.png", "x10.png"]:
        Image.fromarray(rng.integers(0, 256, (16, 18, 3), dtype=np.uint8)).save(d / n)
    res = benchmark.run_benchmark("upscale2x", None, "fake-nearest", d, per_image=True)
    (row,) = res["results"]
    assert row["dataset"] == "mine" and [x["file"] for x in row["per_image"]] == ["x2.png", "x10.png"]
    assert res["protocol"]["custom_dataset"] and not res["protocol"]["checksums_verified"]


def test_cli_noise_list_csv_markdown_custom(tmp_path, monkeypatch, capsys):
    d = tmp_path / "imgs"
    d.mkdir()
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (12, 14, 3), dtype=np.uint8)).save(d / "a.png")
    code, stdout, _ = _cli(monkeypatch, capsys, "--task", "demosaic", "--data-dir", str(d), "--methods", "fake-fill",
                           "--noise-sigma", "10,20", "--csv", str(tmp_path / "o.csv"), "--markdown",
                           str(tmp_path / "o.md"))
    assert code == 0 and "sigma" in stdout and stdout.count("fake-fill") == 2
    assert (tmp_path / "o.csv").is_file() and "| fake-fill | 20 |" in (tmp_path / "o.md").read_text()
    code, _, err = _cli(monkeypatch, capsys, "--task", "demosaic", "--data-dir", str(d), "--methods", "fake-fill",
                        "--markdown", str(tmp_path / "o.md"))
    assert code == 1 and "--overwrite" in err
    code, _, err = _cli(monkeypatch, capsys, "--task", "demosaic", "--methods", "fake-fill")
    assert code == 2 and "--data-dir" in err
    code, _, err = _cli(monkeypatch, capsys, "--task", "demosaic", "--data-dir", str(d), "--download")
    assert code == 2 and "--download needs" in err


def test_cli_download(tiny_kodak, monkeypatch, capsys, tmp_path):
    """--download fetches from a local mirror (127.0.0.1) into --data-dir, then benchmarks it."""
    import functools
    import http.server
    import threading

    parent, _ = tiny_kodak
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0),
        functools.partial(type("H", (http.server.SimpleHTTPRequestHandler,), {"log_message": lambda *a: None}),
                          directory=str(parent)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("GSPRESTORE_DATASET_URL", f"http://127.0.0.1:{server.server_address[1]}")
        dest = tmp_path / "dl"
        code, stdout, _ = _cli(monkeypatch, capsys, "--task", "demosaic", "--dataset", "kodak", "--data-dir",
                               str(dest), "--download", "--methods", "fake-fill")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert code == 0 and "fake-fill" in stdout
    assert sorted(p.name for p in (dest / "kodak24").iterdir()) == ["kodim01.png", "kodim02.png", "kodim03.png"]


def test_scatter_png_draws_points_and_legend(tmp_path):
    pytest.importorskip("matplotlib")
    from gsprestore.viz import charts as sp

    pts = [sp.Point(0, 30.0, "a"), sp.Point(1e5, 33.0, "b", sp.PAPER), sp.Point(1e6, 31.0, "c", sp.PAPER)]
    panels = [sp.Panel("one", pts, "params", xlog=True, zero_at=1.0), sp.Panel("two", pts[:1], "x"),
              sp.Panel("three", [sp.Point(0.02, 1.0, "d"), sp.Point(0.03, 2.0, "e")], "s/MP", xlog=True)]
    out = sp.scatter_png(panels, tmp_path / "p.png", title="t", columns=2, panel_size=(400, 300))
    img = np.asarray(Image.open(out).convert("RGB"))
    assert img.shape == (2 * 300 + 70, 2 * 400, 3)
    for colour in sp.COLOURS.values():  # both marker kinds drawn
        assert (np.abs(img.astype(int) - colour).sum(-1) == 0).sum() > 20
    assert (img[370:, 400:] == 255).all()  # the empty fourth grid cell stays blank


def test_make_results_end_to_end(tiny_kodak, tmp_path, capsys):
    """make_results.py on the tiny data set with the fake methods: tables, JSON, plots, --reuse. The
    page is gsprestore_lab.results_page's (run here, where the fake methods are registered);
    the plots are the script's, drawn by running it with --reuse (no method runs)."""
    parent, _ = tiny_kodak
    out = tmp_path / "docs"
    out.mkdir()
    args = ["--data-dir", str(parent), "--out-dir", str(out), "--datasets", "kodak,urban100",
            "--methods", "fake-fill,fake-nearest"]
    kw = {"data_dir": parent, "datasets": ["kodak", "urban100"], "methods": "fake-fill,fake-nearest"}
    assert mr.regenerate(out, **kw) == out / "results.md"
    res = json.loads((out / "results" / "demosaic-kodak.json").read_text())
    up = json.loads((out / "results" / "upscale2x-kodak.json").read_text())
    md = (out / "results.md").read_text()
    assert f"| fake-fill (gsprestore only) | 8 | - | {res['results'][0]['psnr_dataset_mse']:.2f} / " in md
    assert f"| fake-nearest (gsprestore only) | - | - | {up['results'][0]['psnr_dataset_mse']:.2f} / " in md
    assert "| uGTV | 323,435 | 39.11 / 0.9855 | not run |" in md  # the paper's Table 1, Kodak
    assert "| MAIN | 10,942,977 | 28.23 / 0.7280 | not in gsprestore |" in md  # Table 3
    assert "**Missing:** Urban100" in md and mr.COMMAND in md
    # the script, with --reuse: the page from the stored results and both plots. In its own process
    # the tiny set's checksums are not patched in: the files the real list names must be present
    # (with --reuse they are only looked for, not read)
    before = (out / "results" / "demosaic-kodak.json").stat().st_mtime_ns
    listed = (Path(datasets.__file__).parents[1] / "data" / "kodak24.sha256").read_text().split()[1::2]
    for name in listed:
        (parent / "kodak24" / name.lstrip("*")).touch()
    repo = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, str(repo / "benchmarks" / "make_results.py"), *args, "--reuse"],
                         capture_output=True, text=True, timeout=600, cwd=repo)
    assert run.returncode == 0, run.stderr[-3000:]
    for name in ("results-psnr-vs-params.png", "results-psnr-vs-time.png"):
        assert Image.open(out / name).size[0] > 500
    assert (out / "results" / "demosaic-kodak.json").stat().st_mtime_ns == before
    assert "reusing" in run.stderr
    # --merge folds a separate benchmark run's rows into the stored results: a row replaces the
    # stored row of the same method, a new method is appended
    extra = benchmark.run_benchmark("demosaic", "kodak", "fake-fill", parent, warmup=False)
    extra["results"][0]["psnr_dataset_mse"] = 99.5
    extra["results"].append({**extra["results"][0], "method": "fake-extra", "psnr_dataset_mse": 12.25})
    benchmark.write_json(extra, tmp_path / "extra.json")
    assert mr.regenerate(out, **kw, reuse=True, merge=[tmp_path / "extra.json"]) == out / "results.md"
    merged = json.loads((out / "results" / "demosaic-kodak.json").read_text())
    assert [(r["method"], r["psnr_dataset_mse"]) for r in merged["results"]] == [("fake-fill", 99.5),
                                                                                ("fake-extra", 12.25)]
    assert merged["merged"][0]["file"] == "extra.json"
    assert "merged" in capsys.readouterr().err


def test_make_results_noise_table():
    rows = [{"method": m, "noise_sigma": s, "psnr_dataset_mse": 40 - s / 10 - i, "ssim_mean": 0.9, "skipped": None}
            for i, m in enumerate(["menon", "ugtv"]) for s in mr.SIGMAS]
    rows[-1] = {**rows[-1], "skipped": "weights: no weights", "psnr_dataset_mse": None}
    lines = mr.noise_table({"results": rows})
    assert "| uGTV | 28.31 | 38.00 | 22.89 | 37.00 | 19.56 | 36.00 | 15.38 | no weights |" in lines
    assert "| menon (gsprestore only) | - | 39.00 | - | 38.00 | - | 37.00 | - | 35.00 |" in lines


def test_cli_weights_option_scores_a_weights_file(tiny_kodak, monkeypatch, capsys, tmp_path):
    from gsprestore.models import build_model
    from gsprestore.methods.weights import save_weights, sha256_file, weights_dir

    parent, _ = tiny_kodak
    torch.manual_seed(0)
    model = build_model("ugtv", "demosaic", blocks=1, heads=2, features=3, width=6, cg_iters=2, admm_iters=1)
    wfile = tmp_path / "tiny.pt"
    save_weights(wfile, model)
    out = tmp_path / "res.json"
    code, stdout, err = _cli(monkeypatch, capsys, "--task", "demosaic", "--dataset", "kodak", "--data-dir",
                             str(parent), "--methods", "ugtv,bilinear", "--weights", f"ugtv={wfile}",
                             "--json", str(out))
    assert code == 0, err
    rows = {r["method"]: r for r in json.loads(out.read_text())["results"]}
    # own weights are labelled with their path, and the path and SHA-256 are recorded, so they can
    # sit beside the shipped ones in one table
    label = f"ugtv@{wfile}"
    assert sorted(rows) == sorted([label, "bilinear"])
    assert rows[label]["skipped"] is None and rows[label]["params"] == model.num_params()
    assert rows[label]["psnr_dataset_mse"] > 10
    assert rows[label]["weights"] == {"path": str(wfile), "sha256": sha256_file(wfile), "shipped": False}
    assert rows["bilinear"]["weights"] is None
    csv_rows = benchmark.to_csv(json.loads(out.read_text()))
    assert f"{label},learned" in csv_rows and sha256_file(wfile) in csv_rows
    shipped = benchmark.weights_record("ugtv", "demosaic", {"weights": str(weights_dir() / "ugtv_demosaic.pt")})
    assert shipped["shipped"] and benchmark.row_label("ugtv", shipped) == "ugtv"
    for bad, needle in [("ugtv", "METHOD=PATH"), ("bilinear=x.pt", "learned methods"),
                        (f"uglr={wfile}", "not among the benchmarked")]:
        code, _, err = _cli(monkeypatch, capsys, "--task", "demosaic", "--dataset", "kodak", "--data-dir",
                            str(parent), "--methods", "ugtv,bilinear", "--weights", bad)
        assert code == 2 and needle in err and err.count("\n") == 1
    code, _, err = _cli(monkeypatch, capsys, "--task", "demosaic", "--dataset", "kodak", "--data-dir",
                        str(parent), "--methods", "ugtv", "--weights", f"ugtv={tmp_path / 'none.pt'}")
    assert code == 1 and "weights file not found" in err


# --------------------------------------------------------------------------- issue 24: for research


def test_paper_numbers_have_one_source():
    """make_results.py and the benchmark's paper columns read the same tables (gsprestore.evaluation.paper)."""
    from gsprestore.evaluation import paper

    assert mr.PAPER_TABLES is paper.PAPER_TABLES and mr.PAPER_TABLE2 is paper.PAPER_TABLE2
    assert paper.reference("demosaic", "kodak", "ugtv") == {"table": "Table 1", "label": "uGTV", "psnr": 39.11,
                                                             "ssim": 0.9855}
    assert paper.reference("demosaic", "kodak", "ugtv@runs/x.pt")["psnr"] == 39.11  # own weights: same method
    assert paper.reference("upscale2x", "mcm", "bicubic-halfpixel")["psnr"] == 29.01
    assert paper.reference("demosaic", "mcm", "uglr", 20.0) == {"table": "Table 2", "label": "uGLR", "psnr": 22.84,
                                                                 "ssim": None}
    assert paper.reference("demosaic", "mcm", "menon", 20.0) is None  # not in Table 2
    assert paper.reference("demosaic", "kodak", "menon", pattern="GBRG") is None  # the paper's is RGGB
    assert paper.reference("upscale2x", "kodak", "bicubic") is None  # the grid-aligned one is ours only


def test_paper_columns_in_rows_csv_markdown_and_table(tiny_kodak, monkeypatch, capsys):
    import csv
    import io

    parent, _ = tiny_kodak
    res = benchmark.run_benchmark("demosaic", "kodak", "bilinear,fake-fill", parent)
    rows = {r["method"]: r for r in res["results"]}
    assert rows["bilinear"]["paper"] == {"table": "Table 1", "label": "Bilinear", "psnr": 28.22, "ssim": 0.8898}
    assert rows["fake-fill"]["paper"] is None and "Table 1" in res["protocol"]["paper"]
    text = benchmark.to_csv(res)
    got = list(csv.DictReader(io.StringIO("\n".join(ln for ln in text.splitlines() if not ln.startswith("#")))))
    assert [(r["method"], r["paper_psnr"], r["paper_ssim"]) for r in got] == [("bilinear", "28.22", "0.8898"),
                                                                              ("fake-fill", "", "")]
    md = benchmark.to_markdown(res)
    assert "paper PSNR (dB) | paper SSIM |" in md and md.count("| 28.22 | 0.8898 |") == 1
    monkeypatch.setenv("COLUMNS", "160")  # the whole table on one line per row
    code, stdout, _ = _cli(monkeypatch, capsys, "--task", "demosaic", "--dataset", "kodak", "--data-dir",
                           str(parent), "--methods", "bilinear")
    assert code == 0 and "paper PSNR" in stdout and "28.22" in stdout and "0.8898" in stdout
    custom = benchmark.run_benchmark("demosaic", None, "bilinear", parent / "kodak24")  # not the paper's data
    assert custom["results"][0]["paper"] is None and "paper" not in custom["protocol"]


def test_limit_scores_the_first_images(tiny_kodak, monkeypatch, capsys, tmp_path):
    parent, _ = tiny_kodak
    res = benchmark.run_benchmark("demosaic", "kodak", "fake-fill", parent, limit=2, per_image=True)
    (row,) = res["results"]
    assert row["images"] == 2 and [r["file"] for r in row["per_image"]] == ["kodim01.png", "kodim02.png"]
    p = res["protocol"]
    assert p["images"] == 2 and p["limit"] == 2 and p["dataset_images"] == 3 and "first 2 of its 3" in p["paper"]
    full = benchmark.run_benchmark("demosaic", "kodak", "fake-fill", parent, per_image=True)
    assert full["results"][0]["per_image"][:2] == [{**a, "seconds": b["seconds"]} for a, b in
                                                   zip(row["per_image"], full["results"][0]["per_image"])]
    for bad in (0, -1, 1.5):
        with pytest.raises(UsageError, match="--limit"):
            benchmark.run_benchmark("demosaic", "kodak", "fake-fill", parent, limit=bad)
    code, stdout, _ = _cli(monkeypatch, capsys, "--task", "demosaic", "--dataset", "kodak", "--data-dir",
                           str(parent), "--methods", "fake-fill", "--limit", "1", "--json", str(tmp_path / "r.json"))
    assert code == 0 and "first 1 of 3 images" in stdout
    assert json.loads((tmp_path / "r.json").read_text())["results"][0]["images"] == 1
    code, _, err = _cli(monkeypatch, capsys, "--task", "demosaic", "--dataset", "kodak", "--data-dir",
                        str(parent), "--methods", "fake-fill", "--limit", "0")
    assert code == 2 and "--limit" in err


def test_per_image_scores_in_json_and_csv(tiny_kodak, monkeypatch, capsys, tmp_path):
    import csv
    import io

    parent, _ = tiny_kodak
    code, _, err = _cli(monkeypatch, capsys, "--task", "demosaic", "--dataset", "kodak", "--data-dir", str(parent),
                        "--methods", "fake-fill", "--noise-sigma", "0,10", "--json", str(tmp_path / "r.json"),
                        "--csv", str(tmp_path / "r.csv"), "--per-image")
    assert code == 0, err
    res = json.loads((tmp_path / "r.json").read_text())
    for row in res["results"]:  # the JSON always has every image's scores
        recs = row["per_image"]
        assert [r["file"] for r in recs] == ["kodim01.png", "kodim02.png", "kodim03.png"]
        assert row["psnr_dataset_mse"] == pytest.approx(10 * np.log10(1 / np.mean([r["mse"] for r in recs])))
        assert row["psnr_mean"] == pytest.approx(np.mean([r["psnr_8bit"] for r in recs]))
    text = (tmp_path / "r.csv").read_text()
    got = list(csv.DictReader(io.StringIO("\n".join(ln for ln in text.splitlines() if not ln.startswith("#")))))
    assert [(r["noise_sigma"], r["image"]) for r in got] == [
        (s, f) for s in ("0.0", "10.0") for f in ("", "kodim01.png", "kodim02.png", "kodim03.png")]
    for r in got[1:4]:
        rec = next(x for x in res["results"][0]["per_image"] if x["file"] == r["image"])
        assert r["images"] == "1" and float(r["psnr_dataset_mse"]) == pytest.approx(rec["psnr"])
        assert float(r["psnr_mean"]) == pytest.approx(rec["psnr_8bit"]) and float(r["ssim_mean"]) == pytest.approx(
            rec["ssim"])
    plain = benchmark.to_csv(res)  # without --per-image: the data-set rows only
    assert plain.count("kodim01.png") == 0 and len([ln for ln in plain.splitlines() if ln.startswith("fake")]) == 2


def test_save_outputs_writes_each_methods_images(tiny_kodak, monkeypatch, capsys, tmp_path):
    from gsprestore.metrics import quantize

    parent, arrays = tiny_kodak
    out = tmp_path / "outs"
    res = benchmark.run_benchmark("demosaic", "kodak", "fake-fill,bilinear", parent, noise_sigma="0,10",
                                  save_outputs=out, warmup=False)
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == sorted(f"demosaic/{m}/{s}kodim0{i}.png" for m in ("fake-fill", "bilinear")
                           for s in ("", "sigma-10/") for i in (1, 2, 3))
    assert res["protocol"]["outputs"]["folder"] == str(out)
    # the saved pixels are the output rounded and clipped to 8 bits (what psnr_mean scores)
    a = arrays["kodim02.png"][:26, :32].astype(np.float32) / 255
    gt = torch.from_numpy(a).permute(2, 0, 1)[None]
    want = quantize(_fill(benchmark.make_observation("demosaic", gt, "RGGB"), "RGGB"))[0].permute(1, 2, 0).numpy()
    saved = np.asarray(Image.open(out / "demosaic" / "fake-fill" / "kodim02.png")).astype(np.float32) / 255
    np.testing.assert_allclose(saved, want, atol=1e-6)
    # existing outputs: an error before the first image, nothing run, nothing replaced
    seen = []
    before = (out / "demosaic" / "fake-fill" / "kodim01.png").stat().st_mtime_ns
    with pytest.raises(GspError, match="--overwrite"):
        benchmark.run_benchmark("demosaic", "kodak", "fake-fill,fake-record", parent, save_outputs=out,
                                restorer_options={"fake-record": {"seen": seen}})
    assert seen == [] and (out / "demosaic" / "fake-fill" / "kodim01.png").stat().st_mtime_ns == before
    benchmark.run_benchmark("demosaic", "kodak", "fake-fill", parent, save_outputs=out, overwrite=True)
    assert not [p for p in out.rglob("*") if p.name.startswith(".")]  # no temporary files left
    code, _, err = _cli(monkeypatch, capsys, "--task", "demosaic", "--dataset", "kodak", "--data-dir", str(parent),
                        "--methods", "fake-fill", "--save-outputs", str(out))
    assert code == 1 and "--overwrite" in err and err.count("\n") == 1
    code, _, err = _cli(monkeypatch, capsys, "--task", "demosaic", "--dataset", "kodak", "--data-dir", str(parent),
                        "--methods", "fake-fill", "--save-outputs", str(out), "--overwrite", "--limit", "1")
    assert code == 0 and "wrote the outputs under" in err
    assert benchmark.output_path(out, "demosaic", "ugtv@runs/ft/model.pt", 0, parent / "a.png") == (
        out / "demosaic" / "ugtv@runs_ft_model.pt" / "a.png")


def test_time_estimate_from_recorded_speeds(tiny_kodak, monkeypatch, capsys):
    from gsprestore.evaluation import benchmark_run

    parent, _ = tiny_kodak
    ds = datasets.find_dataset("kodak", parent)
    mp, unread = benchmark.dataset_megapixels(ds.files)
    assert unread == 0 and mp == pytest.approx((24 * 32 + 26 * 32 + 32 * 20) / 1e6)
    manifest = {"baselines": {"speed": {"cpu": {"demosaic": {"menon": 2.0, "bilinear": 4.0}}}}}
    est = benchmark.estimate_seconds("demosaic", ["menon", "bilinear", "fake-fill"], 12.0, "cpu", levels=2,
                                     images=3, manifest=manifest)
    assert est["per_method"] == {"menon": (24 + 4) / 2.0, "bilinear": (24 + 4) / 4.0, "fake-fill": None}
    assert est["seconds"] == 14 + 7 and est["unrecorded"] == ["fake-fill"]
    # the command prints it before a long run (fake-fill recorded at 1e-5 MP/s: (mp + mp / 3) / 1e-5 = 294 s),
    # not before a short one
    from gsprestore.methods import defaults

    real = defaults.recorded_speed
    monkeypatch.setattr(defaults, "recorded_speed",
                        lambda m, t, d, man: 1e-5 if m == "fake-fill" else real(m, t, d, man))
    code, _, err = _cli(monkeypatch, capsys, "--task", "demosaic", "--dataset", "kodak", "--data-dir", str(parent),
                        "--methods", "fake-fill,bilinear")
    assert code == 0 and "estimate: about 5 min in all for 3 images (0.00224 MP" in err and "fake-fill 5 min" in err
    code, _, err = _cli(monkeypatch, capsys, "--task", "demosaic", "--dataset", "kodak", "--data-dir", str(parent),
                        "--methods", "bilinear")
    assert code == 0 and "estimate" not in err and benchmark_run.ESTIMATE_NOTE_SECONDS == 30


def test_the_results_table_is_not_cut_off_a_terminal():
    """Off a terminal (a pipe, a log) the table is printed at its own width: every header whole,
    never `s/ima…` at Rich's default 80 columns."""
    import io

    from gsprestore.cli.benchmark_cmd import print_table
    from gsprestore.evaluation.benchmark_run import results_table

    result = {"protocol": {"task": "demosaic", "dataset": "kodak", "images": 24, "pattern": "RGGB",
                           "noise": {"sigma": 0}, "device": "cpu", "paper": "Do et al. 2024"},
              "results": [{"method": "ensemble+se", "psnr_dataset_mse": 39.02, "psnr_mean": 38.9, "ssim_mean": 0.98,
                           "seconds_per_image": 123.456, "megapixels_per_second": 0.0032, "params": 653412,
                           "paper": {"psnr": 39.11, "ssim": 0.9876}}]}
    out = io.StringIO()
    print_table(results_table(result), file=out)
    text = out.getvalue()
    assert "…" not in text
    for word in ("s/image", "MP/s", "params", "paper PSNR", "paper SSIM", "123.456", "653,412", "ensemble+se"):
        assert word in text, text
