"""Image-quality metrics of the evaluation protocol (docs/protocol.md; paper Sec. 5: "We use PSNR and
SSIM [Wang et al. 2004]"). Every function takes ``(B, C, H, W)`` float tensors in [0, 1] and
returns one value per image (a ``(B,)`` float64 tensor) unless it reduces a whole data set.

Two PSNR definitions are in use and must not be mixed up:

* **dataset-MSE PSNR** ("paper" PSNR): ``10 log10(1 / mean_i MSE_i)`` over the images ``i`` of a
  data set, on float outputs that are neither clipped nor rounded (:func:`psnr_dataset_mse`).
  This is what the paper's tables report (docs/protocol.md reproduces its baseline rows this way).
* **mean PSNR**: the usual mean over images of ``10 log10(1 / MSE_i)``, here on outputs rounded and
  clipped to 8 bits (:func:`quantize`, then :func:`psnr` and :func:`psnr_mean`), i.e. on the PNG
  a user would save. It is 1.0-1.5 dB higher than the dataset-MSE PSNR for the same outputs.

SSIM is Wang et al. 2004 (Gaussian window 11, sigma 1.5, K1 0.01, K2 0.03, population
covariances), computed per channel on the ``valid`` part of the image (no padding; the 5-pixel
rim the window cannot cover is left out, exactly like scikit-image's ``structural_similarity``
with ``gaussian_weights=True, use_sample_covariance=False``) and averaged over channels.

:func:`image_scores` applies the protocol's choices in one place: MSE/PSNR on the float output
as given, mean-PSNR on the 8-bit output, SSIM on the float output clipped to [0, 1], all in the
requested channel space (RGB, or BT.601 studio luma Y via :func:`rgb_to_y`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import Tensor

#: BT.601 "studio" luma, R, G, B in [0, 1]: Y = (16 + 65.481 R + 128.553 G + 24.966 B) / 255.
Y_OFFSET = 16.0
Y_WEIGHTS = (65.481, 128.553, 24.966)

CHANNEL_SPACES = ("rgb", "y")


def _check_pair(x: Tensor, ref: Tensor) -> None:
    if x.dim() != 4 or x.shape != ref.shape:
        raise ValueError(
            f"metrics need two (B, C, H, W) tensors of the same shape, got {tuple(x.shape)} and {tuple(ref.shape)}"
        )


def mse(x: Tensor, ref: Tensor) -> Tensor:
    """Per-image mean squared error over channels and pixels, accumulated in float64: ``(B,)``
    (over strips of rows: no float64 copy of a large image)."""
    _check_pair(x, ref)
    return _sq_sum(x, ref) / x[0].numel()


def _sq_sum(x: Tensor, ref: Tensor, prepare: Callable[[Tensor], Tensor] | None = None,
            prepare_ref: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """Per-image sum of squared differences in float64, strip by strip (``prepare`` /
    ``prepare_ref`` applied to each strip of ``x`` / ``ref`` first)."""
    total = torch.zeros(x.shape[0], dtype=torch.float64, device=x.device)
    step = _strip_rows(x.shape[-1], x.shape[1])
    for r0 in range(0, x.shape[-2], step):
        a, b = x[:, :, r0:r0 + step], ref[:, :, r0:r0 + step]
        if prepare is not None:
            a = prepare(a)
        if prepare_ref is not None:
            b = prepare_ref(b)
        d = a.double() - b.double()
        total += (d * d).sum(dim=(1, 2, 3))
    return total


def psnr_from_mse(m: Tensor | float, data_range: float = 1.0) -> Tensor:
    """``10 log10(data_range^2 / MSE)`` elementwise (``inf`` where the MSE is 0)."""
    m = torch.as_tensor(m, dtype=torch.float64)
    return 10.0 * torch.log10(data_range**2 / m)


def psnr(x: Tensor, ref: Tensor, data_range: float = 1.0) -> Tensor:
    """Per-image PSNR in dB, ``(B,)``; ``inf`` for identical images."""
    return psnr_from_mse(mse(x, ref), data_range)


def _vector(values: Iterable[float] | Tensor, who: str) -> Tensor:
    v = values if isinstance(values, Tensor) else torch.tensor(list(values), dtype=torch.float64)
    v = v.detach().to("cpu", torch.float64).flatten()
    if v.numel() == 0:
        raise ValueError(f"{who} needs at least one image")
    return v


def psnr_dataset_mse(per_image_mse: Iterable[float] | Tensor, data_range: float = 1.0) -> float:
    """The paper's PSNR of a data set: ``10 log10(data_range^2 / mean_i MSE_i)`` (docs/protocol.md)."""
    m = _vector(per_image_mse, "psnr_dataset_mse")
    return float(psnr_from_mse(m.mean(), data_range))


def psnr_mean(per_image_psnr: Iterable[float] | Tensor) -> float:
    """The usual mean over images of the per-image PSNR (feed it PSNRs of 8-bit outputs)."""
    p = _vector(per_image_psnr, "psnr_mean")
    return float(p.mean())


def quantize(x: Tensor, bit_depth: int = 8) -> Tensor:
    """Clip to [0, 1] and round to ``bit_depth`` bits (half to even, like ``io.to_integer``),
    returned as floats in [0, 1]: the values a saved PNG holds."""
    levels = float(2**bit_depth - 1)
    return torch.round(x.clamp(0.0, 1.0) * levels) / levels


def rgb_to_y(x: Tensor) -> Tensor:
    """BT.601 studio luma of RGB in [0, 1]: ``(B, 3, H, W) -> (B, 1, H, W)``, values in
    [16/255, 235/255]; ``Y = (16 + 65.481 R + 128.553 G + 24.966 B) / 255`` (docs/protocol.md, 2x task)."""
    if x.dim() != 4 or x.shape[1] != 3:
        raise ValueError(f"rgb_to_y needs a (B, 3, H, W) tensor, got {tuple(x.shape)}")
    w = torch.tensor(Y_WEIGHTS, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    return (Y_OFFSET + (x * w).sum(dim=1, keepdim=True)) / 255.0


def gaussian_window(size: int = 11, sigma: float = 1.5, *, dtype: torch.dtype = torch.float64,
                    device: torch.device | str | None = None) -> Tensor:
    """Normalised 1-D Gaussian ``exp(-t^2 / (2 sigma^2))``, ``t = -(size//2) .. size//2``."""
    t = torch.arange(size, dtype=dtype, device=device) - (size - 1) / 2.0
    g = torch.exp(-(t * t) / (2.0 * sigma * sigma))
    return g / g.sum()


def _blur_valid(x: Tensor, g: Tensor) -> Tensor:
    """Separable Gaussian filter of each channel, ``valid`` region only (no padding)."""
    c = x.shape[1]
    k = g.numel()
    x = F.conv2d(x, g.view(1, 1, k, 1).expand(c, 1, k, 1), groups=c)
    return F.conv2d(x, g.view(1, 1, 1, k).expand(c, 1, 1, k), groups=c)


#: Pixels per row strip of :func:`mse`, :func:`ssim` and :func:`image_scores`: the scores of a large
#: image are sums over strips of rows, so their float64 temporaries stay ~a dozen strips (tens of
#: MB) whatever the image size (scored whole, the SSIM temporaries of a 24-MP photo took GBs).
STRIP_PIXELS = 1 << 18


def _strip_rows(width: int, channels: int = 1) -> int:
    return max(16, STRIP_PIXELS // max(1, width * channels))


def _ssim_map_sum(a: Tensor, b: Tensor, g: Tensor, c1: float, c2: float) -> Tensor:
    """Per-image sum of the SSIM map of ``a`` and ``b`` (float64, valid region), ``(B,)``."""
    mu_a, mu_b = _blur_valid(a, g), _blur_valid(b, g)
    var_a = _blur_valid(a * a, g) - mu_a * mu_a
    var_b = _blur_valid(b * b, g) - mu_b * mu_b
    cov = _blur_valid(a * b, g) - mu_a * mu_b
    s = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a * mu_a + mu_b * mu_b + c1) * (var_a + var_b + c2))
    return s.sum(dim=(1, 2, 3))


def ssim(
    x: Tensor,
    ref: Tensor,
    data_range: float = 1.0,
    *,
    window_size: int = 11,
    sigma: float = 1.5,
    k1: float = 0.01,
    k2: float = 0.03,
    prepare: Callable[[Tensor], Tensor] | None = None,
    prepare_ref: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """Structural similarity (Wang, Bovik, Sheikh & Simoncelli 2004, eq. 13) per image, ``(B,)``.

    ``SSIM = (2 mu_x mu_y + C1)(2 sigma_xy + C2) / ((mu_x^2 + mu_y^2 + C1)(sigma_x^2 + sigma_y^2 + C2))``
    with ``C1 = (K1 L)^2``, ``C2 = (K2 L)^2``, local statistics under a Gaussian window, averaged
    over the valid region of every channel. Computed in float64, over strips of rows (each with the
    ``window_size - 1`` rows its window reaches below): the memory of a few strips, not of the image.
    ``prepare`` / ``prepare_ref`` (applied to each strip of ``x`` / ``ref``: e.g. a clip or a colour
    space) let a caller score transformed images without transformed copies of them. Images must be at least
    ``window_size`` pixels on each side.
    """
    if prepare is None and prepare_ref is None:
        _check_pair(x, ref)
    elif x.dim() != 4 or x.shape != ref.shape:
        raise ValueError(f"ssim needs two tensors of the same shape, got {tuple(x.shape)} and {tuple(ref.shape)}")
    if min(x.shape[-2:]) < window_size:
        raise ValueError(f"ssim needs images of at least {window_size}x{window_size}, got {tuple(x.shape[-2:])}")
    g = gaussian_window(window_size, sigma, device=x.device)
    c1, c2 = (k1 * data_range) ** 2, (k2 * data_range) ** 2
    h, w = x.shape[-2:]
    valid = h - window_size + 1
    step = _strip_rows(w, x.shape[1])
    total = torch.zeros(x.shape[0], dtype=torch.float64, device=x.device)
    channels = x.shape[1]  # (prepare may change it: each strip's own count is kept below)
    for r0 in range(0, valid, step):
        r1 = min(valid, r0 + step)
        a, b = x[:, :, r0:r1 + window_size - 1], ref[:, :, r0:r1 + window_size - 1]
        a = a if prepare is None else prepare(a)
        b = b if prepare_ref is None else prepare_ref(b)
        channels = a.shape[1]
        total += _ssim_map_sum(a.double(), b.double(), g, c1, c2)
    return total / (channels * valid * (w - window_size + 1))


def to_space(x: Tensor, space: str) -> Tensor:
    """``x`` in the channel space a score is computed in: ``"rgb"`` (as is) or ``"y"`` (BT.601 luma)."""
    if space == "rgb":
        return x
    if space == "y":
        return rgb_to_y(x)
    raise ValueError(f"unknown channel space {space!r}; expected one of {', '.join(CHANNEL_SPACES)}")


def image_scores(out: Tensor, gt: Tensor, space: str = "rgb") -> dict[str, Tensor]:
    """Per-image scores of a restored batch ``out`` against ground truth ``gt`` (both RGB
    ``(B, 3, H, W)`` in [0, 1]), following the protocol (docs/protocol.md):

    * ``mse``: float output, not clipped, not rounded (feeds :func:`psnr_dataset_mse`);
    * ``psnr``: PSNR of that float output;
    * ``psnr_8bit``: PSNR of the output rounded and clipped to 8 bits (feeds :func:`psnr_mean`);
    * ``ssim``: SSIM of the float output clipped to [0, 1], only for images of at least
      :data:`SSIM_WINDOW` pixels a side (:func:`has_ssim`; smaller ones have no ``ssim``).

    ``space`` ``"y"`` converts both images to BT.601 luma after those steps (the 2x task)."""
    _check_pair(out, gt)
    in_space = (lambda t: to_space(t, space))  # noqa: E731 - applied strip by strip, no full-size copies
    n = (1 if space == "y" else out.shape[1]) * out.shape[-2] * out.shape[-1]
    m = _sq_sum(out, gt, in_space, in_space) / n
    scores = {
        "mse": m,
        "psnr": psnr_from_mse(m),
        "psnr_8bit": psnr_from_mse(_sq_sum(out, gt, lambda t: to_space(quantize(t), space), in_space) / n),
    }
    if has_ssim(*gt.shape[-2:]):
        scores["ssim"] = ssim(out, gt, prepare=lambda t: to_space(t.clamp(0.0, 1.0), space), prepare_ref=in_space)
    return scores


SSIM_WINDOW = 11  # the Gaussian window of the protocol's SSIM (docs/protocol.md)


def has_ssim(height: int, width: int) -> bool:
    """Whether an image of this size has an SSIM (its window must fit inside)."""
    return min(height, width) >= SSIM_WINDOW


__all__ = [
    "CHANNEL_SPACES",
    "Y_OFFSET",
    "Y_WEIGHTS",
    "gaussian_window",
    "image_scores",
    "mse",
    "psnr",
    "psnr_dataset_mse",
    "psnr_from_mse",
    "psnr_mean",
    "quantize",
    "rgb_to_y",
    "ssim",
    "to_space",
]
