"""The ensemble method (gsprestore.methods.ensemble): the mean of uGTV's and uGLR's outputs, checked against
the two networks run on their own; its recorded scores count only for the member weights they were
measured with (gsprestore.methods.defaults.current_ensembles, lab/tools/record_ensemble.py)."""

from __future__ import annotations

import copy
import json
import shutil

import numpy as np
import pytest
import torch

from gsprestore_lab import release
from gsprestore.methods import defaults, weights
from gsprestore.core.errors import UsageError
from gsprestore.methods.registry import get_restorer, methods_for


@pytest.mark.parametrize("task,pattern,shape", [("demosaic", "GRBG", (1, 1, 24, 20)),
                                                ("upscale2x", "RGGB", (1, 3, 10, 12))])
def test_the_output_is_the_mean_of_the_two_networks(task, pattern, shape):
    y = torch.rand(*shape, generator=torch.Generator().manual_seed(0))
    ens = get_restorer("ensemble", task)
    gtv, glr = get_restorer("ugtv", task), get_restorer("uglr", task)
    expected = (gtv(y, pattern).double() + glr(y, pattern).double()) / 2
    out = ens(y, pattern)
    assert out.shape == expected.shape
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=1e-6)
    # and it differs from each member: a mean, not one of them passed through
    assert (out.double() - gtv(y, pattern).double()).abs().max() > 1e-4
    assert ens.kind == "ensemble" and ens.halo == max(gtv.halo, glr.halo)
    assert ens.num_params == gtv.num_params + glr.num_params
    assert "ensemble" in methods_for(task)


def test_self_ensemble_of_the_ensemble_averages_the_transpose_too():
    y = torch.rand(1, 1, 16, 16, generator=torch.Generator().manual_seed(1))
    plain = get_restorer("ensemble", "demosaic")
    se = get_restorer("ensemble", "demosaic", self_ensemble=True)
    mirrored = plain(y.transpose(-1, -2).contiguous(), "RGGB").transpose(-1, -2)
    torch.testing.assert_close(se(y, "RGGB"), (plain(y, "RGGB") + mirrored) / 2, rtol=0, atol=1e-6)


def test_member_weights_can_be_given_and_bad_options_are_usage_errors(tmp_path):
    own = tmp_path / "mine.pt"
    shutil.copy(weights.weights_dir() / "uglr_demosaic.pt", own)
    ens = get_restorer("ensemble", "demosaic", weights={"uglr": str(own)})
    assert ens.info["members"]["uglr"]["weights"] == str(own)
    assert ens.info["members"]["ugtv"]["weights"].endswith("ugtv_demosaic.pt")
    with pytest.raises(UsageError, match="no member menon"):
        get_restorer("ensemble", "demosaic", weights={"menon": str(own)})
    with pytest.raises(UsageError, match="one each"):
        get_restorer("ensemble", "demosaic", weights=str(own))
    with pytest.raises(UsageError, match="unknown options"):
        get_restorer("ensemble", "demosaic", cg="exact")


def test_the_api_and_the_engine_run_it_tiled_like_untiled():
    import gsprestore

    rng = np.random.default_rng(2)
    raw = rng.random((40, 36)).astype(np.float32)
    whole = gsprestore.demosaic(raw, method="ensemble")
    tiled = gsprestore.demosaic(raw, method="ensemble", tile=24, overlap=32)
    assert whole.shape == (40, 36, 3)
    np.testing.assert_allclose(tiled, whole, atol=1e-4)


SHA = {"ugtv": "a" * 64, "uglr": "b" * 64}


def _manifest(ens=(36.0, 39.5), members=None):
    """uGTV and uGLR shipped (SHA-256 :data:`SHA`; a speed recorded on cuda only) and an ensemble
    recorded with ``members`` (default: those shipped) at McM / Kodak ``ens``."""
    def entry(method, scores):
        return {"file": f"{method}_demosaic.pt", "sha256": SHA[method], "method": method, "task": "demosaic",
                "scores": {"mcm": {"rows": [{"noise_sigma": 0.0, "psnr_dataset_mse": scores[0]}]},
                           "kodak": {"rows": [{"noise_sigma": 0.0, "psnr_dataset_mse": scores[1],
                                               "megapixels_per_second": 2.0}], "protocol": {"device": "cuda"}}}}

    def rows(score):
        return {"rows": [{"noise_sigma": 0.0, "psnr_dataset_mse": score}]}

    return {"models": [entry("ugtv", (35.4, 38.6)), entry("uglr", (35.3, 38.7))],
            "baselines": {"scores": {"demosaic": {"mcm": {"malvar": 32.79, "menon": 32.68},
                                                  "kodak": {"malvar": 34.13, "menon": 38.06}}}},
            "ensembles": [{"method": "ensemble", "task": "demosaic", "members": members or dict(SHA),
                           "scores": {"mcm": rows(ens[0]), "kodak": rows(ens[1])}}]}


@pytest.fixture
def fake_weights(tmp_path, monkeypatch):
    monkeypatch.setenv(weights.ENV_VAR, str(tmp_path))

    def write(manifest):
        (tmp_path / "manifest.json").write_text(json.dumps(manifest))
        for e in manifest["models"]:
            (tmp_path / e["file"]).write_bytes(b"x")
        return tmp_path

    return write


def test_best_runs_the_ensemble_when_its_record_matches_the_shipped_members(fake_weights):
    fake_weights(_manifest())
    assert defaults.choose_default("demosaic", prefer="best").method == "ensemble"
    # on cuda its speed is not recorded: the default is the next one that is fast enough there
    c = defaults.choose_default("demosaic", device="cuda")
    assert c.method == "uglr" and "ensemble is better by quality" in c.reason
    # a record measured with other uGLR weights counts for nothing
    fake_weights(_manifest(members={"ugtv": SHA["ugtv"], "uglr": "0" * 64}))
    assert defaults.current_ensembles("demosaic", defaults.shipped_manifest()) == {}
    assert defaults.choose_default("demosaic", prefer="best").method == "uglr"
    # and an ensemble that does not beat the classical methods on both sets is not chosen
    fake_weights(_manifest(ens=(36.0, 38.0)))
    assert defaults.choose_default("demosaic", prefer="best").method == "uglr"


def test_models_lists_the_ensemble_with_its_members_status(fake_weights):
    from gsprestore.methods.catalog import models_overview

    fake_weights(_manifest())
    row = next(r for r in models_overview() if r["method"] == "ensemble" and r["task"] == "demosaic")
    assert row["weights"] == "shipped" and row["mcm"] == 36.0 and row["kind"] == "ensemble"


def test_benchmark_weights_for_members_reach_the_ensemble(tmp_path):
    from gsprestore.evaluation.benchmark_run import weights_options

    own = tmp_path / "g.pt"
    shutil.copy(weights.weights_dir() / "ugtv_demosaic.pt", own)
    opts = weights_options([f"ugtv={own}"], ["ensemble"])
    assert opts == {"ensemble": {"weights": {"ugtv": str(own)}}}
    opts = weights_options([f"ugtv={own}"], ["ugtv", "ensemble"])
    assert opts == {"ugtv": {"weights": str(own)}, "ensemble": {"weights": {"ugtv": str(own)}}}
    with pytest.raises(UsageError, match="members' files"):
        weights_options([f"ensemble={own}"], ["ensemble"])
    with pytest.raises(UsageError, match="not among"):
        weights_options([f"uglr={own}"], ["menon"])


def test_a_benchmark_row_records_the_member_weights_and_the_tool_binds_scores_to_them(tmp_path):
    from PIL import Image

    from gsprestore.evaluation.benchmark import run_benchmark

    data = tmp_path / "imgs"
    data.mkdir()
    rng = np.random.default_rng(3)
    Image.fromarray((rng.random((20, 24, 3)) * 255).astype(np.uint8)).save(data / "a.png")
    result = run_benchmark("demosaic", "custom", ["ensemble"], data)
    row = result["results"][0]
    assert row["method"] == "ensemble" and row["weights"]["shipped"] is True
    members = {m: r["sha256"] for m, r in row["weights"]["members"].items()}
    assert members == {m: weights.sha256_file(weights.weights_dir() / f"{m}_demosaic.pt") for m in ("ugtv", "uglr")}
    report = tmp_path / "r.json"
    report.write_text(json.dumps(result))

    folder = tmp_path / "w"
    shutil.copytree(weights.weights_dir(), folder)
    assert release.record_ensemble("demosaic", scores={"mcm": report, "kodak": report},
                                   folder=folder)["members"] == members
    manifest = json.loads((folder / "manifest.json").read_text())
    assert defaults.current_ensembles("demosaic", manifest)["ensemble"]["members"] == members
    # a GPU speed from the device job's measurement makes it a candidate default on cuda
    infer = tmp_path / "infer.json"
    infer.write_text(json.dumps({"device_name": "H100", "tile": 1024, "overlap": 32, "ensemble_demosaic_fp32_fused": {
        "method": "ensemble", "task": "demosaic", "megapixels": 24.0, "megapixels_per_s": 6.5, "fused_ran": True}}))
    assert release.record_ensemble("demosaic", folder=folder,  # the recorded scores kept
                                   speeds={"cuda": f"{infer}:ensemble_demosaic_fp32_fused"})["members"] == members
    manifest = json.loads((folder / "manifest.json").read_text())
    assert defaults.recorded_speed("ensemble", "demosaic", "cuda", manifest) == 6.5
    assert set(defaults.current_ensembles("demosaic", manifest)["ensemble"]["scores"]) == {"mcm", "kodak"}
    entry = defaults.current_ensembles("demosaic", manifest)["ensemble"]  # the tiny image's scores, made winning:
    for block in entry["scores"].values():  # with a recorded GPU speed >= 1 MP/s it is the default there
        block["rows"][0]["psnr_dataset_mse"] = 45.0
    assert defaults.choose_default("demosaic", manifest, device="cuda").method == "ensemble"
    # a row measured with other member weights is refused, naming the file
    stale = copy.deepcopy(result)
    stale["results"][0]["weights"]["members"]["uglr"]["sha256"] = "0" * 64
    report.write_text(json.dumps(stale))
    with pytest.raises(SystemExit, match="uglr weights other than"):
        release.record_ensemble("demosaic", scores={"mcm": report}, folder=folder)
    # shipping other uGLR weights makes the recorded entry stale
    manifest["models"] = [dict(e, sha256="1" * 64) if e["method"] == "uglr" and e["task"] == "demosaic" else e
                          for e in manifest["models"]]
    assert defaults.current_ensembles("demosaic", manifest) == {}


def test_the_cli_runs_it_and_refuses_a_weights_file_for_it(tmp_path):
    from PIL import Image

    from cli_runner import cli

    raw = tmp_path / "raw.png"
    Image.fromarray((np.random.default_rng(4).random((24, 20)) * 255).astype(np.uint8)).save(raw)
    code, _, err = cli("demosaic", raw, "-o", tmp_path / "out.png", "--method", "ensemble",
                       "--weights", weights.weights_dir() / "ugtv_demosaic.pt")
    assert code == 2 and "not ensemble (it averages the shipped uGTV and uGLR weights)" in err
    assert not (tmp_path / "out.png").exists()
    code, out, err = cli("demosaic", raw, "-o", tmp_path / "out.png", "--method", "ensemble", "--json")
    assert code == 0, err
    assert json.loads(out)["method"] == "ensemble" and (tmp_path / "out.png").is_file()
