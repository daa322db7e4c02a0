"""Issue 51 (hostile inputs, round 5): a user's file is never overwritten or deleted. Claim and
lock files are never followed through a symbolic link nor written into when they were there
already; the sweep of killed runs' leftovers removes only what this tool can prove it made; a
training run writes only into a new or empty folder, or its own run folder. Small files made
here, CPU only, seconds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_runner import cli, gray, rgb
from test_user_files import PACK_ARGS, _photos  # the same small photo folder and pack options

SECRET = "the user's own notes\n"


def errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


TRAIN = ["train", "--task", "demosaic", "--prior", "gtv", "--data", "photos", "--patch-size", "16", "--patches", "8",
         "--val-patches", "4", "--batch-size", "4", "--blocks", "1", "--cg-iters", "2",
         "--admm-iters", "1", "--device", "cpu", "--no-progress"]


def _link(at: Path, target: Path) -> None:
    at.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, at)


# --------------------------------------------------------------------------- 1. links at a claim's or lock's name


@pytest.mark.parametrize("shard", [True, False], ids=["shard", "whole"])
@pytest.mark.parametrize("command", ["demosaic", "upscale2x"])
@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_a_claim_that_is_a_symlink_is_never_followed(tmp_path, command, shard, dangling):
    """``OUT/.a.png.claim`` is a link to the user's file (or to a name where nothing is yet): the
    run neither writes its pid through it, nor creates the file it names, nor removes the link;
    that output fails in one line naming the link."""
    if command == "demosaic":
        gray(tmp_path / "in" / "a.png")
        method = "bilinear"
    else:
        rgb(tmp_path / "in" / "a.png")
        method = "bicubic"
    target = tmp_path / "notes.txt"
    if not dangling:
        target.write_text(SECRET)
    _link(tmp_path / "out" / ".a.png.claim", target)
    code, _, err = cli(command, "in", "-o", "out", "-m", method, *(["--shard", "0/1"] if shard else []),
                       cwd=tmp_path)
    assert code == 1, err
    if dangling:
        assert not os.path.lexists(target)  # nothing created where the link points
    else:
        assert target.read_text() == SECRET
    assert os.readlink(tmp_path / "out" / ".a.png.claim") == str(target)
    assert errors(err) == ["error: out/.a.png.claim: a symbolic link is in the way of gsprestore's claim file for "
                           "a.png; gsprestore did not make it and leaves it alone: move or rename it"], err
    assert sorted(os.listdir(tmp_path / "out")) == [".a.png.claim"]


def test_a_claim_name_holding_a_users_file_is_left_alone(tmp_path):
    """A regular file of the user's at a claim's name (not one this tool made): never truncated or
    written, never removed; a hard link to the user's file likewise."""
    gray(tmp_path / "in" / "a.png")
    gray(tmp_path / "in" / "b.png", seed=1)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".a.png.claim").write_text(SECRET)
    (tmp_path / "notes.txt").write_text("4242")  # a pid-like content, but a second name of the user's file
    os.link(tmp_path / "notes.txt", tmp_path / "out" / ".b.png.claim")
    for shard in ([], ["--shard", "0/1"]):
        code, _, err = cli("demosaic", "in", "-o", "out", "-m", "bilinear", "--continue-on-error", *shard,
                           cwd=tmp_path)
        assert code == 3, err
        assert len(errors(err)) == 2, err
        assert "out/.a.png.claim: a file is in the way of gsprestore's claim file for a.png" in err
        assert "out/.b.png.claim: a file with 2 names (hard links) is in the way" in err
        assert (tmp_path / "out" / ".a.png.claim").read_text() == SECRET
        assert (tmp_path / "notes.txt").read_text() == "4242"
        assert sorted(os.listdir(tmp_path / "out")) == [".a.png.claim", ".b.png.claim"]


def test_a_run_lock_that_is_a_symlink_is_never_followed(tmp_path):
    """``.run.lock`` beside ``train --out run`` is a link to the user's file: refused in one line
    before anything is written, the file and the link as they were."""
    _photos(tmp_path / "photos")
    (tmp_path / "notes.txt").write_text(SECRET)
    _link(tmp_path / ".run.lock", tmp_path / "notes.txt")
    code, _, err = cli(*TRAIN, "--out", "run", "--max-steps", "1", cwd=tmp_path)
    assert code == 1, err
    assert errors(err) == ["error: .run.lock: a symbolic link is in the way of gsprestore's lock file for run; "
                           "gsprestore did not make it and leaves it alone: move or rename it"], err
    assert (tmp_path / "notes.txt").read_text() == SECRET
    assert os.path.islink(tmp_path / ".run.lock") and not (tmp_path / "run").exists()


def test_a_pack_lock_that_is_a_symlink_is_never_followed(tmp_path):
    _photos(tmp_path / "photos")
    (tmp_path / "notes.txt").write_text(SECRET)
    _link(tmp_path / ".pack.lock", tmp_path / "notes.txt")
    code, _, err = cli("train-pack", "photos", "-o", "pack", *PACK_ARGS, cwd=tmp_path)
    assert code == 1, err
    assert errors(err) == ["error: .pack.lock: a symbolic link is in the way of gsprestore's lock file for pack; "
                           "gsprestore did not make it and leaves it alone: move or rename it"], err
    assert (tmp_path / "notes.txt").read_text() == SECRET
    assert os.path.islink(tmp_path / ".pack.lock") and not (tmp_path / "pack").exists()


def test_a_killed_runs_lock_is_still_taken_over(tmp_path):
    """What a killed run leaves (its lock file, holding its pid, nobody holding its OS lock) is
    still free at once: removed and made afresh."""
    from gsprestore.core.claims import run_lock

    (tmp_path / ".pack.lock").write_text(str(_dead_pid()))
    with run_lock(tmp_path / "pack", "train-pack run"):
        assert (tmp_path / ".pack.lock").read_text() == str(os.getpid())
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------- 2. the sweep of killed runs' leftovers


def test_the_sweep_removes_only_what_this_tool_made(tmp_path):
    """A run sweeps its output folder of killed runs' claims and temporary files, and of nothing
    else: a user's ``.insurance.claim``, an empty ``.draft.claim``, a link named like a claim or
    like a temporary file stay."""
    from gsprestore.core.atomic import temp_name
    from gsprestore.core.claims import sweep_stale

    gray(tmp_path / "in" / "m0.png")
    out = tmp_path / "out"
    out.mkdir()
    dead = _dead_pid()
    (out / ".m0.png.claim").write_text(str(dead))  # a killed run's claim: swept
    stale = out / temp_name(out / "m0.png", ".part").name.replace(f".{os.getpid()}-", f".{dead}-")
    stale.write_bytes(b"\0" * 100)  # its temporary file: swept
    (out / ".insurance.claim").write_text("policy 1234-5678, renew in May\n")
    (out / ".draft.claim").write_text("")
    old = time.time() - 3600
    os.utime(out / ".draft.claim", (old, old))
    (tmp_path / "notes.txt").write_text("4242")
    _link(out / ".notes.claim", tmp_path / "notes.txt")
    part_link = out / stale.name.replace(".m0.png.", ".m1.png.")
    _link(part_link, tmp_path / "notes.txt")
    keep = sorted([".insurance.claim", ".draft.claim", ".notes.claim", part_link.name])
    code, _, err = cli("demosaic", "in", "-o", "out", "-m", "bilinear", cwd=tmp_path)
    assert code == 0, err
    assert sorted(os.listdir(out)) == sorted([*keep, "m0.png"])
    assert (out / ".insurance.claim").read_text() == "policy 1234-5678, renew in May\n"
    assert (tmp_path / "notes.txt").read_text() == "4242"
    assert sweep_stale({out}) == 0 and sorted(os.listdir(out)) == sorted([*keep, "m0.png"])


# --------------------------------------------------------------------------- 3. train --out: only a folder of its own


def test_train_into_a_users_folder_is_refused(tmp_path):
    """``train --out mine`` where ``mine`` holds the user's ``best.pt``, ``model.pt``,
    ``summary.json``: a usage error naming the folder, before anything is written."""
    _photos(tmp_path / "photos")
    mine = tmp_path / "mine"
    mine.mkdir()
    files = {"best.pt": b"my best weights", "model.pt": b"my model", "summary.json": b'{"mine": true}'}
    for name, data in files.items():
        (mine / name).write_bytes(data)
    code, _, err = cli(*TRAIN, "--out", "mine", "--max-steps", "1", cwd=tmp_path)
    assert code == 2, err
    assert errors(err) == ["error: mine: --out is not empty and holds no gsprestore training run (best.pt, model.pt, "
                           "summary.json); a new run writes only into a new or empty folder: choose another --out"], err
    assert {p.name: p.read_bytes() for p in mine.iterdir()} == files
    assert sorted(os.listdir(tmp_path)) == ["mine", "photos"]


def test_resume_of_a_folder_this_tool_did_not_make_is_refused(tmp_path):
    """``--resume`` of a folder whose ``config.json`` was not written by ``gsprestore train``
    (it has a recipe, but no run format): refused before its ``config.json`` is rewritten."""
    from gsprestore.training import TrainConfig

    _photos(tmp_path / "photos")
    mine = tmp_path / "mine"
    mine.mkdir()
    text = json.dumps({"recipe": TrainConfig(task="demosaic", prior="gtv", data=["photos"]).to_json()})
    (mine / "config.json").write_text(text)
    (mine / "last.pt").write_bytes(b"my checkpoint")
    code, _, err = cli("train", "--resume", "mine", "--epochs", "7", "--device", "cpu", "--no-progress", cwd=tmp_path)
    assert code == 2, err
    assert errors(err) == ["error: mine: not a gsprestore training run (its config.json was not written by gsprestore "
                           "train); nothing to resume"], err
    assert (mine / "config.json").read_text() == text and sorted(os.listdir(mine)) == ["config.json", "last.pt"]


@pytest.mark.slow  # three tiny training runs
def test_train_into_an_empty_folder_and_its_resume_still_work(tmp_path):
    """An empty existing folder takes a new run; ``--resume`` of that run works; a link put at its
    ``log.jsonl`` is refused, never appended through."""
    _photos(tmp_path / "photos")
    (tmp_path / "run").mkdir()
    code, _, err = cli(*TRAIN, "--out", "run", "--max-steps", "1", cwd=tmp_path)
    assert code == 0, err
    code, _, err = cli(*TRAIN, "--out", "run", "--max-steps", "1", cwd=tmp_path)
    assert code == 2 and "this folder already holds a training run; pass --resume" in err, err
    code, _, err = cli("train", "--resume", "run", "--max-steps", "2", "--device", "cpu", "--no-progress", cwd=tmp_path)
    assert code == 0, err
    (tmp_path / "notes.txt").write_text(SECRET)
    os.replace(tmp_path / "run" / "log.jsonl", tmp_path / "log-was.jsonl")
    _link(tmp_path / "run" / "log.jsonl", tmp_path / "notes.txt")
    code, _, err = cli("train", "--resume", "run", "--max-steps", "3", "--device", "cpu", "--no-progress", cwd=tmp_path)
    assert code == 2, err
    assert errors(err) == ["error: run/log.jsonl: a symbolic link is in the way of this run's log (a run appends only "
                           "to its own log.jsonl): move it away"], err
    assert (tmp_path / "notes.txt").read_text() == SECRET


def test_json_log_never_appends_through_a_link(tmp_path):
    from gsprestore.training.checkpoints import JsonLog

    (tmp_path / "notes.txt").write_text(SECRET)
    _link(tmp_path / "log.jsonl", tmp_path / "notes.txt")
    with pytest.raises(OSError):
        JsonLog(tmp_path / "log.jsonl").write("start")
    assert (tmp_path / "notes.txt").read_text() == SECRET


def test_train_pack_into_a_link_to_a_folder_keeps_the_link(tmp_path):
    """``train-pack -o link`` where ``link`` is the user's symbolic link to a folder: the pack goes
    into that folder; the link is not replaced by a folder of the pack's."""
    _photos(tmp_path / "photos")
    (tmp_path / "real").mkdir()
    os.symlink("real", tmp_path / "link")
    code, _, err = cli("train-pack", "photos", "-o", "link", *PACK_ARGS, cwd=tmp_path)
    assert code == 0, err
    assert os.readlink(tmp_path / "link") == "real"
    assert (tmp_path / "real" / "pack.json").is_file()
    assert sorted(os.listdir(tmp_path)) == ["link", "photos", "real"]


@pytest.mark.parametrize("recipe", [{"task": "demosaic"}, {"task": "demosaic", "prior": "gtv", "data": ["d"],
                                                             "epochs": "many"}])
def test_resume_of_a_run_with_an_incomplete_recipe_is_one_line(tmp_path, recipe):
    """Issue 51: a config.json whose recipe was cut short gave 'unexpected TypeError (a bug)'."""
    import json

    from cli_runner import cli

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"format": "gsprestore-train-run/1", "recipe": recipe}))
    (run / "last.pt").write_bytes(b"x")
    code, _, err = cli("train", "--resume", run)
    assert code == 2 and "config.json: its recipe" in err and "start a new run" in err, err
    assert "bug" not in err and len(err.strip().splitlines()) == 1
