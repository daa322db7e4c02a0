"""Which method a command uses when none is named: the best one we have, decided from recorded
scores, never hard-coded.

The weights manifest (``gsprestore/weights/manifest.json``) records, for every shipped network,
its benchmark scores (``scores.mcm`` / ``scores.kodak``: rows of ``gsprestore benchmark``), and in
its ``baselines`` section the classical methods' scores under the same protocol::

    "baselines": {"metric": "...", "source": "...",
                  "scores": {"demosaic": {"mcm": {"menon": 32.68, ...}, "kodak": {...}}, ...}}

A learned method is the default for a task only when its weights are shipped and its recorded
PSNR (dataset MSE, no noise) beats the *best* classical method's on **both** McM and Kodak; among
several such, the one with the largest smaller margin wins. Otherwise the default is the
classical one, :data:`CLASSICAL_DEFAULT` (Menon for demosaicking, grid-aligned bicubic for 2x).
Better weights shipped with better scores flip the default by themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import WeightsError

CLASSICAL_DEFAULT = {"demosaic": "menon", "upscale2x": "bicubic"}
DATASETS: tuple[str, ...] = ("mcm", "kodak")
METRIC = "psnr_dataset_mse"


@dataclass
class DefaultChoice:
    """The default ``method`` of ``task`` and the ``reason`` in one sentence; ``learned`` holds each
    learned method's recorded scores ``{method: {dataset: dB}}``, ``classical`` the classical ones."""

    task: str
    method: str
    reason: str
    learned: dict[str, dict[str, float]] = field(default_factory=dict)
    classical: dict[str, dict[str, float]] = field(default_factory=dict)

    def best_classical(self, dataset: str) -> tuple[str, float] | None:
        """The best classical method on ``dataset`` and its score, or None if none is recorded."""
        scores = {m: s[dataset] for m, s in self.classical.items() if dataset in s}
        if not scores:
            return None
        name = max(scores, key=scores.__getitem__)
        return name, scores[name]


def _row_score(block: Any) -> float | None:
    """The noise-free ``psnr_dataset_mse`` of a manifest ``scores.<dataset>`` block."""
    if not isinstance(block, dict):
        return None
    for row in block.get("rows") or []:
        if isinstance(row, dict) and not row.get("noise_sigma") and isinstance(row.get(METRIC), (int, float)):
            return float(row[METRIC])
    return None


def recorded_scores(task: str, manifest: dict[str, Any]) -> tuple[dict[str, dict[str, float]],
                                                                   dict[str, dict[str, float]]]:
    """``(learned, classical)`` recorded scores of ``task``: ``{method: {dataset: dB}}``."""
    learned: dict[str, dict[str, float]] = {}
    for entry in manifest.get("models", []):
        if entry.get("task") != task or not isinstance(entry.get("scores"), dict):
            continue
        scores = {d: s for d in DATASETS if (s := _row_score(entry["scores"].get(d))) is not None}
        learned.setdefault(str(entry.get("method")), scores)
    classical: dict[str, dict[str, float]] = {}
    table = ((manifest.get("baselines") or {}).get("scores") or {}).get(task) or {}
    for dataset, by_method in table.items():
        if dataset in DATASETS and isinstance(by_method, dict):
            for method, score in by_method.items():
                if isinstance(score, (int, float)):
                    classical.setdefault(method, {})[dataset] = float(score)
    return learned, classical


def choose_default(task: str, manifest: dict[str, Any] | None = None) -> DefaultChoice:
    """The default method of ``task`` (see the module docstring). ``manifest`` None: the shipped one
    (an unreadable manifest means no learned default)."""
    from .weights import read_manifest, weights_status

    fallback = CLASSICAL_DEFAULT[task]
    if manifest is None:
        try:
            manifest = read_manifest()
        except WeightsError as exc:
            return DefaultChoice(task, fallback, f"{fallback}: the weights manifest is unreadable ({exc.reason})")
    learned, classical = recorded_scores(task, manifest)
    choice = DefaultChoice(task, fallback, "", learned, classical)
    best = {d: choice.best_classical(d) for d in DATASETS}
    missing = [d for d in DATASETS if best[d] is None]
    if missing:
        choice.reason = (f"{fallback}: the manifest records no classical score on {' and '.join(missing)} "
                         "to compare the learned weights with")
        return choice
    winners: list[tuple[float, str]] = []
    losses: list[str] = []
    for method, scores in learned.items():
        if weights_status(method, task) != "shipped":
            losses.append(f"{method} has no shipped weights")
            continue
        lacking = [d for d in DATASETS if d not in scores]
        if lacking:
            losses.append(f"{method} has no recorded {' / '.join(lacking)} score")
            continue
        margins = {d: scores[d] - best[d][1] for d in DATASETS}
        if all(m > 0 for m in margins.values()):
            winners.append((min(margins.values()), method))
        else:
            d = min(margins, key=margins.__getitem__)
            losses.append(f"{method} {scores[d]:.2f} dB < {best[d][0]} {best[d][1]:.2f} dB on {d}")
    if winners:
        margin, method = max(winners)
        choice.method = method
        choice.reason = (f"{method}: its shipped weights beat the best classical method on both McM "
                         f"({learned[method]['mcm']:.2f} vs {best['mcm'][0]} {best['mcm'][1]:.2f} dB) and Kodak "
                         f"({learned[method]['kodak']:.2f} vs {best['kodak'][0]} {best['kodak'][1]:.2f} dB)")
        return choice
    why = "; ".join(losses) if losses else "no learned weights are recorded"
    choice.reason = f"{fallback}: no shipped learned weights beat the best classical method on both McM and Kodak ({why})"
    return choice


def default_method(task: str) -> str:
    """The name of ``task``'s default method (:func:`choose_default`)."""
    return choose_default(task).method
