"""``gsprestore demo``: the bundled test chart's Bayer mosaic demosaicked by the best method by
recorded quality (a learned model when its weights beat the classical methods; the classical
default, with a note, when they are not available), written as a PNG tagged as the demo's, scored
against the chart and timed, beside the classical method on the same mosaic
(:meth:`ChartDemo.reference`). Nothing heavy is imported at module level."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

#: Where the demo writes by default, and the tag (PNG ``Software``) that marks a file as its output.
DEMO_OUTPUT = "gsprestore-demo.png"
DEMO_TAG = "gsprestore demo"


def _stderr_note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr)


@dataclass
class ChartDemo:
    """What :func:`run_demo` did: the ``method`` that ran on ``device`` with ``pattern``, its PSNR
    (``score``, dB, 8-bit output vs the chart) and ``seconds``, the ``written`` file and the chart's
    ``width`` x ``height``; ``mosaic``, the input, for :meth:`reference`."""

    method: str
    device: Any
    pattern: str
    score: float
    seconds: float
    written: Any
    width: int
    height: int
    mosaic: Any

    def reference(self) -> tuple[str, float, float] | None:
        """``(method, PSNR, seconds)`` of the classical default on the same mosaic, so the figure can
        be read; None when the demo ran that method."""
        import time

        from ..methods.defaults import CLASSICAL_DEFAULT
        from ..methods.registry import get_restorer
        from .file_restore import restore_chart_mosaic

        reference = CLASSICAL_DEFAULT["demosaic"]
        if self.method == reference:
            return None
        t0 = time.perf_counter()
        _, score = restore_chart_mosaic(get_restorer(reference, "demosaic"), self.mosaic, self.pattern, device=self.device)
        return reference, score, time.perf_counter() - t0


def run_demo(output: Any = DEMO_OUTPUT, method: str | None = None, pattern: str = "RGGB", *, device: str = "auto",
             overwrite: bool = False, notice: Callable[[str], None] | None = None) -> ChartDemo:
    """Demosaic the chart's mosaic with ``method`` (None: the best by recorded quality) and write
    ``output``: an earlier demo output is replaced, anything else only with ``overwrite``, the
    chart itself never. ``notice``: where notes go (default: ``note: ...`` on stderr)."""
    import time

    from ..core.errors import GspError, UsageError, WeightsError
    from ..core.fileid import same_file
    from ..imageio.images import read_image, write_image
    from ..imageio.sample_chart import chart_path
    from ..methods.defaults import CLASSICAL_DEFAULT, best_by_quality
    from ..methods.registry import method_spec
    from ..physics.sampling import check_pattern
    from .file_restore import load_restorer, restore_chart
    from .tiling import resolve_device

    notice = notice or _stderr_note
    pattern = check_pattern(pattern)
    dev = resolve_device(device)
    try:
        name = method_spec(method, "demosaic").name if method else best_by_quality("demosaic").method
    except WeightsError as exc:  # an unreadable manifest: said, not silent
        name = CLASSICAL_DEFAULT["demosaic"]
        notice(f"{exc}; using {name}")
    out_path = Path(output)
    if same_file(out_path, chart_path()):  # by identity, whatever the path
        raise UsageError(f"-o {output} is the bundled test chart itself; choose another -o")
    replace = overwrite
    if out_path.exists() and not overwrite:
        try:
            ours = read_image(out_path).meta.get("text", {}).get("Software") == DEMO_TAG
        except GspError:
            ours = False
        if not ours:
            raise GspError("exists and is not an earlier demo output (pass --overwrite or -o another file)", out_path)
        replace = True
    restorer = load_restorer(name, "demosaic", method_given=bool(method), fall_back=notice)
    t0 = time.perf_counter()
    out, score, raw = restore_chart(restorer, pattern, device=dev)
    took = time.perf_counter() - t0
    written = write_image(out_path, out.numpy(), 8, overwrite=replace,
                          text={"Software": DEMO_TAG, "Description": f"{restorer.name}, {pattern}"})
    h, w = out.shape[:2]
    return ChartDemo(restorer.name, dev, pattern, score, took, written, w, h, raw)
