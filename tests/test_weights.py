"""Weights: the manifest, SHA-256 verification before unpickling, ``weights_only`` loading, clear
one-line errors for missing / tampered / truncated / foreign files, and ``gsprestore models``."""

from __future__ import annotations

import json
import os
import sys
import zipfile

import pytest
import torch
from typer.testing import CliRunner

from gsprestore_lab import release
from gsprestore.methods import weights as W
from gsprestore.methods.defaults import recorded_speed
from gsprestore.core.errors import WeightsError
from gsprestore.models import build_model

TINY_GLR = dict(blocks=1, heads=2, features=3, width=6, cg_iters=2)
TINY = dict(TINY_GLR, admm_iters=1)


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    """A weights folder with one tiny uGTV demosaicker listed in its manifest."""
    torch.manual_seed(0)
    model = build_model("ugtv", "demosaic", **TINY)
    digest = W.save_weights(tmp_path / "ugtv_demosaic.pt", model, {"method": "ugtv", "task": "demosaic",
                                                                     "recipe": {"epochs": 1}})
    manifest = {"models": [{"file": "ugtv_demosaic.pt", "sha256": digest, "method": "ugtv",
                            "task": "demosaic", "params": model.num_params()}]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv(W.ENV_VAR, str(tmp_path))
    return model, tmp_path / "ugtv_demosaic.pt"


def one_line(exc: BaseException) -> str:
    msg = str(exc)
    assert "\n" not in msg
    return msg


def test_save_and_load_round_trip(shipped):
    model, path = shipped
    loaded = W.load_model("ugtv", "demosaic")
    assert not loaded.training
    assert loaded.config == model.config
    for (k, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), k
    assert loaded.weights_meta["recipe"] == {"epochs": 1}
    # the file holds only tensors and plain values: it loads with weights_only=True
    obj = torch.load(path, weights_only=True)
    assert set(W.FILE_KEYS) <= set(obj) and obj["method"] == "ugtv" and obj["task"] == "demosaic"
    assert W.sha256_file(path) == W.read_manifest()["models"][0]["sha256"]
    assert W.weights_status("ugtv", "demosaic") == "shipped"
    assert W.weights_status("uglr", "demosaic") == "missing"
    assert W.weights_status("malvar", "demosaic") == "n.a."


def test_tampered_shipped_file_is_refused_before_loading(shipped, monkeypatch):
    _, path = shipped
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    # sha256 is checked first: torch.load must not even be called
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load called on a tampered file"))
    with pytest.raises(WeightsError) as exc:
        W.load_model("ugtv", "demosaic")
    msg = one_line(exc.value)
    assert str(path) in msg and "SHA-256 mismatch" in msg


def test_truncated_user_file_is_a_clear_error(shipped, tmp_path):
    _, path = shipped
    cut = tmp_path / "cut.pt"
    cut.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(WeightsError) as exc:
        W.load_model("ugtv", "demosaic", path=cut)
    msg = one_line(exc.value)
    assert msg.startswith(f"{cut}: not a readable weights file")


class Evil:  # pickled by reference: weights_only loading must refuse to import it
    def __reduce__(self):
        return (print, ("code ran",))


def test_pickled_code_is_refused(tmp_path, capsys):
    path = tmp_path / "evil.pt"
    torch.save({"state_dict": {}, "config": {}, "method": "ugtv", "task": "demosaic", "x": Evil()}, path)
    with pytest.raises(WeightsError) as exc:
        W.load_model("ugtv", "demosaic", path=path)
    assert str(path) in one_line(exc.value)
    assert "code ran" not in capsys.readouterr().out


def test_wrong_method_task_or_shape_is_refused(tmp_path):
    torch.manual_seed(0)
    model = build_model("uglr", "upscale2x", **TINY_GLR)
    path = tmp_path / "uglr.pt"
    W.save_weights(path, model, {})
    with pytest.raises(WeightsError, match="holds uglr \\(upscale2x\\) weights, not ugtv"):
        W.load_model("ugtv", "upscale2x", path=path)
    assert W.load_model("uglr", "upscale2x", path=path).config == model.config
    obj = torch.load(path, weights_only=True)
    obj["state_dict"]["blocks.0.metric_factor"] = torch.zeros(5, 5)
    torch.save(obj, path)
    with pytest.raises(WeightsError, match="weights do not fit the uglr network"):
        W.load_model("uglr", "upscale2x", path=path)
    (tmp_path / "junk.pt").write_bytes(b"not a zip at all")
    with pytest.raises(WeightsError, match="not a readable weights file"):
        W.load_model("uglr", "upscale2x", path=tmp_path / "junk.pt")
    with pytest.raises(WeightsError, match="no such weights file"):
        W.load_model("uglr", "upscale2x", path=tmp_path / "missing.pt")


def test_listed_but_missing_file_and_bad_manifest(tmp_path, monkeypatch):
    monkeypatch.setenv(W.ENV_VAR, str(tmp_path))
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"models": [{"file": "gone.pt", "sha256": "0" * 64, "method": "uglr", "task": "demosaic"}]}))
    with pytest.raises(WeightsError, match="listed in the manifest but missing"):
        W.load_model("uglr", "demosaic")
    assert W.weights_status("uglr", "demosaic") == "missing"
    (tmp_path / "manifest.json").write_text("{broken")
    with pytest.raises(WeightsError, match="unreadable weights manifest"):
        W.read_manifest()


def test_weights_dir_is_the_checkout_folder_by_default(monkeypatch):
    monkeypatch.delenv(W.ENV_VAR, raising=False)
    d = W.weights_dir()
    assert (d / "manifest.json").is_file()
    assert isinstance(W.read_manifest()["models"], list)


def test_weights_dir_finds_installed_data_files(tmp_path, monkeypatch):
    """Installs of older versions put weights/ under <prefix>/share/gsprestore/weights: still found."""
    monkeypatch.delenv(W.ENV_VAR, raising=False)
    installed = tmp_path / "share" / "gsprestore" / "weights"
    installed.mkdir(parents=True)
    (installed / "manifest.json").write_text('{"models": []}')
    monkeypatch.setattr(W, "__file__", str(tmp_path / "site-packages" / "gsprestore" / "weights.py"))
    monkeypatch.setattr(W.sysconfig, "get_path", lambda name, *a, **k: str(tmp_path))
    assert W.weights_dir() == installed


def test_models_command_table_and_json(shipped):
    from gsprestore.cli.app import _register, app
    from gsprestore.methods.registry import METHODS

    _register()
    runner = CliRunner()
    res = runner.invoke(app, ["models", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["models"]
    assert {r["method"] for r in rows} == set(METHODS)
    by = {(r["method"], r["task"]): r for r in rows}
    assert by[("ugtv", "demosaic")]["weights"] == "shipped"
    assert by[("uglr", "upscale2x")]["weights"] == "missing"
    assert by[("malvar", "demosaic")] == {**by[("malvar", "demosaic")], "params": 0, "weights": "n.a."}
    # the shipped (tiny) network's size and unrolling, read from its file (this manifest records no
    # config), not the paper-size default's; a learned method without weights shows the default
    model, _ = shipped
    tiny = by[("ugtv", "demosaic")]
    assert tiny["params"] == model.num_params() != build_model("ugtv", "demosaic").num_params()
    assert tiny["config"] == model.config and tiny["config_source"] == "shipped"
    assert tiny["unrolling"] == f"1 block x 2 heads, {TINY['admm_iters']} ADMM x {TINY['cg_iters']} CG"
    bare = by[("uglr", "upscale2x")]
    assert bare["config_source"] == "default" and bare["params"] == build_model("uglr", "upscale2x").num_params()
    assert "(default configuration; no weights)" in bare["summary"]
    res = runner.invoke(app, ["models"])
    assert res.exit_code == 0 and "ugtv" in res.output and "shipped" in res.output


def test_models_command_module_does_not_import_torch():
    import subprocess

    code = ("import sys; import gsprestore.cli.models_cmd; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.slow
def test_a_regular_install_ships_the_weights_folder(built_wheel):
    """The wheel (what ``pip install .`` and ``pip install --target DIR .`` install) holds
    gsprestore/weights/manifest.json and every file the manifest lists as package data inside the
    package, where :func:`weights_dir` looks first."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    names = zipfile.ZipFile(built_wheel).namelist()
    assert "gsprestore/weights/manifest.json" in names, "weights/manifest.json is not in the package"
    folder = "gsprestore/weights"
    manifest = json.loads((root / "gsprestore" / "weights" / "manifest.json").read_text())
    for entry in manifest["models"]:
        assert f"{folder}/{entry['file']}" in names, entry["file"]


def test_ship_weights_copies_hashes_and_lists_the_file(tmp_path, monkeypatch):
    torch.manual_seed(1)
    model = build_model("uglr", "upscale2x", **TINY_GLR)
    run = tmp_path / "run"
    W.save_weights(run / "model.pt", model, {"recipe": {"epochs": 2}, "val_psnr": 30.5})
    folder = tmp_path / "weights"
    entry = W.ship_weights(run / "model.pt", folder=folder, scores={"mcm": {"rows": []}}, notes="tiny")
    assert entry["file"] == "uglr_upscale2x.pt" and entry["params"] == model.num_params()
    assert entry["sha256"] == W.sha256_file(folder / "uglr_upscale2x.pt")
    assert entry["training"][0]["recipe"] == {"epochs": 2} and entry["notes"] == "tiny"
    monkeypatch.setenv(W.ENV_VAR, str(folder))
    loaded = W.load_model("uglr", "upscale2x")  # verified against the manifest
    for (k, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), k
    # shipping again replaces the entry; another model is added beside it, in a fixed order
    W.ship_weights(run / "model.pt", folder=folder)
    W.save_weights(run / "g.pt", build_model("ugtv", "demosaic", **TINY))
    W.ship_weights(run / "g.pt", folder=folder)
    listed = [(e["method"], e["task"]) for e in W.read_manifest(folder / "manifest.json")["models"]]
    assert listed == [("ugtv", "demosaic"), ("uglr", "upscale2x")]
    # a file that is not a gsprestore weights file never reaches the manifest
    (run / "bad.pt").write_bytes(b"not a zip")
    before = (folder / "manifest.json").read_text()
    with pytest.raises(WeightsError, match="not a readable weights file"):
        W.ship_weights(run / "bad.pt", folder=folder)
    assert (folder / "manifest.json").read_text() == before


def test_ship_tool_records_benchmark_rows(tmp_path):
    W.save_weights(tmp_path / "m.pt", build_model("ugtv", "demosaic", **TINY), {"steps": 7})
    rows = [{"method": "ugtv", "dataset": "mcm", "noise_sigma": 0.0, "images": 18, "psnr_dataset_mse": 33.1,
             "psnr_mean": 33.0, "ssim_mean": 0.95, "seconds_per_image": 9.0, "megapixels_per_second": 0.03},
            {"method": "malvar", "dataset": "mcm", "psnr_dataset_mse": 32.8}]
    (tmp_path / "b.json").write_text(json.dumps({"protocol": {"task": "demosaic"}, "results": rows}))
    assert release.ship(tmp_path / "m.pt", stages=[tmp_path / "m.pt"], scores={"mcm": tmp_path / "b.json"},
                        commands={"mcm": "gsprestore benchmark ..."}, folder=tmp_path / "w")["file"] == "ugtv_demosaic.pt"
    entry = W.read_manifest(tmp_path / "w" / "manifest.json")["models"][0]
    assert entry["training"][0]["steps"] == 7
    assert entry["scores"]["mcm"]["rows"] == [{k: rows[0][k] for k in release.ROW_KEYS}]
    assert entry["scores"]["mcm"]["command"] == "gsprestore benchmark ..."
    # one more stage on top of what is shipped (train --init the shipped file): both records kept
    W.save_weights(tmp_path / "m2.pt", build_model("ugtv", "demosaic", **TINY), {"steps": 9})
    assert release.ship(tmp_path / "m2.pt", after_shipped=True, scores={"mcm": tmp_path / "b.json"},
                        folder=tmp_path / "w")["file"] == "ugtv_demosaic.pt"
    entry = W.read_manifest(tmp_path / "w" / "manifest.json")["models"][0]
    history = json.loads((tmp_path / "w" / "weights-history.json").read_text())
    assert [t["steps"] for t in history["ugtv_demosaic"]] == [7, 9]  # every stage in the history file
    assert [t["steps"] for t in entry["training"]] == [9] and "2 stage(s)" in entry["training_history"]
    # a speed measured by the GPU job (its infer.json) is recorded, and read back as the model's speed
    infer = {"method": "ugtv", "task": "demosaic", "device_name": "H100", "tile": 2000, "overlap": 32,
             "fp32_fused": {"megapixels": 24.0, "megapixels_per_s": 13.4, "fused_ran": True},
             "bf16_fused": {"megapixels": 24.0, "megapixels_per_s": 14.3, "fused_ran": False}}
    (tmp_path / "infer.json").write_text(json.dumps(infer))
    assert release.ship(tmp_path / "m2.pt", after_shipped=True, speeds={"cuda": f"{tmp_path / 'infer.json'}:fp32_fused"},
                        folder=tmp_path / "w")["file"] == "ugtv_demosaic.pt"
    manifest = W.read_manifest(tmp_path / "w" / "manifest.json")
    assert manifest["models"][0]["speed"]["cuda"]["megapixels_per_second"] == 13.4
    assert recorded_speed("ugtv", "demosaic", "cuda", manifest) == 13.4
    assert recorded_speed("ugtv", "demosaic", "cpu", manifest) is None
    # kept when shipped again with --keep-speed, dropped without
    assert release.ship(tmp_path / "m2.pt", after_shipped=True, keep_speed=True, folder=tmp_path / "w")["file"] == "ugtv_demosaic.pt"
    assert recorded_speed("ugtv", "demosaic", "cuda", W.read_manifest(tmp_path / "w" / "manifest.json")) == 13.4
    # a "fused" measurement whose fused kernels did not run, or another model's, is refused
    with pytest.raises(SystemExit, match="did not run the fused kernels"):
        release.ship(tmp_path / "m2.pt", speeds={"cuda": f"{tmp_path / 'infer.json'}:bf16_fused"}, folder=tmp_path / "w")
    (tmp_path / "other.json").write_text(json.dumps(dict(infer, method="uglr")))
    with pytest.raises(SystemExit, match="not ugtv demosaic"):
        release.ship(tmp_path / "m2.pt", speeds={"cuda": f"{tmp_path / 'other.json'}:fp32_fused"}, folder=tmp_path / "w")
    # a block naming its own method and task (the job's 2x speeds) is that model's, not the file's
    infer["ugtv_upscale2x_fp32_fused"] = {"method": "ugtv", "task": "upscale2x", "input_megapixels": 6.0,
                                          "megapixels": 24.0, "megapixels_per_s": 9.5, "fused_ran": True}
    (tmp_path / "infer.json").write_text(json.dumps(infer))
    with pytest.raises(SystemExit, match="ugtv_upscale2x_fp32_fused measures ugtv upscale2x, not ugtv demosaic"):
        release.ship(tmp_path / "m2.pt", speeds={"cuda": f"{tmp_path / 'infer.json'}:ugtv_upscale2x_fp32_fused"},
                     folder=tmp_path / "w")
    W.save_weights(tmp_path / "u.pt", build_model("ugtv", "upscale2x", **TINY), {"steps": 3})
    assert release.ship(tmp_path / "u.pt", speeds={"cuda": f"{tmp_path / 'infer.json'}:ugtv_upscale2x_fp32_fused"},
                        folder=tmp_path / "w")["file"] == "ugtv_upscale2x.pt"
    speed = W.manifest_entry("ugtv", "upscale2x", W.read_manifest(tmp_path / "w" / "manifest.json"))["speed"]["cuda"]
    assert speed["megapixels_per_second"] == 9.5 and speed["conditions"].startswith("6.0 MP image to 24.0 MP")


def test_help_and_version_import_no_torch_and_time_nothing(tmp_path):
    """Issue 50 / 52: ``gsprestore --help``, ``--version`` and a command's ``--help`` answer without
    importing torch and without measuring the machine (no cache file is written)."""
    import os
    import subprocess

    code = ("import os, sys, runpy; sys.argv = ['gsprestore'] + sys.argv[1:]\n"
            "def report(): print('TORCH', 'torch' in sys.modules, file=sys.stderr)\n"
            "leave = os._exit\n"  # demosaic and upscale2x end without the teardown (cli.entry._leave_now)
            "os._exit = lambda code: (report(), sys.stderr.flush(), leave(code))\n"
            "try:\n    runpy.run_module('gsprestore', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "report()")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    for args in (["--help"], ["--version"], ["demosaic", "--help"], ["upscale2x", "--help"], ["train", "--help"]):
        res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=60)
        assert "TORCH False" in res.stderr, (args, res.stderr[-500:])
        assert res.stdout.strip(), args
    assert not (tmp_path / "cache").exists()


def test_a_weights_folder_that_is_not_there_is_an_error_not_menon(tmp_path, monkeypatch):
    """Issue 51 (round 4): GSPRESTORE_WEIGHTS naming a missing folder, or a damaged manifest, made
    `gsprestore models` print a table whose defaults were the classical methods, exit 0."""
    from cli_runner import cli

    monkeypatch.setenv(W.ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(WeightsError, match="GSPRESTORE_WEIGHTS names a weights folder, but there is no such folder"):
        W.read_manifest()
    code, out, err = cli("models")
    assert code == 1 and "no such folder" in err and "default" not in out
    (tmp_path / "nowhere").mkdir()
    code, _, err = cli("models")
    assert code == 1 and "no manifest.json in this folder" in err
    (tmp_path / "nowhere" / "manifest.json").write_text("{damaged")
    code, out, err = cli("models")
    assert code == 1 and "unreadable weights manifest" in err and "default" not in out


def test_the_command_shortens_openmps_idle_spin_before_torch_loads():
    """The console script sets GOMP_SPINCOUNT (gsprestore.core.process.configure_openmp) before
    anything imports torch, and leaves a value the user set alone."""
    import subprocess
    import sys

    probe = ("import os, sys; sys.argv = ['gsprestore', '--version']\n"
             "from gsprestore.cli import entry\n"
             "try:\n    entry.main()\nexcept SystemExit:\n    pass\n"
             "print(os.environ.get('GOMP_SPINCOUNT'), 'torch' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    from gsprestore.core.process import OPENMP_SPIN_COUNT

    assert out.stdout.split()[-2:] == [str(OPENMP_SPIN_COUNT), "False"]
    out = subprocess.run([sys.executable, "-c", probe], env={**env, "GOMP_SPINCOUNT": "300000"}, capture_output=True,
                         text=True, check=True)
    assert out.stdout.split()[-2:] == ["300000", "False"]
