"""EXIF and XMP from inputs to outputs (PNG, TIFF, JPEG, WebP), and a camera RAW file's own
metadata into its developed output.

* :func:`read_metadata` takes a file's EXIF (IFD0's descriptive tags, the Exif and GPS sub-IFDs)
  and XMP packet through Pillow (a PNG's ``eXIf`` / ``iTXt`` chunks from :mod:`gsprestore.imageio.png`),
  never the pixel layout (sizes, strips, compression) nor a thumbnail (it would show the old picture).
  A file whose metadata Pillow cannot parse gives none: metadata never makes a good image fail.
* :func:`raw_metadata` reads a TIFF-based camera RAW file's (DNG, CR2, NEF, ARW, PEF, ...) make,
  model, dates and exposure (IFD0, TIFF/EP exposure tags in IFD0, the Exif sub-IFD) through tifffile;
  other containers (CR3, RAF, ...) give the EXIF of their embedded JPEG preview (rawpy).
* :func:`for_output` is what an output carries: Orientation 1 (the pixels were turned upright),
  the output's pixel size (``PixelXDimension`` / ``PixelYDimension``, and the XMP's), the
  ``Software`` tag of the command that wrote it, and the tags that depend on the pixel grid
  (``SubjectArea`` / ``SubjectLocation`` coordinates, focal-plane and X/Y resolutions) turned and
  scaled like the pixels (:func:`regrid`); :func:`for_pixels` makes the XMP's Photoshop colour mode
  and profile name agree with the pixels and profile written.
* :func:`exif_bytes` (JPEG / WebP / a PNG's ``eXIf``) and :func:`tiff_ifds` (TIFF: IFD0 entries and
  the Exif / GPS sub-IFDs) serialise it.
"""

from __future__ import annotations

import io
import re
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

EXIF_IFD, GPS_IFD, INTEROP_IFD = 0x8769, 0x8825, 0xA005
ORIENTATION, SOFTWARE, DESCRIPTION = 0x0112, 0x0131, 0x010E
PIXEL_X, PIXEL_Y = 0xA002, 0xA003
#: Exif tags holding pixel coordinates of the stored picture (SubjectArea, SubjectLocation), and the
#: focal plane's pixels per unit (X, Y): true of an output only once turned and scaled like its pixels.
SUBJECT_AREA, SUBJECT_LOCATION = 0x9214, 0xA214
FOCAL_PLANE_X, FOCAL_PLANE_Y = 0xA20E, 0xA20F
X_RESOLUTION, Y_RESOLUTION = 0x011A, 0x011B
#: IFD0 tags that describe the picture, not the file's layout: the ones carried to outputs.
IFD0_KEEP = frozenset({
    0x010E,  # ImageDescription
    0x010F,  # Make
    0x0110,  # Model
    0x0112,  # Orientation
    0x011A, 0x011B, 0x0128,  # X/YResolution, ResolutionUnit
    0x0131,  # Software
    0x0132,  # DateTime
    0x013B,  # Artist
    0x8298,  # Copyright
    0x9C9B, 0x9C9C, 0x9C9D, 0x9C9E, 0x9C9F,  # Windows XP title, comment, author, keywords, subject
})
#: TIFF/EP puts these in IFD0 (a DNG may too); in an output they belong in the Exif sub-IFD.
TIFF_EP_EXPOSURE = frozenset({0x829A, 0x829D, 0x8822, 0x8827, 0x9003, 0x9004, 0x9201, 0x9202, 0x9204, 0x9207,
                              0x9209, 0x920A, 0xA434})


@dataclass
class Metadata:
    """What an image file says about its picture: ``ifd0`` (tags of :data:`IFD0_KEEP`), ``exif``
    (the Exif sub-IFD), ``gps`` (the GPS sub-IFD), ``xmp`` (the XMP packet, bytes)."""

    ifd0: dict[int, Any] = field(default_factory=dict)
    exif: dict[int, Any] = field(default_factory=dict)
    gps: dict[int, Any] = field(default_factory=dict)
    xmp: bytes | None = None

    def __bool__(self) -> bool:
        return bool(self.ifd0 or self.exif or self.gps or self.xmp)


def orientation_value(value: Any) -> int:
    """An EXIF Orientation value as 1..8: anything else (absent, 0, 9, a damaged or odd-typed
    value) is 1, as a TIFF's out-of-range tag is (:func:`gsprestore.imageio.tiff.read_ifd`)."""
    if isinstance(value, (tuple, list)) and value:
        value = value[0]
    try:
        value = int(value)
    except (TypeError, ValueError, OverflowError):
        return 1
    return value if 1 <= value <= 8 else 1


def from_exif(exif: Any, xmp: bytes | None = None) -> Metadata:
    """:class:`Metadata` of a Pillow ``Image.Exif`` (its thumbnail IFD and interop pointer left out)."""
    meta = Metadata(xmp=xmp or None)
    for tag, value in exif.items():
        if tag in IFD0_KEEP:
            meta.ifd0[tag] = value
        elif tag in TIFF_EP_EXPOSURE:
            meta.exif[tag] = value
    for tag, into in ((EXIF_IFD, meta.exif), (GPS_IFD, meta.gps)):
        try:
            sub = exif.get_ifd(tag)
        except Exception:  # noqa: BLE001 - a damaged sub-IFD: left out
            sub = {}
        into.update({k: v for k, v in sub.items() if k != INTEROP_IFD and not isinstance(v, dict)})
    return meta


@contextmanager
def quiet() -> Iterator[list[str]]:
    """Collect the warnings raised inside (Pillow's ``Corrupt EXIF data``...) as one-line
    messages in the list it yields, instead of Python's two lines on stderr."""
    caught: list[str] = []
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        yield caught
    for w in records:
        text = " ".join(str(w.message).split())
        if text and text not in caught:
            caught.append(text)


def read_metadata(data: bytes, fmt: str, *, png: Any = None) -> Metadata:
    """The EXIF / XMP of the file whose bytes are ``data`` (``fmt``: png, tiff, jpeg, webp; ``png``:
    a PNG's :class:`gsprestore.imageio.png.PngInfo`). Never raises: what cannot be parsed is left out."""
    from .openers import pillow; PILImage = pillow()  # noqa: E702

    try:
        if fmt == "png":
            exif = PILImage.Exif()
            if png is not None and png.exif:
                exif.load(png.exif if png.exif.startswith(b"Exif\0\0") else b"Exif\0\0" + png.exif)
            return from_exif(exif, None if png is None else png.xmp)
        with PILImage.open(io.BytesIO(data)) as im:
            exif = im.getexif()
            xmp = im.info.get("xmp")
            if fmt == "tiff":
                xmp = im.tag_v2.get(700) if hasattr(im, "tag_v2") else None
            if isinstance(xmp, str):
                xmp = xmp.encode("utf-8")
            return from_exif(exif, xmp if isinstance(xmp, (bytes, bytearray)) else None)
    except Exception:  # noqa: BLE001 - metadata is never a reason to fail a good image
        return Metadata()


def raw_metadata(path: str) -> Metadata:
    """Make, model, dates and exposure of a TIFF-based camera RAW file (DNG, CR2, NEF, ARW, PEF...)
    through tifffile: IFD0's descriptive tags, TIFF/EP exposure tags in IFD0 and the Exif sub-IFD.
    Other RAW containers (CR3, RAF, ...) give their JPEG preview's (:func:`thumbnail_metadata`)."""
    from PIL import ExifTags
    from PIL.TiffImagePlugin import IFDRational

    names = {name: code for code, name in ExifTags.TAGS.items()}

    def value(v: Any, dtype: int | None = None) -> Any:
        if dtype in (5, 10) and isinstance(v, tuple) and len(v) == 2:
            return IFDRational(int(v[0]), int(v[1]) or 1)
        if isinstance(v, tuple) and len(v) == 2 and dtype is None and all(isinstance(x, int) for x in v):
            return IFDRational(v[0], v[1] or 1)  # tifffile gives rationals of the Exif IFD as (num, den)
        return v

    meta = Metadata()
    try:
        import tifffile

        with tifffile.TiffFile(path) as tf:
            tags = tf.pages[0].tags
            for tag in tags.values():
                if tag.code in IFD0_KEEP and tag.code not in (ORIENTATION, 0x011A, 0x011B, 0x0128):
                    meta.ifd0[tag.code] = value(tag.value, int(tag.dtype))
                elif tag.code in TIFF_EP_EXPOSURE:
                    meta.exif[tag.code] = value(tag.value, int(tag.dtype))
            exif = tags.get(EXIF_IFD)
            if exif is not None and isinstance(exif.value, dict):
                for name, v in exif.value.items():
                    code = names.get(name)
                    if code is not None and code not in (INTEROP_IFD, 0x927C) and not isinstance(v, dict):
                        meta.exif[code] = value(v)
    except Exception:  # noqa: BLE001 - not TIFF-based (CR3, RAF, ...), or damaged: the embedded preview's
        return thumbnail_metadata(path)
    return meta if meta else thumbnail_metadata(path)


def thumbnail_metadata(path: str) -> Metadata:
    """The EXIF of a camera RAW file's embedded JPEG preview (through rawpy: CR3, RAF and other
    containers tifffile does not read carry the camera's record there), its make, model, dates,
    exposure and GPS; none when the file has no JPEG preview."""
    try:
        import rawpy
        from .openers import pillow; PILImage = pillow()  # noqa: E702

        from .openers import libraw_open

        with libraw_open(path) as raw:
            thumb = raw.extract_thumb()
        if thumb.format != rawpy.ThumbFormat.JPEG:
            return Metadata()
        with quiet(), PILImage.open(io.BytesIO(bytes(thumb.data))) as im:
            found = from_exif(im.getexif())
        found.exif = {k: v for k, v in found.exif.items() if k not in (PIXEL_X, PIXEL_Y)}  # the preview's size
        return found
    except Exception:  # noqa: BLE001 - no preview (LibRaw raises for that), or a damaged one
        return Metadata()


_XMP_ORIENT = re.compile(rb'(tiff:Orientation(?:="|>))\d(["<])')
_XMP_X = re.compile(rb'(exif:PixelXDimension(?:="|>))\d+(["<])')
_XMP_Y = re.compile(rb'(exif:PixelYDimension(?:="|>))\d+(["<])')


_XMP_W = re.compile(rb'(tiff:ImageWidth(?:="|>))\d+(["<])')
_XMP_H = re.compile(rb'(tiff:ImageLength(?:="|>))\d+(["<])')
_XMP_COLOR_MODE = re.compile(rb'(photoshop:ColorMode(?:="|>))\d+(["<])')
_XMP_ICC_NAME = re.compile(rb'\s+photoshop:ICCProfile="[^"]*"|<photoshop:ICCProfile>[^<]*</photoshop:ICCProfile>\s*')


def for_output(meta: Metadata | None, width: int, height: int, software: str | None, *,
               source: tuple[int, int] | None = None, orientation: int = 1, scale: int = 1) -> Metadata:
    """What an output of ``width`` x ``height`` pixels written upright by ``software`` carries of
    the input's ``meta``: everything, with Orientation 1 and the new pixel size (EXIF and XMP),
    less an ImageDescription that describes the input's pixel layout (:func:`describes_layout`:
    tifffile's ``{"shape": [64, 80, 3]}``, ImageJ's, OME-XML), which would be wrong for the output.
    ``source`` (stored width, height), ``orientation`` and ``scale``: how the output's pixels came
    from the input's (turned upright, then scaled), to carry the tags tied to the pixel grid
    (:func:`regrid`); without ``source`` the subject's coordinates are left out (never wrong)."""
    src = meta or Metadata()
    out = Metadata(_writable(src.ifd0), _writable(src.exif), _writable(src.gps), src.xmp)
    regrid(out, source, orientation, scale)
    if DESCRIPTION in out.ifd0 and describes_layout(out.ifd0[DESCRIPTION]):
        del out.ifd0[DESCRIPTION]
    if ORIENTATION in out.ifd0:
        out.ifd0[ORIENTATION] = 1
    if software:
        out.ifd0[SOFTWARE] = software
    if out.exif:
        out.exif[PIXEL_X], out.exif[PIXEL_Y] = int(width), int(height)
    if out.xmp:
        x = _XMP_ORIENT.sub(rb"\g<1>1\g<2>", out.xmp)
        for pattern, value in ((_XMP_X, width), (_XMP_Y, height), (_XMP_W, width), (_XMP_H, height)):
            x = pattern.sub(rb"\g<1>" + str(int(value)).encode() + rb"\g<2>", x)
        out.xmp = x
    return out


def _point(x: int, y: int, w: int, h: int, orientation: int) -> tuple[int, int]:
    """Pixel (x, y) of a stored ``w`` x ``h`` picture in the picture turned upright by ``orientation``
    (:func:`gsprestore.imageio.images.apply_orientation`)."""
    return {1: (x, y), 2: (w - 1 - x, y), 3: (w - 1 - x, h - 1 - y), 4: (x, h - 1 - y), 5: (y, x),
            6: (h - 1 - y, x), 7: (h - 1 - y, w - 1 - x), 8: (y, w - 1 - x)}[orientation]


def _coordinates(value: Any, source: tuple[int, int], orientation: int, scale: int) -> tuple[int, ...] | None:
    """A SubjectArea / SubjectLocation value (x, y[, diameter | width, height]) of the stored picture
    in the output's pixels, or None when it is not a valid one (it is then left out)."""
    v = value if isinstance(value, (tuple, list)) else (value,)
    if len(v) not in (2, 3, 4) or not all(isinstance(n, int) and n >= 0 for n in v):
        return None
    w, h = source
    if v[0] >= w or v[1] >= h:
        return None
    x, y = _point(v[0], v[1], w, h, orientation)
    extent = list(v[2:])
    if len(extent) == 2 and orientation >= 5:  # a rectangle's width and height swap with the axes
        extent.reverse()
    out = (x * scale, y * scale, *(n * scale for n in extent))
    return out if max(out) < 65536 else None


def _times(value: Any, scale: int) -> Any:
    """A rational ``value`` times ``scale`` (anything else unchanged)."""
    if scale == 1 or not hasattr(value, "numerator"):
        return value
    from PIL.TiffImagePlugin import IFDRational

    return IFDRational(int(value.numerator) * scale, int(value.denominator))


def regrid(meta: Metadata, source: tuple[int, int] | None, orientation: int = 1, scale: int = 1) -> None:
    """Make ``meta``'s tags tied to the pixel grid true of an output whose pixels are the stored
    ``source`` (width, height) picture turned upright by ``orientation``, then scaled ``scale`` x:
    SubjectArea / SubjectLocation moved with the pixels (left out without ``source``), the
    focal plane's pixels per unit scaled, X/Y resolutions (and the focal plane's) swapped where the
    axes swap (orientation 5-8)."""
    orientation = orientation_value(orientation)
    for tag in (SUBJECT_AREA, SUBJECT_LOCATION):
        if tag in meta.exif:
            moved = None if source is None else _coordinates(meta.exif[tag], source, orientation, scale)
            if moved is None:
                del meta.exif[tag]
            else:
                meta.exif[tag] = moved
    for tags, (tx, ty), factor in ((meta.exif, (FOCAL_PLANE_X, FOCAL_PLANE_Y), scale),
                                   (meta.ifd0, (X_RESOLUTION, Y_RESOLUTION), 1)):
        got = {tag: _times(tags[tag], factor) for tag in (tx, ty) if tag in tags}
        if orientation >= 5:
            got = {ty if tag == tx else tx: value for tag, value in got.items()}
        for tag in (tx, ty):
            tags.pop(tag, None)
        tags.update(got)


def for_pixels(meta: Metadata, channels: int, icc_left_out: bool) -> Metadata:
    """``meta`` with its XMP's Photoshop colour mode set to the pixels written (``channels`` 1: gray,
    3: RGB; a CMYK JPEG's XMP says CMYK) and, when the input's ICC profile was not written
    (``icc_left_out``), without the XMP's name of that profile."""
    if not meta.xmp:
        return meta
    x = _XMP_COLOR_MODE.sub(rb"\g<1>" + (b"1" if channels == 1 else b"3") + rb"\g<2>", bytes(meta.xmp))
    if icc_left_out:
        x = _XMP_ICC_NAME.sub(b"", x)
    return Metadata(meta.ifd0, meta.exif, meta.gps, x)


def describes_layout(text: Any) -> bool:
    """True when an ImageDescription is a machine's description of the file's pixel array (its
    shape, planes, axes), not a caption: tifffile's JSON (``{"shape": [64, 80, 3]}``), ImageJ's
    ``ImageJ=...`` lines, an OME-XML document. A caption a person wrote is kept in outputs."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    s = str(text).strip()
    if s.startswith("{"):
        from ..core.jsontext import loads

        try:
            parsed = loads(s)
        except ValueError:
            return False
        return isinstance(parsed, dict) and any(k in parsed for k in ("shape", "axes", "dtype"))
    return s.startswith(("ImageJ=", "<?xml", "<OME")) and ("ImageJ=" in s or "<OME" in s or "/OME/" in s)


def _writable(tags: dict[int, Any]) -> dict[int, Any]:
    """The tags of ``tags`` that a TIFF directory can hold (a damaged or exotic value is left out,
    never a reason to fail the image)."""
    from PIL.TiffImagePlugin import ImageFileDirectory_v2

    keep = {}
    for tag, value in tags.items():
        try:
            ifd = ImageFileDirectory_v2(ifh=b"II*\0\0\0\0\0")
            ifd[tag] = value
            ifd.tobytes(8)
        except Exception:  # noqa: BLE001 - Pillow raises many types for values it cannot write
            continue
        keep[tag] = value
    return keep


def with_software(meta: Metadata | None, software: str | None) -> Metadata:
    """``meta`` (none: empty) with its ``Software`` tag set to ``software`` (when given)."""
    meta = meta if meta is not None else Metadata()
    return Metadata({**meta.ifd0, SOFTWARE: software}, meta.exif, meta.gps, meta.xmp) if software else meta


def to_exif(meta: Metadata) -> Any:
    """A Pillow ``Image.Exif`` holding ``meta``'s tags (XMP apart)."""
    from PIL import Image as PILImage

    exif = PILImage.Exif()
    for tag, value in meta.ifd0.items():
        exif[tag] = value
    if meta.exif:
        exif[EXIF_IFD] = dict(meta.exif)
    if meta.gps:
        exif[GPS_IFD] = dict(meta.gps)
    return exif


#: The most EXIF a JPEG can hold (one APP1 segment).
JPEG_EXIF_LIMIT = 65533 - 8


def exif_bytes(meta: Metadata, limit: int | None = None) -> bytes | None:
    """The EXIF block (``Exif\\0\\0`` + TIFF structure) of ``meta``, or None without tags. Over
    ``limit`` bytes (a JPEG's APP1 segment) the maker note goes first, then the sub-IFDs."""
    if not (meta.ifd0 or meta.exif or meta.gps):
        return None
    data = to_exif(meta).tobytes()
    if limit is not None and len(data) > limit:
        smaller = Metadata(meta.ifd0, {k: v for k, v in meta.exif.items() if k != 0x927C}, meta.gps)
        data = to_exif(smaller).tobytes()
        if len(data) > limit:
            data = to_exif(Metadata(meta.ifd0)).tobytes()
    return data if limit is None or len(data) <= limit else None


def tiff_ifds(meta: Metadata) -> tuple[dict[int, Any], dict[int, Callable[[int], bytes]]]:
    """``(IFD0 tags, sub-IFDs)`` for a little-endian TIFF writer: the sub-IFDs (Exif, GPS) as
    functions of the file offset they will sit at, returning their bytes (entries and values)."""
    from PIL.TiffImagePlugin import ImageFileDirectory_v2

    def serialiser(tags: dict[int, Any]) -> Callable[[int], bytes]:
        def at(offset: int) -> bytes:
            ifd = ImageFileDirectory_v2(ifh=b"II*\0\0\0\0\0")
            for tag, value in sorted(tags.items()):
                ifd[tag] = value
            return ifd.tobytes(offset)

        return at

    subs = {tag: serialiser(tags) for tag, tags in ((EXIF_IFD, meta.exif), (GPS_IFD, meta.gps)) if tags}
    return dict(meta.ifd0), subs
