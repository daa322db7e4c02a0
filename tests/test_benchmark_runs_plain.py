"""``gsprestore benchmark --dataset kodak`` runs with no other option: both tasks (or the ones the
methods imply), ``--device auto``, data from --data-dir / $GSPRESTORE_DATA_DIR / the cache, a
missing data set named with the folder and ``--download``, progress with totals and an ETA."""

from __future__ import annotations

import json

import pytest

from gsprestore.evaluation import datasets
from gsprestore.evaluation.benchmark_run import plan_tasks
from gsprestore.core.errors import UsageError
from test_benchmark import _cli, fake_methods, tiny_kodak  # noqa: F401  (fixtures)


def test_tasks_follow_the_methods():
    assert plan_tasks(None, None) == [("demosaic", None), ("upscale2x", None)]
    assert plan_tasks(None, "menon") == [("demosaic", "menon")]
    assert plan_tasks(None, "bicubic,menon,ugtv") == [("demosaic", "menon,ugtv"), ("upscale2x", "bicubic,ugtv")]
    assert plan_tasks("upscale2x", "bicubic") == [("upscale2x", "bicubic")]
    with pytest.raises(UsageError, match="unknown method"):
        plan_tasks(None, "nope")


def test_plain_kodak_runs_both_tasks_from_the_environment(tiny_kodak, monkeypatch, capsys, tmp_path):  # noqa: F811 (fixture)
    parent, _ = tiny_kodak
    monkeypatch.setenv(datasets.ENV_VAR, str(parent))
    out = tmp_path / "res.json"
    code, stdout, err = _cli(monkeypatch, capsys, "--dataset", "kodak", "--methods", "fake-fill,fake-nearest",
                             "--json", str(out))
    assert code == 0, err
    assert "demosaic, kodak (3 images)" in stdout and "upscale2x, kodak (3 images)" in stdout
    demosaic = json.loads((tmp_path / "res-demosaic.json").read_text())
    upscale = json.loads((tmp_path / "res-upscale2x.json").read_text())
    assert demosaic["results"][0]["method"] == "fake-fill" and upscale["results"][0]["method"] == "fake-nearest"
    assert demosaic["protocol"]["device"] in ("cpu", "cuda", "cuda:0")  # --device auto
    # not a terminal: one progress line per image, with the total and an ETA
    assert "demosaic on kodak: 1/3 images (kodim01.png)" in err and "eta" in err
    assert "upscale2x on kodak: 3/3 images" in err
    # the report paths are checked before anything runs
    code, _, err = _cli(monkeypatch, capsys, "--dataset", "kodak", "--methods", "fake-fill,fake-nearest",
                        "--json", str(out))
    assert code == 1 and "res-demosaic.json: output exists" in err and "images" not in err


def test_missing_data_names_the_folder_and_download(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv(datasets.ENV_VAR, raising=False)
    cache = tmp_path / "cache" / "datasets"
    cache.mkdir(parents=True)
    monkeypatch.setattr(datasets, "cache_dir", lambda: cache)
    code, _, err = _cli(monkeypatch, capsys, "--dataset", "kodak", "--methods", "fake-fill")
    assert code == 1 and err.startswith(f"error: {cache}: ") and "--download" in err and err.count("\n") == 1
