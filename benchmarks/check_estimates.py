"""Issue 50: are the time estimates ``gsprestore demosaic`` says before a long job within 2x of the
truth? For mosaics of several sizes (16-bit PNG, made here from noise: the work does not depend on
the content), run the command as a user would (a fresh process, the default method unless
``--method``), read the estimate line it prints before the job ("about T for FILE (M MP at S
s/MP, measured on this machine just now)") and the time its per-file line reports, and print
their ratio. A job the estimate puts under 30 s prints no line: its row says so, and fails the check if it
took over 30 s. Exit status 1 when any row fails.

Usage (from the repository root)::

    .venv/bin/python benchmarks/check_estimates.py --megapixels 4,12,24
    .venv/bin/python benchmarks/check_estimates.py --method ugtv --megapixels 0.5,1.5,3   # jobs over 30 s
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--megapixels", default="4,12,24")
    ap.add_argument("--method", default=None)
    a = ap.parse_args()
    from gsprestore.imageio.images import write_image

    rows = []
    with tempfile.TemporaryDirectory() as d:
        for mp in [float(v) for v in a.megapixels.split(",")]:
            side_w = int(round((mp * 1e6 * 1.5) ** 0.5)) // 2 * 2
            side_h = int(round(mp * 1e6 / side_w)) // 2 * 2
            src = Path(d) / f"mosaic-{mp:g}mp.png"
            rng = np.random.default_rng(0)
            write_image(src, rng.random((side_h, side_w, 1), dtype=np.float32), 16)
            out = Path(d) / f"out-{mp:g}.png"
            cmd = [sys.executable, "-m", "gsprestore", "demosaic", str(src), "-o", str(out)]
            if a.method:
                cmd += ["--method", a.method]
            t0 = time.perf_counter()
            run = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "COLUMNS": "400"})
            wall = time.perf_counter() - t0
            text = " ".join((run.stdout + run.stderr).split())  # lines a narrow terminal wraps, joined
            est = re.search(r"\(([\d.]+) MP at ([\d.e+-]+) s/MP", text)
            took = re.search(r"-> \S+ \S+, (?:([\d.]+) s|(\d+):(\d\d)(?::(\d\d))?)", text)
            predicted = float(est.group(1)) * float(est.group(2)) if est else None
            actual = None
            if took and took.group(1):
                actual = float(took.group(1))
            elif took:  # h:mm:ss or m:ss from a minute
                parts = [int(g) for g in took.groups()[1:] if g is not None]
                actual = float(sum(v * 60 ** (len(parts) - 1 - k) for k, v in enumerate(parts)))
            ratio = (predicted / actual) if predicted and actual else None
            rows.append((mp, side_w, side_h, predicted, actual, wall, ratio))
            print(f"{side_w}x{side_h} ({side_w * side_h / 1e6:.1f} MP): estimate "
                  f"{'none (under 30 s)' if predicted is None else f'{predicted:.1f} s'}, file took "
                  f"{'?' if actual is None else f'{actual:.1f} s'} (whole command {wall:.1f} s)"
                  + ("" if ratio is None else f": estimate / truth = {ratio:.2f}"), flush=True)
            if run.returncode:
                print(text[-2000:])
    bad = [r for r in rows if r[6] is not None and not 0.5 <= r[6] <= 2.0]
    # a job that took over 30 s without announcing it fails as a wrong estimate does
    silent = [r for r in rows if r[3] is None and r[4] is not None and r[4] > 30]
    print("within 2x:", "all" if not bad else f"no ({len(bad)} of {len(rows)} outside)",
          "| over 30 s unannounced:", len(silent))
    sys.exit(1 if bad or silent else 0)


if __name__ == "__main__":
    main()
