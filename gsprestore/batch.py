"""Files and folders: which inputs to process, where each output goes, and a batch runner that
never loses work.

* :func:`discover` expands the command line's inputs: files (taken as given), folders (their image
  files; sub-folders with ``recursive``) and globs. Hidden files/folders (name starting with ``.``)
  and non-image files found in folders or globs are skipped with a notice.
* :func:`plan_jobs` maps each input to its output: ``-o`` a file (one input) or a folder that
  mirrors the input tree (relative to the folder or glob base each input came from), or, without
  ``-o``, next to the input with a suffix. ``--ext png|tiff|jpg|webp|dng|same``. An output equal to its input, or
  two inputs writing the same output, is a usage error before anything runs.
* :func:`run_jobs` processes the jobs in order: existing outputs are skipped (``skip_existing``) or
  refused unless ``overwrite``; each output is written atomically by :func:`gsprestore.io.write_image`
  (temp file + rename), so after an interruption a rerun with ``skip_existing`` finishes the batch
  and never trusts a half-written file. Without ``continue_on_error`` the first failure stops the
  batch (exit 1; files already written stay valid); with it every good file is written and the
  exit code is 3 if any failed.
"""

from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .errors import GspError, UsageError
from .io import IMAGE_SUFFIXES, check_writable, is_image_name

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_PARTIAL = 0, 1, 2, 3
_MAGIC = set("*?[")


@dataclass(frozen=True)
class Source:
    """An input file and the folder its output path is mirrored from (None: the file alone)."""

    path: Path
    base: Path | None = None


@dataclass(frozen=True)
class Job:
    input: Path
    output: Path


@dataclass
class Result:
    input: str
    output: str | None
    status: str  # "written" | "skipped" | "failed"
    error: str | None = None
    seconds: float = 0.0
    info: dict = field(default_factory=dict)


@dataclass
class Discovery:
    sources: list[Source]
    missing: list[str]
    skipped_hidden: list[str]
    skipped_other: list[str]
    skipped_folders: list[str]


def _hidden(rel: Path) -> bool:
    return any(part.startswith(".") for part in rel.parts)


def _is_input(path: Path, extra: tuple[str, ...]) -> bool:
    return is_image_name(path) or path.suffix.lower() in extra


def _walk(folder: Path, recursive: bool, found: Discovery, base: Path, extra: tuple[str, ...] = ()) -> None:
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        rel = entry.relative_to(base)
        if entry.name.startswith("."):
            found.skipped_hidden.append(str(entry))
            continue
        if entry.is_dir():
            if recursive:
                _walk(entry, recursive, found, base, extra)
            else:
                found.skipped_folders.append(str(entry))
        elif entry.is_file():
            if _is_input(entry, extra):
                found.sources.append(Source(entry, base))
            else:
                found.skipped_other.append(str(rel))


def _glob_base(pattern: str) -> Path:
    parts = Path(pattern).parts
    keep = []
    for part in parts:
        if _MAGIC & set(part):
            break
        keep.append(part)
    return Path(*keep) if keep else Path(".")


def discover(inputs: list[str], recursive: bool = False, extra_suffixes: tuple[str, ...] = ()) -> Discovery:
    """Expand files, folders and globs into :class:`Source` s (sorted within each input).
    ``extra_suffixes`` (e.g. camera RAW suffixes for ``demosaic``) are taken from folders too."""
    found = Discovery([], [], [], [], [])
    for arg in inputs:
        p = Path(arg)
        if p.is_dir():
            _walk(p, recursive, found, p, extra_suffixes)
        elif p.exists():
            found.sources.append(Source(p, None))
        elif _MAGIC & set(arg):
            base = _glob_base(arg)
            matches = sorted(glob.glob(arg, recursive=recursive))
            if not matches:
                found.missing.append(arg)
            for m in matches:
                mp = Path(m)
                rel = mp.relative_to(base) if mp.is_relative_to(base) else Path(mp.name)
                if _hidden(rel):
                    found.skipped_hidden.append(m)
                elif mp.is_dir():
                    if recursive:
                        _walk(mp, recursive, found, base, extra_suffixes)
                    else:
                        found.skipped_folders.append(m)
                elif _is_input(mp, extra_suffixes):
                    found.sources.append(Source(mp, base))
                else:
                    found.skipped_other.append(m)
        else:
            found.missing.append(arg)
    # the same file named twice is processed once
    seen: set[Path] = set()
    unique = []
    for s in found.sources:
        key = s.path.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(s)
    found.sources = unique
    return found


def output_suffix(ext: str, source: Path) -> str:
    ext = ext.lower().lstrip(".")
    if ext == "same":
        return source.suffix if source.suffix.lower() in IMAGE_SUFFIXES else ".png"
    if ext == "png":
        return ".png"
    if ext in ("tif", "tiff"):
        return ".tif"
    if ext in ("jpg", "jpeg", "webp", "dng"):
        return "." + ext
    raise UsageError(f"unknown --ext {ext!r}; expected png, tiff, jpg, webp or same")


def output_is_file(output: str | None, n_inputs: int, single_file_input: bool) -> bool:
    """``-o`` names a file when it has an image (or DNG) suffix and is not an existing folder."""
    if output is None:
        return False
    p = Path(output)
    if p.is_dir() or not (is_image_name(p) or p.suffix.lower() == ".dng"):
        return False
    if n_inputs != 1 or not single_file_input:
        raise UsageError(f"-o {output} is a file name but there are several inputs; give a folder")
    return True


def plan_jobs(sources: list[Source], output: str | None, *, suffix: str, ext: str) -> list[Job]:
    """Output path of every source (see the module docstring)."""
    single_file = len(sources) == 1 and sources[0].base is None
    to_file = output_is_file(output, len(sources), single_file)
    jobs = []
    for s in sources:
        if to_file:
            out = Path(output)
        else:
            name = s.path.stem + suffix + output_suffix(ext, s.path)
            if output is None:
                out = s.path.parent / name
            else:
                rel = s.path.parent.relative_to(s.base) if s.base is not None else Path()
                out = Path(output) / rel / name
        jobs.append(Job(s.path, out))
    by_output: dict[Path, Path] = {}
    for j in jobs:
        key = j.output.resolve()
        if key == j.input.resolve():
            raise UsageError(f"output would overwrite the input {j.input}; choose another -o, --suffix or --ext")
        if key in by_output:
            raise UsageError(f"{by_output[key]} and {j.input} would both be written to {j.output}")
        by_output[key] = j.input
    return jobs


def prepare_output(path: Path, *, overwrite: bool) -> None:
    """Create the output's folder and check it can take the file (fails before any work)."""
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise GspError("cannot create the output folder: a file is in the way", parent) from None
    except PermissionError:
        raise GspError("cannot create the output folder (permission denied)", parent) from None
    except OSError as exc:
        raise GspError(f"cannot create the output folder ({exc.strerror or exc})", parent) from None
    check_writable(path, overwrite=overwrite)


@dataclass
class Summary:
    results: list[Result]
    stopped: bool = False
    seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    @property
    def exit_code(self) -> int:
        if self.count("failed") == 0:
            return EXIT_OK
        return EXIT_FAILURE if self.stopped else EXIT_PARTIAL

    def to_dict(self) -> dict:
        return {
            "written": self.count("written"),
            "skipped": self.count("skipped"),
            "failed": self.count("failed"),
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 3),
            "files": [
                {k: v for k, v in vars(r).items() if not (k == "info" and not v)} | {"seconds": round(r.seconds, 3)}
                for r in self.results
            ],
        }


def run_jobs(
    jobs: list[Job],
    process: Callable[[Job, int], dict | None],
    *,
    skip_existing: bool = False,
    overwrite: bool = False,
    continue_on_error: bool = False,
    on_start: Callable[[int, Job], None] | None = None,
    on_result: Callable[[int, Result], None] | None = None,
    failures: list[Result] | None = None,
) -> Summary:
    """Run ``process(job, index)`` on every job (which writes ``job.output`` atomically).
    ``failures`` are results that failed before the run (e.g. missing inputs): they count, and
    stop the batch at once unless ``continue_on_error``."""
    start = time.perf_counter()
    summary = Summary(list(failures or []))
    if summary.results and not continue_on_error:
        summary.stopped = True
        summary.seconds = time.perf_counter() - start
        return summary
    for k, job in enumerate(jobs):
        if on_start is not None:
            on_start(k, job)
        t0 = time.perf_counter()
        if skip_existing and job.output.exists():
            res = Result(str(job.input), str(job.output), "skipped")
        else:
            try:
                prepare_output(job.output, overwrite=overwrite)
                info = process(job, k) or {}
                res = Result(str(job.input), str(job.output), "written", info=info)
            except GspError as exc:
                message = str(exc) if exc.path else f"{job.input}: {exc.reason}"
                res = Result(str(job.input), str(job.output), "failed", error=message)
            except Exception as exc:  # an unexpected failure of one file must not kill the batch
                if not continue_on_error:
                    raise
                reason = str(exc).splitlines()[0] if str(exc) else ""
                res = Result(str(job.input), str(job.output), "failed",
                             error=f"{job.input}: unexpected error ({type(exc).__name__}: {reason})")
        res.seconds = time.perf_counter() - t0
        summary.results.append(res)
        if on_result is not None:
            on_result(k, res)
        if res.status == "failed" and not continue_on_error:
            summary.stopped = True
            break
    summary.seconds = time.perf_counter() - start
    return summary
