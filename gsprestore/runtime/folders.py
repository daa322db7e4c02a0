"""Files and folders: which inputs to process, where each output goes, and a batch runner that
never loses work.

* :func:`discover` expands the command line's inputs: files (taken as given), folders (their image
  files; sub-folders with ``recursive``) and globs. Hidden files/folders (name starting with ``.``)
  and non-image files found in folders or globs are skipped with a notice. Each real folder is
  visited once: a symbolic link back to a folder already walked (``loop -> .``, ``up -> ..``) is
  skipped and named, so a link loop cannot make discovery grow without end.
* The tool never eats its own output: in folders and globs, a file written by the same command
  (its PNG/TIFF ``Software`` tag, see :func:`gsprestore.imageio.images.tool_tag`), the output folder ``-o``
  when it lies inside an input folder, and a file that is the planned output of another input
  (:func:`drop_own_outputs`) are not inputs. Files named on the command line are taken as given.
* :func:`plan_jobs` maps each input to its output: ``-o`` a file (one input) or a folder that
  mirrors the input tree (relative to the folder or glob base each input came from), or, without
  ``-o``, next to the input with a suffix. ``--ext png|tiff|jpg|webp|dng|same``. An output equal to its input, or
  two inputs writing the same output, is a usage error before anything runs.
* :func:`run_jobs` processes the jobs in order: existing outputs are skipped (``skip_existing``) or
  refused unless ``overwrite``; each output is written atomically by :func:`gsprestore.imageio.images.write_image`
  (temp file + rename), so after an interruption a rerun with ``skip_existing`` finishes the batch
  and never trusts a half-written file. Without ``continue_on_error`` the first failure stops the
  batch (exit 1; files already written stay valid); with it every good file is written and the
  exit code is 3 if any failed.
* Concurrent runs on one output folder: before working on an output, a run claims it atomically
  (:func:`gsprestore.core.claims.claim_output`) and the finished file is put in place
  create-exclusively, so two runs with ``--skip-existing`` share the work (each skips what the
  other claimed or wrote), and without it the second one reports the output as taken instead of
  overwriting it. A run first sweeps its output folders of what killed runs left
  (:func:`gsprestore.core.claims.sweep_stale`).
* Names stay inside the output folder: ``--suffix`` may not hold a ``/`` (:func:`check_suffix`),
  and a built name too long for the file system is shortened, keeping a hash of the full name,
  the suffix and the extension (:func:`fit_name`).
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar

from ..core.atomic import TEMP_NAME_EXTRA
from ..core.claims import claim_output, release_output, sweep_stale
from ..core.errors import GspError, UsageError
from ..core.fileid import file_id, path_key
from ..imageio.images import IMAGE_SUFFIXES, OutputExists, check_writable, is_image_name

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
    skipped_links: list[str] = field(default_factory=list)  # links to a folder already walked
    skipped_own: list[str] = field(default_factory=list)  # outputs of this command, or the -o tree
    skipped_beside_raw: list[str] = field(default_factory=list)  # images in a folder of camera RAW files
    skipped_raw: list[str] = field(default_factory=list)  # camera RAW files, for a command that takes none
    #: How the notice names ``skipped_beside_raw`` ("skipped N ... file(s): ...").
    RAW_ONLY: ClassVar[str] = "non-RAW (a folder holding camera RAW files gives those only; name others one by one)"
    _visited: set = field(default_factory=set, repr=False)


def _hidden(rel: Path) -> bool:
    return any(part.startswith(".") for part in rel.parts)


def _folder_id(folder: Path) -> tuple[int, int] | None:
    return file_id(folder)


def _is_input(path: Path, extra: tuple[str, ...]) -> bool:
    return is_image_name(path) or path.suffix.lower() in extra


def _raw_name(path: Path) -> bool:
    from ..imageio.camera_raw import is_raw_name

    return is_raw_name(path)


def _walk(folder: Path, recursive: bool, found: Discovery, base: Path, exclude: set, tag: str | None,
          extra: tuple[str, ...] = ()) -> None:
    from ..imageio.images import tool_tag

    key = _folder_id(folder)
    if key is not None:
        found._visited.add(key)
    try:
        entries = sorted(folder.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        raise GspError(f"cannot list the folder ({exc.strerror or exc})", folder) from None
    for entry in entries:
        rel = entry.relative_to(base)
        if entry.name.startswith("."):
            found.skipped_hidden.append(str(entry))
            continue
        if entry.is_dir():
            if _folder_id(entry) in exclude:
                found.skipped_own.append(f"{entry}{os.sep} (the output folder)")
            elif not recursive:
                found.skipped_folders.append(str(entry))
            elif _folder_id(entry) in found._visited:
                target = os.path.realpath(entry)
                found.skipped_links.append(f"{entry} -> {target}" if entry.is_symlink() else str(entry))
            else:
                _walk(entry, recursive, found, base, exclude, tag, extra)
        elif entry.is_file():
            if not _is_input(entry, extra):
                if _raw_name(entry):
                    found.skipped_raw.append(str(entry))
                else:
                    found.skipped_other.append(str(rel))
            elif tag is not None and tool_tag(entry) == tag:
                found.skipped_own.append(str(entry))
            else:
                found.sources.append(Source(entry, base))


def _glob_base(pattern: str) -> Path:
    parts = Path(pattern).parts
    keep = []
    for part in parts:
        if _MAGIC & set(part):
            break
        keep.append(part)
    return Path(*keep) if keep else Path(".")


def _part_regex(part: str) -> str:
    """One path component of a glob as a regular expression (``*``, ``?``, ``[...]``; no ``/``)."""
    out, i = "", 0
    while i < len(part):
        ch = part[i]
        if ch == "*":
            out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch == "[" and part.find("]", i + 2) > 0:
            j = part.find("]", i + 2)
            body = part[i + 1 : j]
            body = "^" + body[1:] if body.startswith("!") else body
            out += "[" + body.replace("\\", "\\\\") + "]"
            i = j
        else:
            out += re.escape(ch)
        i += 1
    return out


def _glob(pattern: str, recursive: bool, found: Discovery) -> list[str]:
    """``glob.glob`` for patterns without ``**`` (their depth is bounded by the pattern); for a
    recursive ``**`` pattern, a walk from the pattern's fixed prefix that visits each real folder
    once (Python's glob follows symbolic-link loops for ever) and skips hidden folders."""
    if not (recursive and "**" in pattern):
        return sorted(glob.glob(pattern, recursive=recursive))
    parts = Path(pattern).parts
    root = parts[0] if Path(pattern).is_absolute() else ""
    rest = parts[1:] if root else parts
    rx = re.escape(root)
    for k, part in enumerate(rest):
        last = k == len(rest) - 1
        if part == "**":
            rx += "(?:[^/]+/)*" + ("[^/]*" if last else "")
        else:
            rx += _part_regex(part) + ("" if last else "/")
    regex = re.compile(rx)
    matches: list[str] = []
    visited: set = set()

    def walk(folder: Path) -> None:
        key = _folder_id(folder)
        if key in visited:
            found.skipped_links.append(f"{folder} -> {os.path.realpath(folder)}" if folder.is_symlink() else str(folder))
            return
        visited.add(key)
        try:
            entries = sorted(folder.iterdir(), key=lambda p: p.name)
        except OSError:
            return
        for entry in entries:
            text = str(entry)
            if regex.fullmatch(text.replace(os.sep, "/")):
                matches.append(text)
            if entry.is_dir() and not entry.name.startswith("."):
                walk(entry)

    base = _glob_base(pattern)
    if base.is_dir():
        walk(base)
    return sorted(matches)


def discover(inputs: list[str], recursive: bool = False, *, output: str | None = None,
             tag: str | None = None, extra_suffixes: tuple[str, ...] = (),
             raw_only_folders: bool = True) -> Discovery:
    """Expand files, folders and globs into :class:`Source` s (sorted within each input).
    ``output`` (the ``-o`` folder) is not walked into; in folders and globs, files whose
    :func:`~gsprestore.imageio.images.tool_tag` equals ``tag`` (written by this command) are skipped.
    ``extra_suffixes`` (e.g. camera RAW suffixes for ``demosaic``) are taken from folders too; with
    ``raw_only_folders``, a folder (with ``recursive``, its tree) or glob that yields files of those
    suffixes yields only those: the other images (the JPEGs of a RAW+JPEG shoot) go to
    ``skipped_beside_raw``.
    Files named one by one are taken as given."""
    from ..imageio.images import tool_tag

    found = Discovery([], [], [], [], [])
    exclude = set()
    if output is not None and Path(output).is_dir():
        exclude.add(_folder_id(Path(output)))
    for arg in inputs:
        p = Path(arg)
        if p.is_dir():
            _walk(p, recursive, found, p, exclude, tag, extra_suffixes)
        elif p.exists():
            found.sources.append(Source(p, None))
        elif _MAGIC & set(arg):
            base = _glob_base(arg)
            matches = _glob(arg, recursive, found)
            if not matches:
                found.missing.append(arg)
            for m in matches:
                mp = Path(m)
                rel = mp.relative_to(base) if mp.is_relative_to(base) else Path(mp.name)
                if _hidden(rel):
                    found.skipped_hidden.append(m)
                elif mp.is_dir():
                    if _folder_id(mp) in exclude:
                        found.skipped_own.append(f"{m}{os.sep} (the output folder)")
                    elif not recursive:
                        found.skipped_folders.append(m)
                    elif _folder_id(mp) not in found._visited:
                        _walk(mp, recursive, found, base, exclude, tag, extra_suffixes)
                elif _is_input(mp, extra_suffixes):
                    if tag is not None and tool_tag(mp) == tag:
                        found.skipped_own.append(m)
                    else:
                        found.sources.append(Source(mp, base))
                else:
                    (found.skipped_raw if _raw_name(mp) else found.skipped_other).append(m)
        else:
            found.missing.append(arg)
    if extra_suffixes and raw_only_folders:
        _keep_raw_only(found, extra_suffixes)
    # the same file named twice (by any path: a link, a bind mount) is processed once
    seen: set[tuple] = set()
    unique = []
    for s in found.sources:
        key = path_key(s.path)
        if key not in seen:
            seen.add(key)
            unique.append(s)
    found.sources = unique
    return found


def _keep_raw_only(found: Discovery, raw_suffixes: tuple[str, ...]) -> None:
    """For each folder (its whole tree with ``--recursive``) or glob of the command line that yields
    camera RAW files (suffixes ``raw_suffixes``), keep only those: a camera shooting RAW+JPEG puts
    ``IMG_0001.CR2`` beside ``IMG_0001.JPG`` (or in ``RAW/`` beside ``JPG/``), and a JPEG is a
    developed picture, not a mosaic. The others go to ``skipped_beside_raw``; files named on the
    command line stay."""
    def is_raw(s: Source) -> bool:
        return s.path.suffix.lower() in raw_suffixes

    raw_trees = {s.base.resolve() for s in found.sources if s.base is not None and is_raw(s)}
    keep = []
    for s in found.sources:
        if s.base is not None and not is_raw(s) and s.base.resolve() in raw_trees:
            found.skipped_beside_raw.append(str(s.path))
        else:
            keep.append(s)
    found.sources = keep


def drop_own_outputs(jobs: list[Job]) -> tuple[list[Job], list[Job]]:
    """Split ``jobs`` into those to run and those whose input is another job's output (a file a
    previous run of the same command wrote, e.g. ``a-2x.png`` next to ``a.png``; the same file by
    any path, :func:`gsprestore.core.fileid.path_key`): those are dropped, so a rerun never processes
    its own outputs. (A file named on the command line that is another input's output is refused
    before, by :func:`plan_jobs`.)"""
    outputs = {path_key(j.output) for j in jobs}
    keep = [j for j in jobs if path_key(j.input) not in outputs]
    dropped = [j for j in jobs if path_key(j.input) in outputs]
    return keep, dropped


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


#: Image formats gsprestore does not write: ``-o NAME`` with one of these suffixes is a usage error
#: (not a folder of that name).
UNWRITABLE_SUFFIXES = frozenset({
    ".bmp", ".dib", ".gif", ".avif", ".heic", ".heif", ".exr", ".jxl", ".jp2", ".j2k", ".jpx", ".ppm",
    ".pgm", ".pbm", ".pnm", ".pfm", ".hdr", ".ico", ".icns", ".psd", ".tga", ".dds", ".svg", ".pdf", ".qoi",
    ".raw", ".cr2", ".cr3", ".crw", ".nef", ".nrw", ".arw", ".srf", ".sr2", ".raf", ".orf", ".rw2", ".pef",
    ".srw", ".x3f", ".3fr", ".iiq", ".erf", ".kdc", ".mrw", ".rwl",
})


def output_is_file(output: str | None, n_inputs: int, single_file_input: bool) -> bool:
    """``-o`` names a file when it has an image suffix and is not an existing folder. A name
    ending in another file-type suffix (``photo.bmp``, ``a.gif``) or in an unknown one with a
    letter (``x.jpeg2``, a typo) is refused rather than silently made a folder; a folder may end
    in ``/`` (``-o shots.bmp/``) or in an all-digit suffix (``v1.2``)."""
    if output is None:
        return False
    p = Path(output)
    if p.is_dir() or output.endswith(("/", os.sep)):
        return False
    if not (is_image_name(p) or p.suffix.lower() == ".dng"):
        if p.suffix[1:].isalpha():
            raise UsageError(f"-o {output}: unsupported output format {p.suffix!r}: gsprestore does not write "
                             f"{p.suffix.lower()[1:].upper()} files; use .png, .tif, .jpg or .webp "
                             "(or end the name with / to make a folder)")
        if any(c.isalpha() for c in p.suffix):
            raise UsageError(f"-o {output}: unknown output extension {p.suffix!r}; use .png, .tif, .jpg or .webp "
                             "(or end the name with / to make a folder)")
        return False
    if n_inputs != 1 or not single_file_input:
        raise UsageError(f"-o {output} is a file name but there are several inputs; give a folder")
    return True


def check_suffix(suffix: str) -> str:
    """``--suffix`` must be part of a file name: no folder separator, no NUL (``/../x`` would
    write outside the output folder)."""
    if any(sep and sep in suffix for sep in ("/", os.sep, os.altsep, "\0")):
        raise UsageError(f"--suffix {suffix!r} must be part of a file name (no '/')")
    return suffix


def name_max(folder: Path) -> int:
    """The longest file name (bytes) the file system of ``folder`` (or of its nearest existing
    ancestor) takes; 255 where it does not say."""
    for f in (folder, *folder.absolute().parents):
        if f.is_dir():
            try:
                return int(os.pathconf(f, "PC_NAME_MAX"))
            except (OSError, ValueError, AttributeError):
                break
    return 255


def fit_name(stem: str, tail: str, folder: Path) -> str:
    """The file name ``stem + tail`` (``tail``: the suffix and extension) as it may be written into
    ``folder``: unchanged when it, and the temporary files beside it
    (:data:`gsprestore.core.atomic.TEMP_NAME_EXTRA` bytes longer), fit the file system's NAME_MAX; else
    ``stem`` is cut at a character boundary and followed by ``~`` and 8 hex digits of the full
    name's SHA-1 (distinct long names stay distinct, a rerun finds the same name), then ``tail``."""
    name = stem + tail
    limit = name_max(folder) - TEMP_NAME_EXTRA
    if len(os.fsencode(name)) <= limit:
        return name
    tail = f"~{hashlib.sha1(os.fsencode(name)).hexdigest()[:8]}{tail}"
    if len(os.fsencode(tail)) >= limit:
        raise UsageError(f"output name {name!r} cannot be shortened to {limit} bytes (a shorter --suffix?)")
    while len(os.fsencode(stem + tail)) > limit:
        stem = stem[:-1]
    return stem + tail


def plan_jobs(sources: list[Source], output: str | None, *, suffix: str, ext: str) -> list[Job]:
    """Output path of every source (see the module docstring)."""
    single_file = len(sources) == 1 and sources[0].base is None
    to_file = output_is_file(output, len(sources), single_file)
    check_suffix(suffix)
    jobs = []
    for s in sources:
        if to_file:
            out = Path(output)
        else:
            if output is None:
                folder = s.path.parent
            else:
                rel = s.path.parent.relative_to(s.base) if s.base is not None else Path()
                if ".." in rel.parts:  # a glob such as 'a/*/../../b.png': the mirror would leave -o
                    rel = Path()
                folder = Path(output) / rel
            out = folder / fit_name(s.path.stem, suffix + output_suffix(ext, s.path), folder)
        jobs.append(Job(s.path, out))
    # "is the output one of the inputs" is asked by identity (device, inode; a case-insensitive
    # name), not by the path string: a symbolic link, a hard link or a bind mount reach one file
    named = {path_key(s.path): s.path for s in sources if s.base is None}
    by_output: dict[tuple, Path] = {}
    for j in jobs:
        key = path_key(j.output)
        if key == path_key(j.input):
            same = "" if j.output.resolve() == j.input.resolve() else f" (the same file as {j.output})"
            raise UsageError(f"output would overwrite the input {j.input}{same}; choose another -o, --suffix "
                             "or --ext")
        if key in named:
            raise UsageError(f"{named[key]} is named as an input and would be overwritten as the output of "
                             f"{j.input}; choose another -o, --suffix or --ext")
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
    limit = name_max(parent) - TEMP_NAME_EXTRA
    if len(os.fsencode(path.name)) > limit:  # a name given with -o (built names are shortened to fit)
        raise GspError(f"file name too long ({len(os.fsencode(path.name))} bytes; with the temporary files "
                       f"beside it, this file system takes at most {limit})", path)


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


class _Taken(Exception):
    def __init__(self, pid: int):
        self.pid = pid


def shard_jobs(jobs: list[Job], index: int, count: int) -> list[Job]:
    """Share ``index`` (0 to count-1) of ``count`` of the planned jobs, dealt round-robin in the
    order of the sorted walk (every count-th job from the index-th): each job in exactly one
    share, the shares within one job of each other in length. ``--shard K/N`` and the ranks of
    ``torchrun`` (``RANK`` / ``WORLD_SIZE``) both take theirs with it."""
    if not 0 <= index < count:
        raise UsageError(f"share {index} of {count} does not exist")
    return jobs[index::count]


def run_jobs(
    jobs: list[Job],
    process: Callable[[Job, int], dict | None],
    *,
    sweep: bool = True,
    skip_existing: bool = False,
    overwrite: bool = False,
    continue_on_error: bool = False,
    on_start: Callable[[int, Job], None] | None = None,
    on_result: Callable[[int, Result], None] | None = None,
    failures: list[Result] | None = None,
) -> Summary:
    """Run ``process(job, index)`` on every job (which writes ``job.output`` atomically), after
    sweeping the output folders of what killed runs left (``sweep``). ``failures`` are results
    that failed before the run (e.g. missing inputs): they count, and stop the batch at once
    unless ``continue_on_error``."""
    start = time.perf_counter()
    summary = Summary(list(failures or []))
    if summary.results and not continue_on_error:
        summary.stopped = True
        summary.seconds = time.perf_counter() - start
        return summary
    if sweep:  # False where the caller swept before several processes started (the ranks of torchrun)
        sweep_stale({folder for folder in {j.output.parent for j in jobs} if folder.is_dir()})
    for k, job in enumerate(jobs):
        if on_start is not None:
            on_start(k, job)
        t0 = time.perf_counter()
        claimed = False
        if skip_existing and job.output.exists():
            res = Result(str(job.input), str(job.output), "skipped")
        else:
            try:
                prepare_output(job.output, overwrite=overwrite)
                owner = claim_output(job.output)
                if owner is not None:
                    raise _Taken(owner)
                claimed = True
                if skip_existing and job.output.exists():  # finished by another run meanwhile
                    raise OutputExists(job.output)
                info = process(job, k) or {}
                res = Result(str(job.input), str(job.output), "written", info=info)
            except _Taken as taken:
                who = f" (pid {taken.pid})" if taken.pid > 0 else ""
                if skip_existing:
                    res = Result(str(job.input), str(job.output), "skipped",
                                 info={"reason": f"being written by another run{who}"})
                else:
                    res = Result(str(job.input), str(job.output), "failed",
                                 error=f"{job.output}: being written by another gsprestore run{who}; "
                                 "pass --skip-existing to share the work")
            except OutputExists as exc:
                if skip_existing:
                    res = Result(str(job.input), str(job.output), "skipped")
                else:
                    res = Result(str(job.input), str(job.output), "failed", error=str(exc))
            except GspError as exc:
                message = str(exc) if exc.path else f"{job.input}: {exc.reason}"
                res = Result(str(job.input), str(job.output), "failed", error=message)
            except Exception as exc:  # an unexpected failure of one file must not kill the batch
                if not continue_on_error:
                    raise
                reason = str(exc).splitlines()[0] if str(exc) else ""
                res = Result(str(job.input), str(job.output), "failed",
                             error=f"{job.input}: unexpected error ({type(exc).__name__}: {reason})")
            finally:
                if claimed:
                    release_output(job.output)
        res.seconds = time.perf_counter() - t0
        summary.results.append(res)
        if on_result is not None:
            on_result(k, res)
        if res.status == "failed" and not continue_on_error:
            summary.stopped = True
            break
    summary.seconds = time.perf_counter() - start
    return summary
