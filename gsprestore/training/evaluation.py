"""Validation of a training run (paper Sec. 5; docs/protocol.md): the dataset-MSE PSNR of the
reconstructions of held-out patches in the task's protocol space (:func:`evaluate`; RGB for
demosaicking, BT.601 luma Y for 2x), the network seeing each patch as
:func:`gsprestore.physics.tasks.network_input` makes it (an RGGB mosaic, or the 2x decimation)."""

from __future__ import annotations

from ..physics.tasks import network_input, score_space

__all__ = ["evaluate", "score_space"]


def evaluate(model, task: str, patches, *, batch_size: int = 32, device=None, raw_noise: str = "",
             offset: int = 0) -> dict[str, float]:
    """Dataset-MSE PSNR (docs/protocol.md: ``10 log10(1 / mean_i MSE_i)``, float output, not clipped)
    of the model's reconstructions of ``patches`` (``uint8 (N, 3, P, P)``), in the task's protocol
    space (``psnr``) and in RGB (``psnr_rgb``). ``raw_noise``: noisy pairs up to that level
    (:func:`gsprestore.physics.noise.draw_levels`), the same for patch ``offset + i`` in every
    validation of every run."""
    import torch

    from .. import metrics

    space = score_space(task)
    was_training = model.training
    model.eval()
    mse_space, mse_rgb = [], []
    with torch.no_grad():
        for i in range(0, patches.shape[0], batch_size):
            gt = patches[i:i + batch_size].to(device).float() / 255.0
            if raw_noise:
                from ..physics.noise import draw_levels, noisy_mosaic
                from ..physics.tasks import observation

                ids = range(offset + i, offset + i + gt.shape[0])
                noise = torch.cat([draw_levels(1, (109, j), top=raw_noise) for j in ids])
                y = torch.cat([noisy_mosaic(gt[k:k + 1], noise[k:k + 1], (110, j)) for k, j in enumerate(ids)])
                out = model(*observation(task, y), noise=noise.to(gt.device))
            else:
                out = model(*network_input(task, gt))
            mse_rgb.append(metrics.mse(out, gt).cpu())
            mse_space.append(metrics.mse(metrics.to_space(out, space), metrics.to_space(gt, space)).cpu())
    model.train(was_training)
    return {
        "psnr": metrics.psnr_dataset_mse(torch.cat(mse_space)),
        "psnr_rgb": metrics.psnr_dataset_mse(torch.cat(mse_rgb)),
        "space": space,
    }
