"""The default method is the best one by the manifest's recorded scores (gsprestore.methods.defaults):
fake manifests flip it both ways; ``gsprestore models`` and the commands follow it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from gsprestore.methods import defaults, weights


def _manifest(ugtv=(33.0, 39.0), uglr=None, baselines=True, task="demosaic", speed=5.0):
    """A manifest whose learned networks have these McM / Kodak scores and were benchmarked on the
    CPU at ``speed`` MP/s (None: no speed recorded)."""
    def entry(method, scores):
        kodak = {"rows": [{"noise_sigma": 0.0, "psnr_dataset_mse": scores[1]}]}
        if speed is not None:
            kodak["rows"][0]["megapixels_per_second"] = speed
            kodak["protocol"] = {"device": "cpu"}
        return {"file": f"{method}_{task}.pt", "sha256": "0" * 64, "method": method, "task": task,
                "scores": {"mcm": {"rows": [{"noise_sigma": 0.0, "psnr_dataset_mse": scores[0]}]},
                           "kodak": kodak}}

    models = [entry("ugtv", ugtv)] + ([entry("uglr", uglr)] if uglr else [])
    m = {"models": models}
    if baselines:
        m["baselines"] = {"scores": {"demosaic": {"mcm": {"malvar": 32.79, "menon": 32.68},
                                                  "kodak": {"malvar": 34.13, "menon": 38.06}},
                                     "upscale2x": {"mcm": {"bicubic": 32.37}, "kodak": {"bicubic": 28.44}}}}
    return m


@pytest.fixture
def fake_weights(tmp_path, monkeypatch):
    """A weights folder holding the manifest given to the returned writer, with (dummy) files."""
    monkeypatch.setenv(weights.ENV_VAR, str(tmp_path))

    def write(manifest, files=True):
        for old in tmp_path.glob("*.pt"):
            old.unlink()
        (tmp_path / "manifest.json").write_text(json.dumps(manifest))
        for e in manifest["models"]:
            if files:
                (tmp_path / e["file"]).write_bytes(b"x")
        return tmp_path

    return write


def test_learned_is_default_only_when_it_beats_the_best_classical_on_both(fake_weights):
    fake_weights(_manifest(ugtv=(33.0, 39.0)))
    c = defaults.choose_default("demosaic")
    assert c.method == "ugtv" and "McM (33.00 vs malvar 32.79 dB)" in c.reason and "menon 38.06" in c.reason
    fake_weights(_manifest(ugtv=(33.0, 37.0)))  # loses on Kodak to Menon
    c = defaults.choose_default("demosaic")
    assert c.method == "menon" and "ugtv 37.00 dB < menon 38.06 dB on kodak" in c.reason
    fake_weights(_manifest(ugtv=(32.70, 39.0)))  # beats Menon on McM but not the best (Malvar)
    assert defaults.choose_default("demosaic").method == "menon"


def test_the_largest_worst_case_margin_wins_and_missing_files_do_not_count(fake_weights):
    fake_weights(_manifest(ugtv=(33.0, 38.2), uglr=(32.9, 39.0)))
    assert defaults.choose_default("demosaic").method == "ugtv"  # worst margins: ugtv 0.14 dB, uglr 0.11 dB
    fake_weights(_manifest(ugtv=(33.0, 38.2), uglr=(33.1, 39.0)))
    assert defaults.choose_default("demosaic").method == "uglr"  # uglr 0.31 dB
    fake_weights(_manifest(ugtv=(33.0, 39.0)), files=False)
    c = defaults.choose_default("demosaic")
    assert c.method == "menon" and "ugtv has no shipped weights" in c.reason


def test_no_recorded_classical_scores_means_the_classical_default(fake_weights):
    fake_weights(_manifest(ugtv=(40.0, 40.0), baselines=False))
    c = defaults.choose_default("demosaic")
    assert c.method == "menon" and "no classical score" in c.reason
    fake_weights(_manifest(ugtv=(32.0, 28.0), task="upscale2x"))
    assert defaults.choose_default("upscale2x").method == "bicubic"
    fake_weights(_manifest(ugtv=(32.5, 28.5), task="upscale2x"))
    assert defaults.choose_default("upscale2x").method == "ugtv"


def test_a_default_must_be_fast_enough_on_this_kind_of_device(fake_weights):
    """The best by quality is the default only where its recorded speed reaches MIN_MP_PER_S;
    --best runs it anyway, --fast runs the classical method."""
    fake_weights(_manifest(ugtv=(33.0, 39.0), speed=0.03))  # better, but 33 s per megapixel on the CPU
    c = defaults.choose_default("demosaic", device="cpu")
    assert c.method == "menon" and c.quality_method == "ugtv" and c.speeds["ugtv"] == 0.03
    assert c.reason == ("menon: ugtv is better by quality (McM +0.21 dB, Kodak +0.94 dB) but it restores only "
                        "0.03 MP/s on cpu (33 s per megapixel, recorded), under the 1 MP/s a default needs; "
                        "--best runs ugtv")
    assert defaults.choose_default("demosaic", device="cpu", prefer="best").method == "ugtv"
    assert defaults.choose_default("demosaic", device="cpu", prefer="fast").method == "menon"
    c = defaults.choose_default("demosaic", device="cuda")  # never measured there: the classical one
    assert c.method == "menon" and "its speed on cuda is not recorded" in c.reason
    m = _manifest(ugtv=(33.0, 39.0), speed=0.03)  # a speed recorded for cuda makes it the cuda default
    m["models"][0]["speed"] = {"cuda": {"megapixels_per_second": 12.0}}
    fake_weights(m)
    assert defaults.choose_default("demosaic", device="cuda").method == "ugtv"
    assert defaults.choose_default("demosaic", device="cpu").method == "menon"
    assert defaults.expected_seconds("ugtv", "demosaic", "cpu", 1.5) == pytest.approx(50.0)
    assert defaults.expected_seconds("ugtv", "demosaic", "mps", 1.5) is None


def test_a_slow_best_gives_way_to_the_next_learned_method_fast_enough_here(fake_weights):
    """When the best by quality has no recorded (or too slow a) speed on this kind of device, the
    next learned method that also beats the classical ones on both sets is the default if it is
    fast enough there; the classical one only when none is."""
    m = _manifest(ugtv=(33.0, 38.2), uglr=(33.1, 39.0), speed=0.03)  # uglr is better by quality
    m["models"][0]["speed"] = {"cuda": {"megapixels_per_second": 12.0}}  # only ugtv measured on cuda
    fake_weights(m)
    c = defaults.choose_default("demosaic", device="cuda")
    assert c.method == "ugtv" and c.quality_method == "uglr" and c.ranked == ["uglr", "ugtv"]
    assert c.reason == ("ugtv: its shipped weights beat the best classical method on both McM (33.00 vs malvar "
                        "32.79 dB) and Kodak (38.20 vs menon 38.06 dB), and restores 12 MP/s on cuda (recorded; a "
                        "default needs >= 1); uglr is better by quality but its speed on cuda is not recorded; "
                        "--best runs uglr")
    assert defaults.choose_default("demosaic", device="cuda", prefer="best").method == "uglr"
    assert defaults.choose_default("demosaic", device="cpu").method == "menon"  # both too slow there
    m["models"][0]["scores"]["kodak"]["rows"][0]["psnr_dataset_mse"] = 38.0  # ugtv now loses to Menon
    fake_weights(m)
    c = defaults.choose_default("demosaic", device="cuda")
    assert c.method == "menon" and c.ranked == ["uglr"] and "uglr is better by quality" in c.reason


def test_the_shipped_defaults_are_learned_on_cuda():
    """With the GPU speeds the shipped manifest records (an H100, fused kernels), each task's
    default on CUDA is a learned network, at least 1 MP/s there."""
    for task in defaults.CLASSICAL_DEFAULT:
        c = defaults.choose_default(task, device="cuda")
        assert c.method in ("ugtv", "uglr", "ugtv-lite", "uglr-lite"), c.reason
        assert c.speeds[c.method] >= defaults.MIN_MP_PER_S


def test_the_shipped_cpu_defaults_meet_the_speed_bar():
    """The paper-size networks restore ~0.03-0.07 MP/s on the project's CPU (recorded): never a
    default there. Each task's CPU default is a method recorded at >= MIN_MP_PER_S there: the
    classical one, or a CPU-size ``-lite`` network that also beats it on McM and Kodak."""
    manifest = defaults.shipped_manifest()
    for task, classical in defaults.CLASSICAL_DEFAULT.items():
        c = defaults.choose_default(task, device="cpu")
        assert c.speeds[classical] > 1.0
        assert all(c.speeds[m] < defaults.MIN_MP_PER_S for m in ("uglr", "ugtv") if m in c.speeds)
        assert c.speeds[c.method] >= defaults.MIN_MP_PER_S
        if c.method != classical:
            assert c.method.endswith("-lite")
            assert defaults.recorded_speed(c.method, task, "cpu", manifest) >= defaults.MIN_MP_PER_S
            learned, base = c.learned[c.method], c.classical[classical]
            assert all(learned[ds] > base[ds] for ds in ("mcm", "kodak"))
    # the 48-wide uglr-lite (33.37 / 29.13) beats the paper-size uGLR (33.19 / 29.08) on both sets: --best runs it too
    assert defaults.choose_default("upscale2x", device="cpu", prefer="best").method == "uglr-lite"


def test_models_command_shows_scores_default_and_reason(fake_weights):
    from cli_runner import cli

    fake_weights(_manifest(ugtv=(33.0, 39.0)))
    code, out, err = cli("models", "--json", "--device", "cpu")
    assert code == 0, err
    data = json.loads(out)
    assert data["device"] == "cpu" and data["rule"] == defaults.RULE
    assert data["defaults"]["demosaic"]["method"] == "ugtv" and "beat" in data["defaults"]["demosaic"]["reason"]
    by = {(r["method"], r["task"]): r for r in data["models"]}
    assert by[("ugtv", "demosaic")]["default"] and by[("ugtv", "demosaic")]["kodak"] == 39.0
    assert by[("menon", "demosaic")]["mcm"] == 32.68 and not by[("menon", "demosaic")]["default"]
    code, out, err = cli("models", "--device", "cpu")
    assert code == 0 and "default for demosaic on cpu: ugtv" in out and "38.06" in out
    assert "rule: the default is the best method by recorded quality" in " ".join(out.split())


@pytest.mark.parametrize("columns", [60, 80, 160])
def test_models_table_keeps_every_description_at_80_columns_and_piped(columns):
    """Piped (no terminal) at 80 columns the descriptions are listed under each table, wrapped, never
    cut; wider, they are a column; at 60 the figures do not fit a row, so each method takes two lines
    and a wrapped description (issue 51: '38.94' read '38.' and the MP/s column went). Every figure
    whole at every width. The learned rows show the shipped network's size and unrolling."""
    import os
    import subprocess
    import sys

    from gsprestore.methods.catalog import models_overview

    env = {**os.environ, "COLUMNS": str(columns)}
    env.pop(weights.ENV_VAR, None)
    out = subprocess.run([sys.executable, "-m", "gsprestore", "models"], capture_output=True, text=True, env=env,
                         check=True).stdout
    assert max(len(line.rstrip()) for line in out.splitlines()) <= columns
    flat = " ".join(out.split())
    for row in models_overview():
        assert " ".join(row["summary"].split()) in flat, row["summary"]
        if row["kind"] == "learned":
            assert f"{row['params']:,}" in flat
        for key in ("mcm", "kodak"):
            if row[key] is not None:
                assert f"{row[key]:.2f}" in flat, (row["method"], key)
        if row["mp_per_s"] is not None:
            assert f"{row['mp_per_s']:.3g}" in flat, row["method"]
    assert "2 ADMM x 5 CG" in flat and "5 ADMM x 10 CG" not in flat and "(default configuration" not in flat
    assert ("description" in out) == (columns > 80)


def test_shipped_manifest_decides_what_demosaic_runs(tmp_path):
    """With the shipped manifest the command runs whatever choose_default says (no -m given)."""
    from cli_runner import cli

    from gsprestore.imageio.images import write_image

    write_image(tmp_path / "m.png", np.random.default_rng(0).random((16, 16)), 8)
    code, out, err = cli("demosaic", tmp_path / "m.png", "--json", "--device", "cpu", "-q")
    assert code == 0, err
    assert json.loads(out)["method"] == defaults.choose_default("demosaic").method


def test_fast_and_best_choose_and_a_long_file_says_its_expected_time(tmp_path, fake_weights, monkeypatch):
    """--best runs the better but slow network and says in one line which method runs and about how
    long it takes (from its recorded speed); --fast and the CPU default run the classical method
    silently; --fast with --best or --method is a usage error."""
    from cli_runner import cli

    from gsprestore.imageio.images import write_image
    from gsprestore.models import build_model

    torch = pytest.importorskip("torch")
    folder = fake_weights(_manifest(ugtv=(33.0, 39.0), speed=1e-5))  # 100,000 s per megapixel
    torch.manual_seed(0)
    digest = weights.save_weights(folder / "ugtv_demosaic.pt", build_model(
        "ugtv", "demosaic", blocks=1, heads=1, features=3, width=3, cg_iters=1, admm_iters=1))
    m = _manifest(ugtv=(33.0, 39.0), speed=1e-5)
    m["models"][0]["sha256"] = digest
    (folder / "manifest.json").write_text(json.dumps(m))
    write_image(tmp_path / "m.png", np.random.default_rng(0).random((16, 16)), 8)
    # the pace a long job measures before it starts (runtime.restore_batch.measure_pace), made as
    # slow as the recorded speed says, so that the estimate is a long job's
    from gsprestore.runtime import restore_batch

    monkeypatch.setattr(restore_batch, "measure_pace",
                        lambda restorer, task, device, seconds_per_mp=None:
                        2e5 if restorer.name.startswith("ugtv") else 1e-3)
    run = ["demosaic", tmp_path / "m.png", "--device", "cpu", "--json", "--overwrite", "-o", tmp_path / "o.png"]
    code, out, err = cli(*run)
    assert code == 0 and json.loads(out)["method"] == "menon", err
    # the run names its method, and says in one line how to get the best and how long it takes
    assert f"{tmp_path / 'm.png'} -> {tmp_path / 'o.png'}  menon, " in err
    assert "demosaic with menon (the default): 1 written" in err
    assert [line for line in err.splitlines() if line.startswith("note:")] == [
        "note: for the best quality add --best (ugtv, self-ensembled; recorded McM / Kodak 33.00 / 39.00 dB vs "
        "32.68 / 38.06): about 51 s for this job on cpu at its recorded speed, 2 passes"], err
    code, out, err = cli(*run, "--best")
    assert code == 0 and json.loads(out)["method"] == "ugtv", err
    notes = [line for line in err.splitlines() if line.startswith("note: demosaic with ugtv")]
    assert notes == ["note: demosaic with ugtv (--best, self-ensemble) on cpu: about 51 s for m.png (0.00026 MP at "
                     "2e+05 s/MP, measured on this machine just now, 2 passes); --fast (menon) takes about a second"], err
    assert json.loads(out)["self_ensemble"] is True  # --best is the best output: with the transposed pass
    assert "for the best quality" not in err and "demosaic with ugtv+se (--best, self-ensemble): 1 written" in err
    # the estimate is the whole job's: two files, twice the time
    write_image(tmp_path / "n.png", np.random.default_rng(1).random((16, 16)), 8)
    code, out, err = cli("demosaic", tmp_path / "m.png", tmp_path / "n.png", "--device", "cpu", "--best",
                         "-o", tmp_path / "two")
    assert code == 0, err
    assert "note: demosaic with ugtv (--best, self-ensemble) on cpu: about 1.5 min for 2 files (0.00051 MP" in err
    code, out, err = cli(*run, "-m", "ugtv")  # the best method without its self-ensemble
    assert code == 0, err
    # its self-ensemble is not on record as better: --self-ensemble is not promised
    assert "for the best quality" not in err
    code, out, err = cli(*run, "--fast")
    assert code == 0 and json.loads(out)["method"] == "menon"
    assert "for the best quality add --best instead of --fast (ugtv" in err
    code, out, err = cli(*run, "--fast", "--best")
    assert code == 2 and "--fast and --best exclude each other" in err
    code, out, err = cli(*run, "--best", "-m", "bilinear")
    assert code == 2 and "--best chooses the method" in err


def test_weights_without_method_run_the_files_network(tmp_path):
    """The default may be classical; ``--weights FILE`` alone still runs the file's network."""
    from cli_runner import cli

    from gsprestore.imageio.images import write_image
    from gsprestore.models import build_model

    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    weights.save_weights(tmp_path / "mine.pt", build_model("uglr", "demosaic", blocks=1, heads=2, features=3,
                                                           width=6, cg_iters=2))
    write_image(tmp_path / "m.png", np.random.default_rng(0).random((16, 16)), 8)
    code, out, err = cli("demosaic", tmp_path / "m.png", "--weights", tmp_path / "mine.pt", "--json", "--device",
                         "cpu", "-q")
    assert code == 0, err
    assert json.loads(out)["method"] == "uglr"


# ------------------------------------------------------------------------- CPU speed for this machine


def _lite_manifest(speed_record):
    m = _manifest(ugtv=(35.5, 38.6), uglr=None, speed=0.1)  # the paper-size network: slow on the CPU
    lite = {"file": "ugtv-lite_demosaic.pt", "sha256": "1" * 64, "method": "ugtv-lite", "task": "demosaic",
            "scores": {"mcm": {"rows": [{"noise_sigma": 0.0, "psnr_dataset_mse": 35.0}]},
                       "kodak": {"rows": [{"noise_sigma": 0.0, "psnr_dataset_mse": 38.4}]}},
            "speed": {"cpu": speed_record}}
    m["models"].append(lite)
    return m


def test_a_cpu_speed_record_is_taken_as_recorded(fake_weights, monkeypatch):
    """Issue 50: the default is decided the same way every time. A CPU speed record is taken as it
    is (its machine's probe figure, where one was kept, changes nothing), and deciding measures
    nothing: a clock that jumps, or a machine that reads busy, gives the same method."""
    import time

    fake_weights(_lite_manifest({"megapixels_per_second": 0.8, "probe_gflops": 50.0}))
    assert defaults.choose_default("demosaic", device="cpu").method == "menon"
    fake_weights(_lite_manifest({"megapixels_per_second": 1.05, "probe_gflops": 500.0}))
    c = defaults.choose_default("demosaic", device="cpu")
    assert c.method == "ugtv-lite" and "1.05 MP/s" in c.reason

    def no_clock(*_a, **_k):
        raise AssertionError("the default rule timed something")

    monkeypatch.setattr(time, "perf_counter", no_clock)
    monkeypatch.setattr(time, "process_time", no_clock)
    assert [defaults.choose_default("demosaic", device="cpu").method for _ in range(3)] == ["ugtv-lite"] * 3



def test_the_estimate_names_prior_when_prior_was_typed(tmp_path, fake_weights, monkeypatch):
    """upscale2x --prior gtv: the whole job's estimate says how the method was chosen as typed."""
    from cli_runner import cli

    from gsprestore.runtime import restore_batch

    monkeypatch.setattr(restore_batch, "measure_pace", lambda restorer, task, device, seconds_per_mp=None: 2e5)

    from gsprestore.imageio.images import write_image
    from gsprestore.models import build_model

    torch = pytest.importorskip("torch")
    folder = fake_weights(_manifest(ugtv=(33.0, 29.0), task="upscale2x", speed=1e-5))
    torch.manual_seed(0)
    digest = weights.save_weights(folder / "ugtv_upscale2x.pt", build_model(
        "ugtv", "upscale2x", blocks=1, heads=1, features=3, width=3, cg_iters=1, admm_iters=1))
    m = _manifest(ugtv=(33.0, 29.0), task="upscale2x", speed=1e-5)
    m["models"][0]["sha256"] = digest
    (folder / "manifest.json").write_text(json.dumps(m))
    write_image(tmp_path / "p.png", np.random.default_rng(0).random((8, 8, 3)), 8)
    code, out, err = cli("upscale2x", tmp_path / "p.png", "--prior", "gtv", "--device", "cpu", "-o", tmp_path / "o.png")
    assert code == 0, err
    assert "note: upscale2x with ugtv (--prior gtv) on cpu: about" in err and "(--method)" not in err
    assert "upscale2x with ugtv (--prior gtv): 1 written" in err
    assert "for the best quality" not in err  # no recorded self-ensemble gain: nothing promised


def test_readme_help_and_models_agree_on_the_recorded_figures():
    """Each figure has one source, the weights manifest: the self-ensemble's gain (README and
    --self-ensemble's help), the passes --best runs (README and the run's own line), the
    non-learned graph solvers' scores and the self-ensembles' (README and `gsprestore models`)."""
    from pathlib import Path

    from cli_runner import cli

    from gsprestore.methods import advice
    from gsprestore.methods.catalog import models_overview

    def flat(text: str) -> str:
        return " ".join(text.replace("│", " ").split())

    readme = flat((Path(__file__).resolve().parents[1] / "README.md").read_text())
    lo, hi = defaults.self_ensemble_gains()
    gain = f"{lo:+.2f} to {hi:+.2f} dB"
    assert gain in readme
    for task in ("demosaic", "upscale2x"):  # a fresh process: the help texts are made at import, from
        # the manifest installed then (an earlier test's fake manifest in this one)
        help_text = subprocess.run([sys.executable, "-m", "gsprestore", task, "--help"], capture_output=True,
                                   text=True, env={**os.environ, "COLUMNS": "200"}, check=True).stdout
        assert gain in flat(help_text)
    best = defaults.best_by_quality("demosaic").method
    passes = advice.network_passes(best, "demosaic", True)
    assert f"{ {2: 'two', 4: 'four'}[passes]} passes" in readme
    assert f"{passes} passes" in advice.best_hint("demosaic", "menon", False, "cpu", 24.0)
    rows = {(r["method"], r["task"]): r for r in models_overview()}
    out = flat(cli("models")[1])
    for method, name in (("iglr", "iGLR"), ("igtv", "iGTV")):
        r = rows[(method, "demosaic")]
        assert r["mcm"] is not None and r["kodak"] is not None
        assert f"{r['mcm']:.2f} {r['kodak']:.2f}" in out
        assert f"| {name} (not learned) |" in readme  # the README's table: | paper | ours | paper | ours |
        assert f"| {r['mcm']:.2f} |" in readme.split(f"{name} (not learned)")[1][:40]
        assert f"| {r['kodak']:.2f} |" in readme.split(f"{name} (not learned)")[1][:40]
    for (method, task), label in ((("ugtv", "demosaic"), "uGTV demosaic"), (("uglr", "demosaic"), "uGLR demosaic"),
                                  (("uglr", "upscale2x"), "uGLR 2x"), (("ugtv", "upscale2x"), "uGTV 2x")):
        se = defaults.recorded_self_ensembles(task)[method]
        assert f"{label} {se['mcm']:.2f} / {se['kodak']:.2f}" in readme


def test_best_is_suggested_only_for_a_recorded_gain_on_both_sets(fake_weights):
    """Issue 50: --best used to be suggested for +0.01 dB on Kodak while worse on McM. Now only when
    what it runs is recorded at least BEST_MIN_GAIN_DB better on both McM and Kodak."""
    from gsprestore.methods import advice

    m = _manifest(ugtv=(33.0, 39.0))
    fake_weights(m)  # the network's file is there: it is what --best runs
    assert advice.best_hint("demosaic", "menon", False, "cpu", 1.0, manifest=m)  # +0.32 / +0.94 dB
    m = _manifest(ugtv=(32.70, 39.0))  # +0.02 dB on McM: not worth the time
    assert advice.best_hint("demosaic", "menon", False, "cpu", 1.0, manifest=m) is None
    m = _manifest(ugtv=(33.0, 39.0))
    assert advice.best_hint("demosaic", "ugtv", False, "cpu", 1.0, manifest=m) is None  # no recorded SE gain
    m["models"][0]["self_ensemble"] = {"mcm": 33.2, "kodak": 39.2}
    hint = advice.best_hint("demosaic", "ugtv", False, "cpu", 1.0, manifest=m)
    assert hint.startswith("for the best quality add --self-ensemble (ugtv as its self-ensemble; recorded McM / Kodak "
                           "33.20 / 39.20 dB vs 33.00 / 39.00)")
    # the time: from this run's measured pace when there is one (ugtv's own pace, twice the passes)
    assert "about 20 s for this job on cpu from this run's pace, 2 passes" in advice.best_hint(
        "demosaic", "ugtv", False, "cpu", 1.0, manifest=m, seconds_per_mp=10.0)


def test_durations_read_as_people_say_them():
    from gsprestore.core.heartbeat import about

    assert [about(s) for s in (0.4, 4.2, 40, 75, 89, 600, 3725)] == [
        "a second", "4 s", "40 s", "1 min", "1.5 min", "10 min", "1 h 2 min"]


def test_a_lite_network_without_a_cuda_record_is_judged_by_its_siblings(fake_weights):
    """Issue 48: the best network shipped is the default on CUDA too. A -lite network with no CUDA
    speed of its own takes its paper-size sibling's record there as a lower bound (it does strictly
    less of the same work); on the CPU only its own record counts."""
    m = _manifest(ugtv=(33.0, 38.5), speed=None)
    m["models"][0]["speed"] = {"cuda": {"megapixels_per_second": 13.0}}
    lite = {"file": "ugtv-lite_demosaic.pt", "sha256": "0" * 64, "method": "ugtv-lite", "task": "demosaic",
            "scores": {"mcm": {"rows": [{"noise_sigma": 0.0, "psnr_dataset_mse": 33.1}]},
                       "kodak": {"rows": [{"noise_sigma": 0.0, "psnr_dataset_mse": 39.0}]}}}
    m["models"].append(lite)
    fake_weights(m)
    assert defaults.recorded_speed("ugtv-lite", "demosaic", "cuda", m) == 13.0
    assert defaults.recorded_speed("ugtv-lite", "demosaic", "cpu", m) is None
    c = defaults.choose_default("demosaic", m, device="cuda")
    assert c.method == "ugtv-lite" and "at least 13 MP/s on cuda (its paper-size sibling ugtv's record" in c.reason
    assert defaults.choose_default("demosaic", m, device="cpu").method == "menon"  # no CPU speed of its own


def test_measured_durations_read_the_same_everywhere():
    """Issue 50: `mosaic` said `0.04 s` for the file, then `(0.0 s)` for the job."""
    from gsprestore.core.heartbeat import took

    assert [took(s) for s in (0.04, 3.214, 41.12, 75)] == ["0.04 s", "3.21 s", "41.1 s", "1:15"]


def test_the_pace_probe_is_sized_to_the_methods_recorded_speed(monkeypatch):
    """A long job's pace probe (runtime.restore_batch.measure_pace) times the largest square for a
    fast method and, for a slow one, the square its recorded speed puts at about PACE_SECONDS, so
    that announcing a paper-size network's job does not cost a quarter of a minute first (issue 50:
    a 0.5-MP job took 10 s and its probe 17 s)."""
    import torch

    from gsprestore.runtime import restore_batch, tiling

    side = restore_batch.pace_side
    assert side(None) == side(0.0) == restore_batch.PACE_SIDE
    assert side(0.5) == restore_batch.PACE_SIDE  # a -lite network: 1.7 MP a second
    assert side(22.0) == 208  # the paper-size uGTV, ~0.045 MP/s: 0.043 MP ~ 1 s
    assert side(1e5) == restore_batch.PACE_MIN_SIDE
    seen = []

    def fake_restore(restorer, obs, pattern, device="cpu"):
        seen.append(tuple(obs.shape))
        return torch.zeros(3, *obs.shape[-2:])

    monkeypatch.setattr(tiling, "restore", fake_restore)
    pace = restore_batch.measure_pace(object(), "demosaic", "cpu", 22.0)
    assert seen == [(1, 104, 104), (1, 208, 208)] and pace >= 0
    seen.clear()
    restore_batch.measure_pace(object(), "upscale2x", "cpu", None)
    assert seen == [(3, 192, 192), (3, 384, 384)]
