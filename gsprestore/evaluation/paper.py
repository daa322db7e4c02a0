"""The paper's reference numbers (Do et al., NeurIPS 2024, Tables 1-3): one source for
``gsprestore benchmark`` (its ``paper`` columns) and ``benchmarks/make_results.py``
(``docs/results.md``).

Dataset-MSE PSNR in dB and SSIM (None = not reported), typed in from the paper's Tables 1-3
(paper/graph-smoothness-unrolling-neurips2024.tex, tables t1, t2, t3), as reproduced in
docs/protocol.md. Each row of Tables 1 and 3: (label in the paper, our method or None when
gsprestore has no such method, parameter count or None for "-", {dataset: (PSNR, SSIM)}); Table 2
rows: (label, our method or None, PSNR for each of :data:`NOISE_SIGMAS`).
"""

from __future__ import annotations

from typing import Any
from ..physics.tasks import is_mosaic

CITATION = ("Do et al., Interpretable Lightweight Transformer via Unrolling of Learned Graph Smoothness Priors, "
            "NeurIPS 2024")

PAPER_TABLE1 = [  # demosaicking, RGGB, RGB channels
    ("Bilinear", "bilinear", None, {"mcm": (29.71, 0.9304), "kodak": (28.22, 0.8898), "urban100": (24.18, 0.8727)}),
    ("RST-B (RSTCANet-B)", None, 931763, {"mcm": (34.85, 0.9543), "kodak": (38.75, 0.9857),
                                          "urban100": (32.82, 0.973)}),
    ("RST-S (RSTCANet-S)", None, 3162211, {"mcm": (35.84, 0.961), "kodak": (39.81, 0.9876),
                                           "urban100": (33.87, 0.9776)}),
    ("Menon 2007", "menon", None, {"mcm": (32.68, 0.9305), "kodak": (38.00, 0.9819), "urban100": (31.87, 0.966)}),
    ("Malvar 2004", "malvar", None, {"mcm": (32.79, 0.9357), "kodak": (34.17, 0.9684), "urban100": (29.00, 0.9482)}),
    ("iGLR", "iglr", None, {"mcm": (29.39, 0.8954), "kodak": (27.50, 0.8487), "urban100": (23.13, 0.8406)}),
    ("iGTV", "igtv", None, {"mcm": (30.43, 0.8902), "kodak": (28.66, 0.8422), "urban100": (24.91, 0.8114)}),
    ("uGLR", "uglr", 323410, {"mcm": (36.09, 0.9650), "kodak": (37.88, 0.9821), "urban100": (33.60, 0.9772)}),
    ("uGTV", "ugtv", 323435, {"mcm": (36.59, 0.9665), "kodak": (39.11, 0.9855), "urban100": (34.01, 0.9792)}),
]
NOISE_SIGMAS = (10.0, 20.0, 30.0, 50.0)
PAPER_TABLE2 = [  # demosaicking on McM, Gaussian noise sigma/255 on the input, PSNR for sigma = 10, 20, 30, 50
    ("RST-B (RSTCANet-B)", None, (28.01, 22.70, 19.34, 15.03)),
    ("uGLR", "uglr", (28.24, 22.84, 19.49, 15.20)),
    ("uGTV", "ugtv", (28.31, 22.89, 19.56, 15.38)),
]
PAPER_TABLE3 = [  # 2x interpolation, LR = HR[0::2, 0::2], Y channel
    ("Bicubic (OpenCV INTER_CUBIC)", "bicubic-halfpixel", None,
     {"mcm": (29.01, 0.8922), "kodak": (26.75, 0.8299), "urban100": (22.95, 0.7911)}),
    ("MAIN", None, 10942977, {"mcm": (32.72, 0.822), "kodak": (28.23, 0.728), "urban100": (25.46, 0.806)}),
    ("SwinIR-lightweight", None, 904744, {"mcm": (32.24, 0.9354), "kodak": (28.62, 0.8794),
                                          "urban100": (25.08, 0.8553)}),
    ("iGLR", "iglr", None, {"mcm": (28.53, 0.8537), "kodak": (26.71, 0.8005), "urban100": (22.87, 0.7549)}),
    ("iGTV", "igtv", None, {"mcm": (30.41, 0.887), "kodak": (28.05, 0.832), "urban100": (24.26, 0.7855)}),
    ("uGLR", "uglr", 319090, {"mcm": (33.31, 0.9431), "kodak": (29.10, 0.8870), "urban100": (25.94, 0.8777)}),
    ("uGTV", "ugtv", 319115, {"mcm": (33.36, 0.9445), "kodak": (29.08, 0.8888), "urban100": (26.12, 0.8801)}),
]
PAPER_TABLES = {"demosaic": PAPER_TABLE1, "upscale2x": PAPER_TABLE3}
TABLE_NAMES = {"demosaic": "Table 1", "upscale2x": "Table 3", "noise": "Table 2"}


def reference(task: str, dataset: str, method: str, noise_sigma: float = 0.0,
              pattern: str | None = "RGGB") -> dict[str, Any] | None:
    """The paper's numbers for our ``method`` (its base name: ``ugtv@run/model.pt`` is ``ugtv``) on
    a registered ``dataset`` under the paper's conditions, or None where the paper has none:
    ``{"table", "label", "psnr", "ssim"}`` (``ssim`` None for the noise table). Demosaicking
    numbers are the paper's RGGB ones (None for another ``pattern``); noisy ones only Table 2's
    McM demosaicking at sigma 10 / 20 / 30 / 50."""
    base = method.split("@", 1)[0].lower()
    if is_mosaic(task) and pattern not in (None, "RGGB"):
        return None
    if noise_sigma:
        if not is_mosaic(task) or dataset != "mcm" or float(noise_sigma) not in NOISE_SIGMAS:
            return None
        for label, ours, values in PAPER_TABLE2:
            if ours == base:
                return {"table": TABLE_NAMES["noise"], "label": label,
                        "psnr": values[NOISE_SIGMAS.index(float(noise_sigma))], "ssim": None}
        return None
    for label, ours, _params, values in PAPER_TABLES.get(task, []):
        if ours == base and dataset in values:
            psnr, ssim = values[dataset]
            return {"table": TABLE_NAMES[task], "label": label, "psnr": psnr, "ssim": ssim}
    return None
