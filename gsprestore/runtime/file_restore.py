"""Restore one image file with a method: the per-file work of ``gsprestore demosaic`` / ``upscale2x``.

One home for what happens to a file between reading and writing it:

* :func:`load_restorer` builds the method (with the hint to choose another when its weights are
  missing and the method was not asked for by name);
* :func:`restore_file` reads an image (first TIFF page, its orientation, alpha, ICC profile),
  checks it against the task (:func:`gsprestore.runtime.tiling.check_channels`), restores it through the
  tiled engine, upscales alpha with bicubic, applies the orientation and writes the result;
* :func:`develop_raw_file` develops a camera RAW file (its own Bayer phase, levels, white balance,
  colour space) with the demosaicker;
* :func:`restore_chart` demosaicks the bundled test chart and scores it (``gsprestore demo``);
* :func:`header_pixels` reads an input's size from its header (a batch's time estimate).

The command line (:mod:`gsprestore.cli.restore_cmds`) parses options, calls these over the batch
(:mod:`gsprestore.runtime.folders`) and prints; :func:`gsprestore.api.restore_file` is the same function
for Python callers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable
from ..physics.tasks import is_mosaic, task_scale

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

    from ..methods.interface import Restorer

Notice = Callable[[str], None]
Progress = Callable[[int, int], None]
#: Told the output's megapixels just before the restorer runs (``gsprestore demosaic`` / ``upscale2x``
#: say the expected time of a long file there).
Expect = Callable[[float], None]

#: The classical method to suggest (CLI) or fall back to (``gsprestore demo``) when a learned
#: method's weights are not available.
#: A camera RAW file's default brightness (:data:`gsprestore.imageio.raw_develop.DEFAULT_BRIGHT`, repeated
#: here so that this module imports nothing heavy; a test checks they agree).
DEFAULT_BRIGHT = "auto"


def load_restorer(name: str, task: str, *, weights: str | None = None, method_given: bool = True,
                  fall_back: Notice | None = None, self_ensemble: bool = False) -> "Restorer":
    """The restorer of method ``name`` for ``task`` (``weights``: a weights file for a learned
    method; ``self_ensemble``: :mod:`gsprestore.methods.self_ensemble`). When the weights are missing and
    the method was the default (``method_given`` False): with ``fall_back``, it is told why and
    the task's classical default (:data:`gsprestore.methods.defaults.CLASSICAL_DEFAULT`) is returned instead; without, the error says which
    method to choose instead."""
    from ..core.errors import WeightsError
    from ..methods.registry import get_restorer

    options = {"weights": weights} if weights is not None else {}
    try:
        return get_restorer(name, task, self_ensemble=self_ensemble, **options)
    except WeightsError as exc:
        if method_given:
            raise
        from ..methods.defaults import CLASSICAL_DEFAULT

        other = CLASSICAL_DEFAULT[task]
        if fall_back is None:
            raise WeightsError(f"{exc.reason} (or choose another method, e.g. --method {other})", exc.path) from None
        fall_back(f"{name} weights are not available ({exc.reason}); using {other} instead")
        return get_restorer(other, task)


def written_depth(path: str | Path, depth: int) -> int:
    """The bit depth actually written (JPEG and WebP are 8-bit)."""
    return 8 if str(path).lower().endswith((".jpg", ".jpeg", ".webp")) else depth


def _tensor(array: "np.ndarray") -> "torch.Tensor":
    import torch

    return torch.from_numpy(array).permute(2, 0, 1)


def _say(notice: Notice | None, message: str) -> None:
    if notice is not None:
        notice(message)


#: The longest side a WebP (14-bit size fields) and a JPEG (libjpeg's limit) hold; PNG, TIFF: any.
FORMAT_MAX_SIDE = {"webp": 16383, "jpeg": 65500}


def check_output_size(path: str | Path, width: int, height: int) -> None:
    """Refuse an output its format cannot hold (:data:`FORMAT_MAX_SIDE`): called from the input's
    header, before any work (Pillow would fail only at the end, in its encoder)."""
    from ..core.errors import GspError
    from ..imageio.images import output_format

    limit = FORMAT_MAX_SIDE.get(fmt := output_format(path))
    if limit is not None and max(width, height) > limit:
        raise GspError(f"the output would be {width}x{height} pixels, and a {'JPEG' if fmt == 'jpeg' else 'WebP'} "
                       f"image is at most {limit:,} pixels on a side; write PNG or TIFF (--ext png or tiff)", path)


def restore_file(
    restorer: "Restorer",
    source: str | Path,
    output: str | Path,
    *,
    pattern: str = "RGGB",
    pattern_given: bool = False,
    tile: int = 0,
    overlap: int | None = None,
    device: "str | torch.device" = "auto",
    precision: str = "fp32",
    bit_depth: int | None = None,
    quality: int | None = None,
    overwrite: bool = False,
    wb: str = "camera",
    output_space: str = "srgb",
    bright: str | float = DEFAULT_BRIGHT,
    denoise: str | float = "auto",
    software: str | None = None,
    alpha_restorer: "Restorer | None" = None,
    notice: Notice | None = None,
    progress: Progress | None = None,
    expect: Expect | None = None,
    prefetch: "RawPrefetch | None" = None,
) -> dict:
    """Restore the image file ``source`` with ``restorer`` and write ``output`` (atomically).

    A camera RAW ``source`` (demosaic only) is developed by :func:`develop_raw_file`. Otherwise:
    page one of a TIFF, ``pattern`` for a mosaic, ``bit_depth`` None = the input's, alpha upscaled
    by ``alpha_restorer`` (default bicubic) for 2x, the ICC profile kept where it describes the
    pixels written (an RGB profile on RGB, a gray one on gray: never a CMYK JPEG's profile on its
    RGB pixels, nor a mosaic's gray one on its demosaicked RGB), restored in stored order and the
    file's orientation (TIFF tag, EXIF of a JPEG / WebP / PNG) applied to the result.
    ``notice`` gets one-line messages (several pages or frames, odd size, tiles, a profile left out,
    transparency dropped by a JPEG output), ``progress`` (done, total) tiles, ``expect`` the
    output's megapixels before the restorer runs; ``prefetch``: a camera RAW file being decoded
    ahead (used when it is ``source``).
    Returns what was written: width, height, bit_depth (and orientation when not 1)."""
    from ..imageio.camera_raw import is_camera_raw
    from .tiling import check_channels, job_bytes, resolve_device, restore
    from ..core.errors import GspError, UsageError
    from ..imageio.images import TOOL_TAG, apply_orientation, frames_note, read_image, write_image
    from ..imageio.metadata import for_output

    source, task = Path(source), restorer.task
    software = software or TOOL_TAG.format(command=task)
    run = dict(tile=tile, overlap=overlap, device=device, precision=precision)
    if is_mosaic(task) and is_camera_raw(source):
        return develop_raw_file(restorer, source, output, pattern=pattern if pattern_given else None, wb=wb,
                                output_space=output_space, bright=bright, denoise=denoise, bit_depth=bit_depth,
                                quality=quality,
                                overwrite=overwrite, software=software, notice=notice, progress=progress,
                                expect=expect, ahead=prefetch.take(source) if prefetch is not None else None,
                                **run)

    def reserve(height: int, width: int, channels: int) -> int:  # restore and write, checked from the header
        f = task_scale(task)
        check_output_size(output, f * width, f * height)  # the format's size limit, before any work
        return job_bytes(restorer, height, width, channels, tile=tile, overlap=overlap,
                         device=resolve_device(device))

    img = read_image(source, reserve=reserve)
    for note in ([frames_note(img)] if frames_note(img) else []) + img.meta.get("notes", []):
        _say(notice, f"{source}: {note}")
    try:
        check_channels(task, img.channels)
    except UsageError as exc:  # a property of this file, not of the arguments: the file fails
        raise GspError(exc.reason, source) from None
    if is_mosaic(task) and (img.width % 2 or img.height % 2):
        _say(notice, f"{source}: odd size {img.width}x{img.height}, mirrored by one pixel to even and cropped back")
    if expect is not None:
        expect(img.width * img.height * (task_scale(task) ** 2) / 1e6)
    # A mosaic is demosaicked in stored (sensor) order: its Bayer phase is the sensor's, and the
    # file's Orientation is applied to the result. A 2x upscale is oriented first: its known pixels
    # land on the even grid (out[0::2, 0::2]) of the picture as displayed, whatever the Orientation
    # (upscaling in stored order and then rotating would put them at out[1::2, 1::2] for 3, say).
    orientation, stored = img.meta.get("orientation", 1), (img.width, img.height)
    if not is_mosaic(task) and orientation != 1:
        img.array = apply_orientation(img.array, orientation)
        if img.alpha is not None:
            img.alpha = apply_orientation(img.alpha, orientation)
        orientation_after = 1
    else:
        orientation_after = orientation
    out = restore(restorer, _tensor(img.array), pattern, progress=progress, notice=notice, **run)
    alpha = img.alpha
    if alpha is not None and not is_mosaic(task):
        if alpha_restorer is None:
            from ..methods.registry import get_restorer

            alpha_restorer = get_restorer("bicubic", "upscale2x")
        alpha = restore(alpha_restorer, _tensor(alpha[:, :, None]), notice=notice, **run)[:, :, 0].numpy()
    depth = bit_depth or img.bit_depth
    result = apply_orientation(out.numpy(), orientation_after)
    if alpha is not None:
        alpha = apply_orientation(alpha, orientation_after)
    metadata = for_output(img.meta.get("metadata"), result.shape[1], result.shape[0], software, source=stored,
                          orientation=orientation, scale=task_scale(task))
    # the profile and alpha go only where they are true of the pixels written; write_image says what it leaves out
    written = write_image(output, result, depth, alpha=alpha, icc_profile=img.icc_profile, overwrite=overwrite,
                          software=software, quality=quality, metadata=metadata,
                          notice=lambda message: _say(notice, f"{source}: {message}"))
    info = {"width": result.shape[1], "height": result.shape[0], "bit_depth": written_depth(written, depth)}
    if bit_depth and info["bit_depth"] < bit_depth:
        _say(notice, f"{written}: {Path(written).suffix.lstrip('.').upper()} is 8-bit; --bit-depth {bit_depth} "
                     "needs --ext png or tiff")
    return info | ({"orientation": orientation} if orientation != 1 else {})


#: Memory a camera RAW's development needs per sensor pixel beyond the restoration itself (see
#: :func:`develop_raw_file`'s reservation).
RAW_DEVELOP_BYTES_PER_PIXEL = 32


def develop_raw_file(
    restorer: "Restorer",
    source: str | Path,
    output: str | Path,
    *,
    pattern: str | None = None,
    wb: str = "camera",
    output_space: str = "srgb",
    bright: str | float = DEFAULT_BRIGHT,
    denoise: str | float = "auto",
    bit_depth: int | None = None,
    quality: int | None = None,
    overwrite: bool = False,
    software: str | None = None,
    notice: Notice | None = None,
    progress: Progress | None = None,
    expect: Expect | None = None,
    ahead: "DecodedRaw | None" = None,
    **run: Any,
) -> dict:
    """Develop the camera RAW file ``source`` with the demosaicker ``restorer`` and write ``output``
    (16-bit unless ``bit_depth``): the file's own Bayer phase (a different ``pattern`` is ignored,
    with a notice), black/white levels and visible area, white balance ``wb``, ``output_space``,
    brightness ``bright`` (:func:`gsprestore.imageio.raw_develop.develop`); ``denoise``: see
    :func:`raw_denoiser`. ``ahead``: the file already decoded, its noise measured and its record
    read (:class:`RawPrefetch`), or None to do that here.
    ``run``: the engine's tile, overlap, device, precision."""
    import torch

    from ..imageio.camera_raw import check_raw_reserve, read_raw
    from ..imageio.raw_develop import develop
    from .tiling import job_bytes, resolve_device, restore
    from ..imageio.images import TOOL_TAG, write_image
    from ..imageio.metadata import for_output, raw_metadata

    def reserve(height: int, width: int, channels: int) -> int:  # develop and write, checked from the header
        check_output_size(output, width, height)
        # beyond the engine's job: LibRaw's own buffers (the raw data, its colour indices, the two
        # half-size developments that measure its matrix), the float mosaic and its white-balanced
        # copy, the oriented result and the writer's 16-bit copy and row segments. 32 bytes a pixel
        # makes the reservation match the peak measured on the 9-MP CinemaDNG to bilinear PNG
        # (453 MB above the process's own; it reserved 310 MB with the former 16) (issue 51, round 3)
        return height * width * RAW_DEVELOP_BYTES_PER_PIXEL + job_bytes(
            restorer, height, width, 1, tile=run.get("tile", 0), overlap=run.get("overlap"),
            device=resolve_device(run.get("device", "auto")))

    if ahead is None:
        frame = read_raw(source, reserve=reserve)
    else:  # decoded ahead (RawPrefetch): what the development still needs, checked as read_raw would
        frame = ahead.frame
        check_raw_reserve(frame, source, reserve)
    if pattern is not None and pattern != frame.pattern:
        _say(notice, f"{source}: --pattern {pattern} ignored, the file's colour filter is {frame.pattern}")
    record = ahead.metadata if ahead is not None else raw_metadata(str(source))
    chosen = restorer
    restorer = raw_denoiser(restorer, frame, wb, denoise, lambda message: _say(notice, f"{source}: {message}"),
                            fit=ahead.noise_fit if ahead is not None else None)
    denoised = {"method": restorer.name} if restorer is not chosen else {}

    def demosaic(mosaic: Any, bayer: str) -> Any:
        if expect is not None:
            expect(mosaic.shape[0] * mosaic.shape[1] / 1e6)
        return restore(restorer, torch.from_numpy(mosaic)[None], bayer, progress=progress, notice=notice,
                       **run).numpy()

    if Path(output).suffix.lower() == ".dng":  # a linear DNG: demosaicked camera RGB for a raw editor
        return {**_linear_dng(demosaic, frame, source, output, wb=wb, overwrite=overwrite, notice=notice,
                              record=record), **denoised}

    out = develop(frame, demosaic, wb=wb, output_space=output_space, bright=bright,
                  notice=lambda message: _say(notice, f"{source}: {message}"))
    depth = bit_depth or 16
    software = software or TOOL_TAG.format(command="demosaic")
    metadata = for_output(record, out.shape[1], out.shape[0], software)
    written = write_image(output, out, depth, overwrite=overwrite, quality=quality, software=software,
                          metadata=metadata)
    return {"width": out.shape[1], "height": out.shape[0], "bit_depth": written_depth(written, depth),
            "pattern": frame.pattern, "wb": wb, "output_space": output_space, "bright": bright, **denoised}


@dataclass
class DecodedRaw:
    """A camera RAW file as :class:`RawPrefetch` hands it over: the decoded ``frame``
    (:func:`gsprestore.imageio.camera_raw.read_raw`), its sensor ``noise_fit``
    (:func:`gsprestore.physics.noise.estimate`) and its ``metadata`` record
    (:func:`gsprestore.imageio.metadata.raw_metadata`)."""

    frame: Any
    noise_fit: Any
    metadata: Any


class RawPrefetch:
    r"""The first camera RAW file of a ``demosaic`` run, decoded on a thread while the command
    imports torch and loads its network (issue 50: about a second of start-up in which LibRaw's
    decode, which releases the GIL, costs no wall time; the noise fit and the metadata record
    are read with it). :meth:`take` hands them over (:class:`DecodedRaw`) only for the same file,
    unchanged since (device, inode, size, modification time); a file that fails to decode here is
    read again in its turn, so its error is the ordinary one, in its place.

    While LibRaw decodes, the process's stderr is captured (:func:`gsprestore.imageio.camera_raw.
    read_raw`) and written back after: the caller :meth:`wait`\ s before it prints anything (its
    errors included), so no line is held back when the process ends."""

    def __init__(self, path: str | Path):
        import threading

        from ..core.fileid import file_version

        self.path = Path(path)
        self._version = file_version(self.path)
        self._decoded: DecodedRaw | None = None
        self._thread = threading.Thread(target=self._read, name="gsprestore-raw-decode", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        from ..imageio.camera_raw import read_raw
        from ..imageio.metadata import raw_metadata
        from ..physics.noise import estimate

        try:
            frame = read_raw(self.path)
            self._decoded = DecodedRaw(frame, estimate(frame.mosaic), raw_metadata(str(self.path)))
        except BaseException:  # noqa: BLE001 - the ordinary read, in the file's turn, says what is wrong
            self._decoded = None

    def wait(self) -> None:
        """Block until the decode has ended (stderr is the process's own again)."""
        self._thread.join()

    def take(self, path: str | Path) -> DecodedRaw | None:
        """``path`` decoded (once), or None: another file, changed since, or not decoded."""
        from ..core.fileid import file_version

        self.wait()
        decoded, self._decoded = self._decoded, None
        if decoded is None or Path(path) != self.path or file_version(self.path) != self._version:
            return None
        return decoded


#: The noise-aware network that ``--denoise`` uses (issue 49, :mod:`gsprestore.models.noise_aware`).
DENOISER = "ugtv-lite-denoise"
#: The learned demosaickers whose job ``--denoise auto`` takes over on a noisy file (the defaults);
#: a classical method the user chose is kept, with a note.
DENOISE_REPLACES = ("ugtv-lite", "ugtv", DENOISER)
#: ``--denoise auto`` denoises when the measured noise deviation at the frame's median level is
#: above this fraction of that level (a signal-to-noise ratio under 20, 26 dB): a photo whose
#: mid-tones show grain once brightened. Base-ISO daylight frames measure 1-2 %.
NOISY_RELATIVE_STD = 0.05
#: The exposure the denoiser brings a frame to: its 99th percentile (white-balanced) to white, as
#: LibRaw's auto-brightness does, between 1x and this.
MAX_DENOISE_EXPOSURE = 16.0


def raw_denoiser(restorer: "Restorer", frame: Any, wb: str, denoise: str | float,
                 notice: Notice | None = None, *, fit: Any = None) -> "Restorer":
    """The restorer that develops ``frame``: ``restorer`` itself, or with ``--denoise`` (``denoise``:
    auto / on / a FACTOR on the measured variance; off) the noise-aware :data:`DENOISER` given the
    Poisson-Gaussian level measured on the frame's own mosaic
    (:func:`gsprestore.physics.noise.estimate`), white-balanced per channel and brought to the
    exposure the network learned at. ``auto`` denoises only a noisy frame
    (:data:`NOISY_RELATIVE_STD`) and only in place of a learned default (:data:`DENOISE_REPLACES`);
    ``notice`` is told the measurement and the choice; ``fit``: the frame's noise already
    measured (:class:`RawPrefetch`), else measured here."""
    import numpy as np

    from ..core.errors import WeightsError
    from ..imageio.raw_develop import wb_gains
    from ..methods.registry import get_restorer
    from ..physics.noise import estimate
    from ..physics.sampling import CHANNEL

    if denoise == "off":
        return restorer
    fit = estimate(frame.mosaic) if fit is None else fit
    level = float(np.median(frame.mosaic[::2, ::2]))
    relative = fit.std(level) / max(level, 1e-6)
    measured = (f"sensor noise {100 * relative:.1f}% of the median level (variance {fit.a:.2g} x + {fit.b:.2g})")
    if denoise == "auto" and relative <= NOISY_RELATIVE_STD:
        return restorer
    if denoise == "auto" and restorer.name not in DENOISE_REPLACES:
        _say(notice, f"{measured}: noisy; {restorer.name} does not denoise (--denoise on uses {DENOISER})")
        return restorer
    strength = 1.0 if denoise in ("auto", "on") else float(denoise)
    gains = wb_gains(frame, wb)
    top = max(float(np.quantile(frame.mosaic[i::4, j::4], 0.99)) * float(gains[CHANNEL[c]])
              for (i, j), c in zip(((0, 0), (0, 1), (1, 0), (1, 1)), frame.pattern))
    exposure = float(np.clip(1.0 / max(top, 1e-6), 1.0, MAX_DENOISE_EXPOSURE))
    noise = [[float(g) * fit.a * strength, float(g) ** 2 * fit.b * strength] for g in gains]
    try:
        den = get_restorer(DENOISER, "demosaic", noise=noise, linear=True, exposure=exposure)
    except WeightsError as exc:
        _say(notice, f"{measured}: noisy, but {DENOISER} is not available ({exc.reason}); not denoised")
        return restorer
    how = "" if strength == 1.0 else f" at {strength:g}x the measured variance"
    _say(notice, f"{measured}: denoised by {DENOISER}{how} (--denoise off keeps the noise)")
    return den


def _linear_dng(demosaic: Callable[[Any, str], Any], frame: Any, source: str | Path, output: str | Path, *,
                wb: str, overwrite: bool, notice: Notice | None, record: Any) -> dict:
    """:func:`develop_raw_file` to a ``.dng`` (``demosaic``: its restorer through the engine): the
    demosaicked linear camera RGB as shot (:func:`gsprestore.imageio.raw_develop.linear_camera_rgb`),
    written as a LinearRaw DNG with the camera's matrix, white balance and record
    (:func:`gsprestore.imageio.dng.write_linear_dng`; ``record``: the file's
    :func:`gsprestore.imageio.metadata.raw_metadata`)."""
    from ..imageio.raw_develop import linear_camera_rgb
    from ..imageio.dng import write_linear_dng

    rgb, gains = linear_camera_rgb(frame, demosaic, wb, notice=lambda message: _say(notice, f"{source}: {message}"))
    write_linear_dng(output, rgb, rgb_cam=frame.rgb_cam, gains=gains, flip=frame.flip, overwrite=overwrite,
                     metadata=record, camera=frame.camera)
    return {"width": rgb.shape[1], "height": rgb.shape[0], "bit_depth": 16, "pattern": frame.pattern, "wb": wb,
            "output_space": "linear camera RGB (DNG)"}


def restore_chart(restorer: "Restorer", pattern: str = "RGGB", *,
                  device: "str | torch.device" = "auto") -> tuple["torch.Tensor", float, "torch.Tensor"]:
    """Demosaic the bundled test chart's ``pattern`` mosaic: ``(restored (H, W, 3), PSNR in dB of
    its 8-bit quantisation against the chart, the mosaic)``. Pass the mosaic's restorers to
    :func:`restore_chart_mosaic` to score another method on the same mosaic."""
    from ..imageio.sample_chart import load_chart
    from ..physics.sampling import mosaic

    raw = mosaic(_tensor(load_chart()), pattern)
    out, score = restore_chart_mosaic(restorer, raw, pattern, device=device)
    return out, score, raw


def restore_chart_mosaic(restorer: "Restorer", raw: "torch.Tensor", pattern: str, *,
                         device: "str | torch.device" = "auto") -> tuple["torch.Tensor", float]:
    """Demosaic the chart mosaic ``raw`` with ``restorer``: ``(restored (H, W, 3), 8-bit PSNR vs the chart)``."""
    from ..imageio.sample_chart import load_chart
    from .tiling import restore
    from ..metrics import psnr, quantize

    gt = _tensor(load_chart())
    out = restore(restorer, raw, pattern, device=device)
    return out, float(psnr(quantize(out.permute(2, 0, 1)[None], 8), gt[None])[0])


def mosaic_file(source: str | Path, output: str | Path, pattern: str = "RGGB", *, bit_depth: int | None = None,
                overwrite: bool = False, notice: Notice | None = None) -> dict:
    """Write the single-channel Bayer ``pattern`` mosaic of the RGB image file ``source`` (of the
    upright picture, at the input's bit depth unless ``bit_depth``); a ``.dng`` ``output`` is a
    camera RAW file (linearised, 14-bit). Alpha and the ICC profile (the mosaic's colours are taken
    as sRGB) are dropped, each with a notice."""
    from ..core.errors import GspError
    from ..imageio.images import TOOL_TAG, apply_orientation, frames_note, read_image, write_image
    from ..imageio.metadata import for_output
    from ..physics.sampling import check_pattern, mosaic_array

    source, output = Path(source), Path(output)
    pattern = check_pattern(pattern)
    dng = output.suffix.lower() == ".dng"

    def reserve(height: int, width: int, channels: int) -> int:  # checked from the header, before decoding
        if not dng:
            check_output_size(output, width, height)
        # an upright copy (when turned), then the float mosaic and its written copy; a DNG's float64
        # camera-space image and its sRGB-decoding temporaries
        return height * width * (12 + (120 if dng else 4 + 2))

    img = read_image(source, reserve=reserve)
    for note in ([frames_note(img)] if frames_note(img) else []) + img.meta.get("notes", []):
        _say(notice, f"{source}: {note}")
    if img.channels != 3:
        raise GspError(f"has {img.channels} colour channel(s); mosaic needs an RGB image", source)
    if img.alpha is not None:
        _say(notice, f"{source}: alpha channel not kept in the mosaic")
    if img.icc_profile:  # a single-channel mosaic holds no colour space: demosaicking it gives sRGB
        from ..imageio.images import icc_name

        name = icc_name(img.icc_profile)
        _say(notice, f"{source}: ICC profile{f' ({name})' if name else ''} not kept in the mosaic; its colours "
                     "are taken as sRGB")
    # the mosaic of the upright picture: its sensor order is the display order
    upright = apply_orientation(img.array, img.meta.get("orientation", 1))
    if dng:
        from ..imageio.raw_develop import srgb_decode
        from ..imageio.dng import DNG_MIN_SIDE, mosaic_for_dng, write_dng

        if min(upright.shape[:2]) < DNG_MIN_SIDE:
            raise GspError(f"{upright.shape[1]}x{upright.shape[0]} is too small for a DNG: LibRaw (and so "
                           f"`gsprestore demosaic`) opens camera files of at least {DNG_MIN_SIDE}x{DNG_MIN_SIDE} "
                           "pixels; write .png or .tif", source)

        write_dng(output, mosaic_for_dng(srgb_decode(upright), pattern), pattern, overwrite=overwrite,
                  metadata=img.meta.get("metadata"))
        return {"width": upright.shape[1], "height": upright.shape[0], "bit_depth": 14, "pattern": pattern}
    raw = mosaic_array(upright, pattern)  # numpy: `gsprestore mosaic` never imports torch
    depth = bit_depth or img.bit_depth
    software = TOOL_TAG.format(command="mosaic")
    write_image(output, raw, depth, overwrite=overwrite, software=software,
                metadata=for_output(img.meta.get("metadata"), upright.shape[1], upright.shape[0], software,
                                    source=(img.width, img.height), orientation=img.meta.get("orientation", 1)))
    return {"width": img.width, "height": img.height,
            "bit_depth": min(depth, 16) if output.suffix.lower() == ".png" else depth, "pattern": pattern}


def header_pixels(path: str | Path) -> int | None:
    """Width x height from the file's header, without decoding the pixels (Pillow's lazy open,
    tifffile's first page, LibRaw's header for a camera RAW file): what a batch's time estimate
    needs. None when the header cannot be read (the file then fails when it is restored)."""
    path = Path(path)
    try:
        import os
        import stat

        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO or a device is never opened here
            return None
        if path.suffix.lower() in (".tif", ".tiff"):
            import tifffile

            with tifffile.TiffFile(path) as tf:
                shape = tf.pages[0].shape
                return int(shape[0]) * int(shape[1])
        from ..imageio.camera_raw import is_camera_raw
        from ..imageio.openers import libraw_open

        if is_camera_raw(path):
            with libraw_open(path) as raw:
                return int(raw.sizes.width) * int(raw.sizes.height)
        from ..imageio.openers import pillow; PILImage = pillow()  # noqa: E702

        with PILImage.open(path) as im:
            return int(im.width) * int(im.height)
    except Exception:  # noqa: BLE001 - any unreadable header: no estimate for this file
        return None
