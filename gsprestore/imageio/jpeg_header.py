"""What a JPEG's header declares, read without decoding, and whether its data can cover it.

libjpeg (through Pillow) reads a JPEG whose entropy-coded data stops early at an end marker as a
picture filled with grey below the cut, and says so only in a warning nobody sees; a 2 KB file
declaring 30000x30000 pixels has the decoder allocate gigabytes before it fails.
:func:`checked_data` refuses the first kind of file cheaply from its size and makes the second
fail to decode (:class:`ValueError` with a short reason; :mod:`gsprestore.imageio.images` adds the file name).
"""

from __future__ import annotations

import re


def jpeg_frame(data: bytes) -> tuple[int, int, int, int, int | None] | None:
    """What a JPEG's header says, read without decoding: ``(width, height, components, frame
    marker, end of the first scan)``; the end is the offset of the marker that closes the first
    scan's entropy-coded data (None when the file ends inside it). None where the markers do not
    lead to a frame and a scan (Pillow then says what is wrong)."""
    pos, n = 2, len(data)
    frame = None
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            return None
        while pos < n and data[pos] == 0xFF:  # fill bytes
            pos += 1
        if pos + 3 > n:
            return None
        code = data[pos]
        pos += 1
        if code == 0xD9:
            return None
        if 0xD0 <= code <= 0xD7 or code == 0x01:
            continue
        length = int.from_bytes(data[pos : pos + 2], "big")
        if code in _SOF_MARKERS and pos + 8 <= n:
            height = int.from_bytes(data[pos + 3 : pos + 5], "big")
            width = int.from_bytes(data[pos + 5 : pos + 7], "big")
            frame = (width, height, data[pos + 7], code)
        elif code == 0xDA:
            if frame is None:
                return None
            start = pos + length
            m = _JPEG_MARKER.search(data, start)
            return (*frame, None if m is None else m.start())
        pos += length
    return None


_SOF_MARKERS = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_HUFFMAN_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7}
_JPEG_MARKER = re.compile(rb"\xff+[^\x00\xd0-\xd7\xff]")  # a marker: not stuffing (FF 00), not a restart


def checked_data(data: bytes) -> bytes:
    """A JPEG's bytes for Pillow, checked against what its header declares: a Huffman-coded file
    needs at least one bit for each 8x8 block of its declared size (every block codes at least
    its DC difference), else it is refused before anything is allocated. A sequential file whose
    single scan ends at the EOI marker is handed over without that marker (and with 8 bytes of
    slack for libjpeg's read-ahead): an image whose data run out then fails to decode as
    truncated instead of being filled with grey. Progressive and multi-scan files are read as
    they are (a cut between two of their scans is not seen)."""
    frame = jpeg_frame(data)
    if frame is None:
        return data
    width, height, _components, marker, end = frame
    if marker in _HUFFMAN_SOF:
        blocks = -(-width // 8) * -(-height // 8)
        if (len(data) - 2) * 8 < blocks:
            raise ValueError(f"truncated JPEG (the header declares {width}x{height} pixels, {blocks} blocks, but "
                             f"the file holds {len(data)} bytes: fewer than one bit per block)")
    if marker in (0xC0, 0xC1) and end is not None and data[end:].lstrip(b"\xff")[:1] == b"\xd9":
        return data[:end] + bytes(8)
    return data
