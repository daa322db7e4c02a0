"""More than one process (issue 23): data-parallel training and sharded folder inference on
``torch.distributed`` with the gloo backend and 2 CPU processes.

One test launches a real ``torchrun`` (``python -m torch.distributed.run``); the others fork two
ranks from the test process (``RANK`` / ``WORLD_SIZE`` / ``MASTER_ADDR`` / ``MASTER_PORT`` as
torchrun sets them), which saves importing torch twice per test. Every rank runs
``tests/ddp_worker.py``'s hooks and then the real command line. The network is a tiny uGLR (one
block, 2 CG iterations, 2 heads x 4 features) on 16x16 patches: a few steps take well under a second."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from cli_runner import cli
from gsprestore.runtime import distributed as D
from gsprestore.runtime.folders import Job, shard_jobs
from gsprestore.core.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "ddp_worker.py"

RECIPE = ["--task", "demosaic", "--prior", "glr", "--patch-size", "16", "--val-patches", "8",
          "--val-fraction", "0.25", "--batch-size", "8", "--epochs", "1", "--blocks", "1", "--cg-iters", "2",
          "--width", "8", "--heads", "2", "--model-opt", "features=4", "--threads", "1", "--no-progress",
          "--seed", "3", "--log-every", "1", "--lr", "3e-3", "--schedule", "none"]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    from test_training import _write_photos

    return [str(p) for p in _write_photos(tmp_path_factory.mktemp("photos"))]


def _train_args(photos, out, *extra, patches: int = 40) -> list[str]:
    return ["train", *RECIPE, "--patches", str(patches), "--data", *photos, "--out", str(out), *extra]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, args: list[str], env: dict, out: str | None) -> None:
    """A forked rank: torchrun's environment, the worker's hooks, the console entry point."""
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                       "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), **env})
    if out is not None:  # this rank's stdout to a file
        fd = os.open(f"{out}.{rank}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        sys.stdout = os.fdopen(1, "w")  # pytest's capture object is what print() writes to
    code = 1
    try:
        import ddp_worker  # tests/ is on the path: pytest put it there, and a fork inherits it

        ddp_worker._install_hooks()
        from gsprestore.cli.app import main

        sys.argv = ["gsprestore", *args]
        try:
            main()
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _fork_ranks(args: list[str], *, env: dict | None = None, world: int = 2, timeout: float = 90,
                out: str | None = None, hung: tuple[int, ...] = ()) -> tuple[list[int | None], float]:
    """Run ``gsprestore ARGS`` as ``world`` forked ranks; their exit codes (negative: killed by
    that signal) and the seconds until the last one ended. The ranks in ``hung`` are expected
    never to end: they are killed once the others have ended (and their time is not counted)."""
    ctx = multiprocessing.get_context("fork")
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, world, port, args, env or {}, out)) for r in range(world)]
    t0 = time.monotonic()
    for p in procs:
        p.start()
    for r, p in enumerate(procs):
        if r not in hung:
            p.join(max(0.1, timeout - (time.monotonic() - t0)))
    took = time.monotonic() - t0
    left = [r for r, p in enumerate(procs) if p.is_alive()]
    for r in left:
        procs[r].kill()
        procs[r].join()
    assert set(left) <= set(hung), f"rank(s) {left} still running after {timeout} s"
    return [p.exitcode for p in procs], took


def _state(path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def _model(run) -> dict:
    return _state(Path(run) / "last.pt")["model"]


def _close(a: dict, b: dict, tol: float = 1e-5) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=tol, atol=tol), (k, (a[k] - b[k]).abs().max())


def _log(run) -> list[dict]:
    return [json.loads(line) for line in (Path(run) / "log.jsonl").read_text().splitlines()]


# --------------------------------------------------------------------------- training


def test_two_ranks_under_torchrun_train_the_weights_of_one_rank(photos, tmp_path):
    """A real torchrun, 2 gloo ranks, global batch 8 (4 a rank): after a whole epoch of 43 patches
    (5 batches of 8, then 3 patches split 2 + 1, each rank's mean loss weighted by its share) the
    weights equal one rank's with batch 8 on the same patches, and the two ranks hold the same model."""
    two, one = tmp_path / "two", tmp_path / "one"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "GSP_TEST_DUMP": str(tmp_path / "final"),
           "GSPRESTORE_DIST_TIMEOUT": "60"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
           str(_free_port()), str(WORKER), *_train_args(photos, two, patches=43)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    assert cli(*_train_args(photos, one, patches=43))[0] == 0

    _close(_model(two), _model(one))
    r0, r1 = _state(tmp_path / "final.0.pt"), _state(tmp_path / "final.1.pt")
    assert all(torch.equal(r0[k], r1[k]) for k in r0)  # DDP keeps the ranks' models equal
    log = _log(two)
    start = log[0]
    assert (start["world_size"], start["global_batch"], start["per_rank_batch"], start["backend"]) == (2, 8, 4, "gloo")
    assert [r["step"] for r in log if r["event"] == "step"] == [1, 2, 3, 4, 5, 6]
    # the logged loss is the mean over the global batch, the one a single rank logs
    steps1 = [r["loss"] for r in _log(one) if r["event"] == "step"]
    steps2 = [r["loss"] for r in log if r["event"] == "step"]
    assert steps2 == pytest.approx(steps1, rel=1e-5)
    # the validation, shared by the ranks (4 patches each), is the whole set's dataset-MSE PSNR
    val1 = [r["val_psnr"] for r in _log(one) if r["event"] == "epoch"]
    val2 = [r["val_psnr"] for r in log if r["event"] == "epoch"]
    assert len(val2) == 1 and val2 == pytest.approx(val1, rel=1e-5)
    end = log[-1]
    assert end["event"] == "end" and end["status"] == "finished" and end["steps"] == 6
    assert end["world_size"] == 2 and end["world_sizes"] == [2] and end["global_batch"] == 8
    assert json.loads((two / "config.json").read_text())["ranks"][0]["world_size"] == 2
    assert sum(r["event"] == "start" for r in log) == 1  # rank 0 alone wrote the log
    assert _state(two / "model.pt")["meta"]["world_sizes"] == [2]


def test_a_rank_without_patches_in_the_last_batch_still_steps_with_the_others(photos, tmp_path):
    """41 patches: the epoch's last batch is one patch, all rank 0's; rank 1 joins the step (the
    gradient all-reduce) with a zero-weighted loss instead of hanging or failing, and the weights
    still equal one rank's."""
    two, one = tmp_path / "two", tmp_path / "one"
    codes, _ = _fork_ranks(_train_args(photos, two, patches=41), env={"GSPRESTORE_DIST_TIMEOUT": "60"})
    assert codes == [0, 0]
    assert cli(*_train_args(photos, one, patches=41))[0] == 0
    _close(_model(two), _model(one))


def test_the_ranks_agree_on_the_time_budget(photos, tmp_path):
    """Rank 1's time budget runs out after step 3 (a hook), rank 0's does not: both stop there,
    rank 0 validates, checkpoints and exports (status time-budget), as one rank stopped at step 3."""
    two, one = tmp_path / "two", tmp_path / "one"
    codes, _ = _fork_ranks(_train_args(photos, two, "--max-steps", "5", "--time-budget", "3600"),
                           env={"GSP_TEST_HOOK": "late:1:3", "GSPRESTORE_DIST_TIMEOUT": "60"})
    assert codes == [0, 0]
    end = _log(two)[-1]
    assert end["event"] == "end" and end["status"] == "time-budget" and end["steps"] == 3
    assert (two / "model.pt").is_file()
    assert cli(*_train_args(photos, one, "--max-steps", "3"))[0] == 0
    _close(_model(two), _model(one))


def test_sigterm_on_one_rank_stops_both_with_a_checkpoint_and_the_run_resumes_on_one(photos, tmp_path):
    """SIGTERM to rank 1 after step 2: both ranks stop after that step (exit 143), rank 0 writes
    last.pt. Resumed on one rank (1 divides the global batch 8) to step 4, the run equals an
    uninterrupted one-rank run of 4 steps."""
    run, ref = tmp_path / "run", tmp_path / "ref"
    codes, _ = _fork_ranks(_train_args(photos, run, "--max-steps", "4"),
                           env={"GSP_TEST_HOOK": "sigterm:1:2", "GSPRESTORE_DIST_TIMEOUT": "60"})
    assert codes == [143, 143]
    ck = _state(run / "last.pt")
    assert ck["step"] == 2 and ck["world_sizes"] == [2]
    stop = [r for r in _log(run) if r["event"] == "stop"]
    assert len(stop) == 1 and stop[0]["step"] == 2 and stop[0]["reason"] == "SIGTERM"

    assert cli("train", "--resume", str(run), "--max-steps", "4", "--no-progress", "--threads", "1")[0] == 0
    assert cli(*_train_args(photos, ref, "--max-steps", "4"))[0] == 0
    _close(_model(run), _model(ref))
    assert _state(run / "last.pt")["world_sizes"] == [2, 1]
    ranks = json.loads((run / "config.json").read_text())["ranks"]
    assert [r["world_size"] for r in ranks] == [2, 1] and ranks[1]["from_step"] == 2


def test_cosine_time_ranks_agree_on_the_learning_rate_and_keep_equal_weights(photos, tmp_path):
    """--schedule cosine-time sets the learning rate from the wall clock: the ranks use the
    fraction of the budget they agreed on before each step, so their weights stay equal."""
    codes, _ = _fork_ranks(_train_args(photos, tmp_path / "run", "--max-steps", "4", "--time-budget", "40",
                                       "--schedule", "cosine-time"),
                           env={"GSP_TEST_DUMP": str(tmp_path / "final"), "GSPRESTORE_DIST_TIMEOUT": "60"})
    assert codes == [0, 0]
    r0, r1 = _state(tmp_path / "final.0.pt"), _state(tmp_path / "final.1.pt")
    assert all(torch.equal(r0[k], r1[k]) for k in r0)


def test_a_rank_that_dies_ends_the_job_with_a_non_zero_exit_in_bounded_time(photos, tmp_path):
    """Rank 1 is killed (SIGKILL) after step 2: rank 0 does not hang in the next collective but
    exits non-zero, well within the collective timeout."""
    codes, took = _fork_ranks(_train_args(photos, tmp_path / "run", "--max-steps", "5"),
                              env={"GSP_TEST_HOOK": "kill:1:2", "GSPRESTORE_DIST_TIMEOUT": "30"}, timeout=120)
    assert codes[1] == -signal.SIGKILL
    assert codes[0] not in (0, None)
    assert took < 100


def test_a_rank_that_stops_answering_ends_the_job_after_the_collective_timeout(photos, tmp_path, capfd):
    """Rank 1 freezes (SIGSTOP) after step 2, its connections open: rank 0's next collective
    times out after GSPRESTORE_DIST_TIMEOUT (5 s) and it exits 1 with one line, not hangs."""
    codes, took = _fork_ranks(_train_args(photos, tmp_path / "run", "--max-steps", "5"),
                              env={"GSP_TEST_HOOK": "hang:1:2", "GSPRESTORE_DIST_TIMEOUT": "5"}, timeout=90,
                              hung=(1,))
    assert codes[0] == 1
    assert took < 60
    err = capfd.readouterr().err
    assert "error: rank 0 of 2: another rank stopped answering" in err


def test_a_world_size_that_does_not_divide_the_global_batch_is_refused_in_one_line(photos, tmp_path,
                                                                                   monkeypatch):
    run = tmp_path / "run"
    assert cli(*_train_args(photos, run, "--max-steps", "1"))[0] == 0
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "0")
    code, _, err = cli("train", "--resume", str(run), "--max-steps", "2", "--no-progress")
    assert code == 2
    lines = err.strip().splitlines()  # the resume's note on what is left, then the one-line refusal
    assert "global batch is 8" in lines[-1] and "WORLD_SIZE is 3" in lines[-1]
    assert sum(line.startswith("error") for line in lines) == 1
    code, _, err = cli(*_train_args(photos, tmp_path / "new"))
    assert code == 2 and "multiple of the 3 ranks" in err
    assert not (tmp_path / "new").exists()  # refused before anything was written


def test_split_and_parse_shard():
    for n in range(0, 11):
        for world in (1, 2, 3, 4):
            parts = [D.split(n, r, world) for r in range(world)]
            assert parts[0][0] == 0 and parts[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(parts, parts[1:]))
            sizes = [hi - lo for lo, hi in parts]
            assert max(sizes) - min(sizes) <= 1
    assert D.parse_shard("0/4") == (0, 4) and D.parse_shard("3/4") == (3, 4) and D.parse_shard(None) is None
    for bad in ("4/4", "-1/4", "1", "a/b", "1/0"):
        with pytest.raises(UsageError):
            D.parse_shard(bad)
    jobs = [Job(Path(f"{i}.png"), Path(f"o/{i}.png")) for i in range(7)]
    shares = [shard_jobs(jobs, k, 3) for k in range(3)]
    assert sorted((j for s in shares for j in s), key=lambda j: j.input.name) == jobs
    assert [len(s) for s in shares] == [3, 2, 2]


# --------------------------------------------------------------------------- inference


@pytest.fixture(scope="module")
def mosaics(tmp_path_factory):
    """Five Bayer mosaics and one broken file (it fails, exit code 3 with --continue-on-error)."""
    import numpy as np
    from PIL import Image

    folder = tmp_path_factory.mktemp("mosaics") / "in"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(5):
        Image.fromarray(rng.integers(0, 255, size=(24 + 2 * i, 30), dtype=np.uint8)).save(folder / f"m{i}.png")
    (folder / "m5_broken.png").write_bytes(b"not a png")
    return folder


def _outputs(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if not p.name.startswith(".")}


def test_two_ranks_write_each_file_once_and_the_union_is_one_ranks_output(mosaics, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    args = ["demosaic", str(mosaics), "--method", "malvar", "--continue-on-error", "--json"]
    code, out, _ = cli(*args, "-o", str(one))
    assert code == 3
    codes, _ = _fork_ranks([*args, "-o", str(two)], out=str(tmp_path / "stdout"),
                           env={"GSPRESTORE_DIST_TIMEOUT": "60"})
    assert codes == [3, 3]  # one rank's failure is the job's exit code, on every rank
    assert _outputs(two) == _outputs(one) and len(_outputs(one)) == 5
    report = json.loads((tmp_path / "stdout.0").read_text())  # rank 0 reports for both
    assert (tmp_path / "stdout.1").read_text() == ""
    assert report["ranks"] == 2 and report["written"] == 5 and report["failed"] == 1 and report["exit_code"] == 3
    outputs = [f["output"] for f in report["files"]]
    assert len(outputs) == len(set(outputs)) == 6

    # --skip-existing across ranks: nothing to do a second time
    codes, _ = _fork_ranks(["demosaic", str(mosaics), "--method", "malvar", "--skip-existing", "--json",
                            "-o", str(two)], out=str(tmp_path / "again"), env={"GSPRESTORE_DIST_TIMEOUT": "60"})
    again = json.loads((tmp_path / "again.0").read_text())
    assert again["skipped"] == 5 and again["written"] == 0 and again["failed"] == 1 and codes == [1, 1]


def test_shards_of_an_array_job_share_the_files(mosaics, tmp_path):
    one, parts = tmp_path / "one", tmp_path / "parts"
    base = ["demosaic", str(mosaics), "--method", "malvar", "--continue-on-error", "--json"]
    assert cli(*base, "-o", str(one))[0] == 3
    written = []
    codes = []
    for k in range(3):
        code, out, _ = cli(*base, "-o", str(parts), "--shard", f"{k}/3")
        codes.append(code)
        written += [f["output"] for f in json.loads(out)["files"] if f["status"] == "written"]
    assert _outputs(parts) == _outputs(one)
    assert len(written) == len(set(written)) == 5
    assert sorted(codes) == [0, 0, 3]  # the array task holding the broken file fails, alone
    code, _, err = cli(*base, "-o", str(parts), "--shard", "3/3")
    assert code == 2 and "--shard" in err
