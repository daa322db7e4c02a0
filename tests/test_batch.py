"""gsprestore.runtime.folders as a library: discover (files, folders, globs, hidden and non-image files,
sub-folders, the output folder), plan_jobs (output names and folders, collisions), drop_own_outputs
and run_jobs (skip / overwrite / continue-on-error, exit codes). No images are decoded here."""

from __future__ import annotations

from pathlib import Path

import pytest

from gsprestore.runtime.folders import (
    EXIT_FAILURE, EXIT_OK, EXIT_PARTIAL, Job, Source, discover, drop_own_outputs, output_suffix, plan_jobs,
    run_jobs,
)
from gsprestore.core.errors import GspError, UsageError


def _touch(path: Path, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name in ("b.png", "a.tif", "c.JPG", "notes.txt", ".hidden.png", "sub/d.webp", "sub/deeper/e.png",
                 ".git/f.png", "x.dng"):
        _touch(tmp_path / "in" / name)
    return tmp_path / "in"


def _names(found) -> list[str]:
    return [s.path.relative_to(s.base).as_posix() if s.base else s.path.name for s in found.sources]


def test_discover_folder_sorted_images_only(tree):
    found = discover([str(tree)])
    assert _names(found) == ["a.tif", "b.png", "c.JPG"]
    assert all(s.base == tree for s in found.sources)
    assert [Path(p).name for p in found.skipped_other] == ["notes.txt"]
    assert [Path(p).name for p in found.skipped_raw] == ["x.dng"]  # named apart: "develop it first"
    assert sorted(Path(p).name for p in found.skipped_hidden) == [".git", ".hidden.png"]
    assert [Path(p).name for p in found.skipped_folders] == ["sub"]
    assert found.missing == []


def test_discover_recursive_extra_suffixes_and_missing(tree):
    found = discover([str(tree), str(tree / "nope.png")], recursive=True, extra_suffixes=(".dng",),
                     raw_only_folders=False)
    assert _names(found) == ["a.tif", "b.png", "c.JPG", "sub/d.webp", "sub/deeper/e.png", "x.dng"]
    assert found.missing == [str(tree / "nope.png")]
    assert found.skipped_folders == []
    # by default a folder (its tree) holding camera RAW gives its RAW files only (RAW+JPEG shoots,
    # also as RAW/ and JPG/ sub-folders); the other images are named
    found = discover([str(tree)], recursive=True, extra_suffixes=(".dng",))
    assert _names(found) == ["x.dng"]
    assert sorted(Path(p).name for p in found.skipped_beside_raw) == ["a.tif", "b.png", "c.JPG", "d.webp", "e.png"]
    # a folder argument without RAW keeps its images
    found = discover([str(tree / "sub")], recursive=True, extra_suffixes=(".dng",))
    assert _names(found) == ["d.webp", "deeper/e.png"] and found.skipped_beside_raw == []
    # files named one by one are taken as given
    found = discover([str(tree / "c.JPG"), str(tree / "x.dng")], extra_suffixes=(".dng",))
    assert [s.path.name for s in found.sources] == ["c.JPG", "x.dng"] and found.skipped_beside_raw == []


def test_discover_files_globs_and_duplicates(tree):
    found = discover([str(tree / "b.png"), str(tree / "*.png"), str(tree / "b.png")])
    # a named file has no base (its output goes next to it or to -o); the glob adds nothing new
    assert [s.path.name for s in found.sources] == ["b.png"] and found.sources[0].base is None
    found = discover([str(tree / "*.t*")])
    assert [s.path.name for s in found.sources] == ["a.tif"] and found.skipped_other == [str(tree / "notes.txt")]
    assert discover([str(tree / "*.bmp")]).missing == [str(tree / "*.bmp")]


def test_discover_does_not_walk_into_the_output_folder(tree):
    out = tree / "sub"
    found = discover([str(tree)], recursive=True, output=str(out))
    assert _names(found) == ["a.tif", "b.png", "c.JPG"]


def test_output_suffix():
    assert output_suffix("same", Path("a.JPG")) == ".JPG"
    assert output_suffix("same", Path("a.dng")) == ".png"  # camera RAW in: PNG out
    assert output_suffix(".TIFF", Path("a.png")) == ".tif"
    assert output_suffix("jpeg", Path("a.png")) == ".jpeg"
    with pytest.raises(UsageError, match="unknown --ext 'bmp'"):
        output_suffix("bmp", Path("a.png"))


def test_plan_jobs_next_to_inputs_into_a_folder_or_a_file(tmp_path):
    a, b = tmp_path / "in" / "a.png", tmp_path / "in" / "sub" / "b.tif"
    sources = [Source(a, tmp_path / "in"), Source(b, tmp_path / "in")]
    jobs = plan_jobs(sources, None, suffix="-2x", ext="same")
    assert [j.output for j in jobs] == [tmp_path / "in" / "a-2x.png", tmp_path / "in" / "sub" / "b-2x.tif"]
    jobs = plan_jobs(sources, str(tmp_path / "out"), suffix="", ext="png")
    assert [j.output for j in jobs] == [tmp_path / "out" / "a.png", tmp_path / "out" / "sub" / "b.png"]
    jobs = plan_jobs([Source(a)], str(tmp_path / "one.webp"), suffix="", ext="same")
    assert jobs == [Job(a, tmp_path / "one.webp")]
    with pytest.raises(UsageError, match="is a file name but there are several inputs"):
        plan_jobs(sources, str(tmp_path / "one.png"), suffix="", ext="same")


def test_plan_jobs_refuses_overwriting_an_input_or_two_inputs_to_one_output(tmp_path):
    a = _touch(tmp_path / "a.png")
    with pytest.raises(UsageError, match="would overwrite the input"):
        plan_jobs([Source(a)], None, suffix="", ext="same")
    sources = [Source(tmp_path / "x" / "a.png", tmp_path / "x"), Source(tmp_path / "x" / "a.tif", tmp_path / "x")]
    with pytest.raises(UsageError, match="would both be written to"):
        plan_jobs(sources, str(tmp_path / "out"), suffix="", ext="png")


def test_drop_own_outputs(tmp_path):
    jobs = [Job(tmp_path / "a.png", tmp_path / "a-2x.png"), Job(tmp_path / "a-2x.png", tmp_path / "a-2x-2x.png")]
    keep, dropped = drop_own_outputs(jobs)
    assert keep == jobs[:1] and dropped == jobs[1:]


def _jobs(tmp_path: Path, n: int) -> list[Job]:
    return [Job(_touch(tmp_path / f"i{k}.png"), tmp_path / "out" / f"o{k}.png") for k in range(n)]


def _writer(fail: set[int] = frozenset()):
    done = []

    def work(job: Job, k: int) -> dict:
        if k in fail:
            raise GspError("broken")
        job.output.write_bytes(b"ok")
        done.append(k)
        return {"k": k}

    return work, done


def test_run_jobs_writes_every_job_and_reports(tmp_path):
    jobs = _jobs(tmp_path, 3)
    work, done = _writer()
    summary = run_jobs(jobs, work)
    assert done == [0, 1, 2] and summary.exit_code == EXIT_OK and summary.count("written") == 3
    assert [r.info for r in summary.results] == [{"k": 0}, {"k": 1}, {"k": 2}]
    d = summary.to_dict()
    assert d["written"] == 3 and d["failed"] == 0 and len(d["files"]) == 3


def test_run_jobs_existing_outputs_skip_refuse_or_overwrite(tmp_path):
    jobs = _jobs(tmp_path, 2)
    _touch(jobs[0].output, b"old")
    work, done = _writer()
    summary = run_jobs(jobs, work, skip_existing=True)
    assert [r.status for r in summary.results] == ["skipped", "written"] and done == [1]
    assert jobs[0].output.read_bytes() == b"old"
    summary = run_jobs(jobs, _writer()[0])
    assert summary.results[0].status == "failed" and summary.exit_code == EXIT_FAILURE
    assert len(summary.results) == 1  # stopped at the first failure
    summary = run_jobs(jobs, _writer()[0], overwrite=True)
    assert summary.count("written") == 2 and jobs[0].output.read_bytes() == b"ok"


def test_run_jobs_stops_or_continues_after_a_failure(tmp_path):
    jobs = _jobs(tmp_path, 3)
    work, done = _writer(fail={1})
    summary = run_jobs(jobs, work)
    assert done == [0] and summary.stopped and summary.exit_code == EXIT_FAILURE
    assert summary.results[-1].error == f"{jobs[1].input}: broken"
    for j in jobs:
        j.output.unlink(missing_ok=True)
    work, done = _writer(fail={1})
    summary = run_jobs(jobs, work, continue_on_error=True)
    assert done == [0, 2] and summary.exit_code == EXIT_PARTIAL
    assert [r.status for r in summary.results] == ["written", "failed", "written"]


def test_run_jobs_earlier_failures_stop_before_any_work(tmp_path):
    from gsprestore.runtime.folders import Result

    jobs = _jobs(tmp_path, 1)
    work, done = _writer()
    missing = [Result("gone.png", None, "failed", error="gone.png: no such file or folder")]
    summary = run_jobs(jobs, work, failures=missing)
    assert done == [] and summary.exit_code == EXIT_FAILURE
    summary = run_jobs(jobs, work, failures=missing, continue_on_error=True)
    assert done == [0] and summary.exit_code == EXIT_PARTIAL
