"""Recipe files (``gsprestore train --recipe FILE|MODEL``, ``--print-recipe``): a TOML recipe reads back to
the same :class:`TrainConfig` it was printed from, the command line wins over the file, a run's
``config.json`` and a shipped model's recorded recipe are recipes too, and a bad file is a one-line
usage error naming it. Tiny synthetic photos in ``tmp_path``; the one training run is one step."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from gsprestore.core.errors import UsageError
from gsprestore.training.recipe import TrainConfig, load_recipe, recipe_toml


def _photos(root):
    root.mkdir()
    rng = np.random.default_rng(3)
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, (40, 44, 3), dtype=np.uint8)).save(root / f"p{i}.png")
    return root


def _cli(args):
    from gsprestore.cli.app import _register, app

    _register()
    return CliRunner().invoke(app, args)


def _main(args, capsys, monkeypatch):
    from gsprestore.cli.app import main

    monkeypatch.setattr("sys.argv", ["gsprestore", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    return exc.value.code, capsys.readouterr().err


def test_toml_round_trip(tmp_path):
    cfg = TrainConfig(task="demosaic", prior="gtv", data=["a b/ü", "c"], patch_size=32, lr=3e-4, val_patches=None,
                      schedule="cosine-time", augment=False, color_jitter=0.2, raw_noise="high",
                      model={"width": 48, "feature_trunk": "packed", "gtv_precondition": True, "metric_init": 0.5},
                      init="w \"x\".pt").check()
    path = tmp_path / "r.toml"
    path.write_text(recipe_toml(cfg), encoding="utf-8")
    fields, notes = load_recipe(path)
    assert notes == [] and TrainConfig(**fields) == cfg


def test_print_recipe_then_train_from_it(tmp_path):
    photos = _photos(tmp_path / "photos")
    base = ["train", "--task", "demosaic", "--prior", "gtv", "--data", str(photos), "--patch-size", "16",
            "--patches", "8", "--val-patches", "4", "--epochs", "1", "--batch-size", "4", "--lr", "2e-4",
            "--model-opt", 'feature_trunk="packed"', "--model-opt", "width=8", "--blocks", "1", "--print-recipe"]
    res = _cli(base)
    assert res.exit_code == 0, res.output
    printed = tmp_path / "mine.toml"
    printed.write_text(res.stdout, encoding="utf-8")
    assert 'lr = 0.0002' in res.stdout and "[model]" in res.stdout and "width = 8" in res.stdout
    # the command line wins over the file; every other value comes from it
    run = tmp_path / "run"
    res = _cli(["train", "--recipe", str(printed), "--out", str(run), "--seed", "7", "--max-steps", "1",
                "--threads", "1", "-q"])
    assert res.exit_code == 0, res.output
    stored = json.loads((run / "config.json").read_text())["recipe"]
    assert stored["seed"] == 7 and stored["lr"] == 2e-4 and stored["patch_size"] == 16
    assert stored["model"]["width"] == 8 and stored["model"]["blocks"] == 1
    # a run's config.json is a recipe too: printing from it gives the run's recipe back
    again = _cli(["train", "--recipe", str(run / "config.json"), "--print-recipe"])
    assert again.exit_code == 0, again.output
    assert 'seed = 7' in again.stdout and "width = 8" in again.stdout


def test_shipped_model_recipe_by_name():
    fields, notes = load_recipe("ugtv-lite_demosaic")
    assert fields["task"] == "demosaic" and fields["prior"] == "gtv"
    assert fields["model"]["feature_trunk"] == "packed"
    assert "data" not in fields and "init" not in fields and "pass --data" in notes[0]
    with pytest.raises(UsageError, match="no recipe file or shipped model named 'nope_demosaic'"):
        load_recipe("nope_demosaic")


@pytest.mark.parametrize("text, words", [
    ("lr = 0.1\nlearning_rate = 3\n", "unknown recipe key(s) 'learning_rate'"),
    ('lr = "fast"\n', "recipe key 'lr' must be a number, got 'fast'"),
    ("epochs = 2.5\n", "recipe key 'epochs' must be a whole number"),
    ("augment = 1\n", "recipe key 'augment' must be true or false"),
    ("model = 3\n", "recipe key 'model' must be a table of model options"),
    ("lr = = 1\n", "not a recipe file"),
    ('task = "demosaic"\nprior = "gtv"\n[model]\nwidthh = 3\n', "unknown model option(s) 'widthh'"),
    ('task = "demosaic"\nprior = "gtv"\n[model]\nwidth = "x"\n', "model option width must be a whole number"),
])
def test_bad_recipe_files_are_one_line_errors(tmp_path, capsys, monkeypatch, text, words):
    bad = tmp_path / "bad.toml"
    bad.write_text(text, encoding="utf-8")
    code, err = _main(["train", "--recipe", str(bad), "--print-recipe", "--data", str(_photos(tmp_path / "p"))],
                      capsys, monkeypatch)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err
    assert "bad.toml" in err or "model option" in err, err  # the file's own errors name it


def test_recipe_with_resume_is_refused(tmp_path, capsys, monkeypatch):
    (tmp_path / "r.toml").write_text("lr = 0.1\n", encoding="utf-8")
    code, err = _main(["train", "--resume", str(tmp_path), "--recipe", str(tmp_path / "r.toml")], capsys, monkeypatch)
    assert code == 2 and "--recipe" in err and "cannot change a run's recipe on --resume" in err


def test_the_howto_recipe_file_is_a_recipe(tmp_path):
    """The TOML example of docs/howto/train-your-own-weights.md reads as a recipe and checks."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "howto" / "train-your-own-weights.md").read_text()
    block = text.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "my-recipe.toml").write_text(block, encoding="utf-8")
    fields, _ = load_recipe(tmp_path / "my-recipe.toml")
    cfg = TrainConfig(**fields).check()
    assert cfg.method == "ugtv-lite" and cfg.model["width"] == 48
