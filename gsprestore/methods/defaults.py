"""Which method a command uses when none is named: the best one worth its cost on this kind of
device, decided from recorded scores and recorded speeds, never hard-coded (:data:`RULE`).

The weights manifest (``gsprestore/weights/manifest.json``) records, for every shipped network,
its benchmark scores (``scores.mcm`` / ``scores.kodak``: rows of ``gsprestore benchmark``), and in
its ``baselines`` section the classical methods' scores under the same protocol::

    "baselines": {"metric": "...", "source": "...",
                  "scores": {"demosaic": {"mcm": {"menon": 32.68, ...}, "kodak": {...}}, ...}}

A learned method is the default for a task only when its weights are shipped and its recorded
PSNR (dataset MSE, no noise) beats the *best* classical method's on **both** McM and Kodak; among
several such, the one with the largest smaller margin wins. Otherwise the default is the
classical one, :data:`CLASSICAL_DEFAULT` (Menon for demosaicking, grid-aligned bicubic for 2x).
Better weights shipped with better scores flip the default by themselves. That is the best *by
quality* (:func:`best_by_quality`, what ``--best`` runs). The manifest's ``ensembles`` section
records :mod:`gsprestore.methods.ensemble`'s scores with the SHA-256 of the member weights they were
measured with; such a record competes like a shipped network only while those are the weights
shipped (:func:`current_ensembles`).

A default must also be worth its time: the best by quality is the default on a kind of device
(``cpu``, ``cuda``) only when its recorded speed there is at least :data:`MIN_MP_PER_S` megapixels
of output per second (a 12-MP photo in about 12 s); otherwise the next learned method that also
beats the classical ones on both sets and is fast enough there, in the same order; otherwise the
classical method (:func:`choose_default`; ``--fast`` always runs it). Speeds are those ``gsprestore benchmark``
measured (``megapixels_per_second``): for a shipped network its ``speed.<device>`` record, else
its recorded Kodak / McM row when that ran on this kind of device; for the classical methods
``baselines.speed.<device>.<task>``, whose ``conditions`` say on what machine. A kind of device
with no recorded speed for the learned network keeps the classical default until one is measured
and shipped. Recorded speeds are taken as recorded (the machine their ``conditions`` name), never
re-measured at run time: the same install on the same input always chooses the same method, at
any load and with any cache (a run-time speed probe made the default differ between fresh caches
on one machine). The paper-size networks are far from the bar on a CPU; the CPU-size ``-lite``
networks are what can be fast enough there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.errors import WeightsError

#: The name suffix of the noise-aware networks (:data:`gsprestore.models.unrolled.DENOISE_SUFFIX`,
#: repeated so that this module imports no torch; a test checks they agree): they are chosen by
#: ``--denoise`` for a noisy camera RAW, never as the default for clean input.
NOISE_AWARE_SUFFIX = "-denoise"

CLASSICAL_DEFAULT = {"demosaic": "menon", "upscale2x": "bicubic"}
DATASETS: tuple[str, ...] = ("mcm", "kodak")
METRIC = "psnr_dataset_mse"
#: Slowest recorded speed (megapixels of output per second, on the kind of device that runs) at
#: which the best method by quality is also the default.
MIN_MP_PER_S = 1.0
#: The rule in one sentence (``gsprestore models`` prints it).
RULE = (f"the default is the best method by recorded quality (a learned one only when its shipped weights "
        f"beat the best classical method on both McM and Kodak) whose recorded speed on this kind of device "
        f"is at least {MIN_MP_PER_S:g} MP/s, else the classical one; --best runs the best by quality whatever "
        f"its time, --fast the classical one")


@dataclass
class DefaultChoice:
    """The default ``method`` of ``task`` and the ``reason`` in one sentence; ``learned`` holds each
    learned method's recorded scores ``{method: {dataset: dB}}``, ``classical`` the classical ones;
    ``device`` the kind of device it was chosen for, ``quality_method`` the best by quality and
    ``speeds`` the recorded MP/s there ``{method: MP/s}``; ``ranked`` the learned methods that beat
    the classical ones on both sets, best first."""

    task: str
    method: str
    reason: str
    learned: dict[str, dict[str, float]] = field(default_factory=dict)
    classical: dict[str, dict[str, float]] = field(default_factory=dict)
    device: str | None = None
    quality_method: str | None = None
    speeds: dict[str, float] = field(default_factory=dict)
    ranked: list[str] = field(default_factory=list)

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
    """``(learned, classical)`` recorded scores of ``task``: ``{method: {dataset: dB}}``; ``learned``
    holds the shipped networks and the ensembles recorded with their weights
    (:func:`current_ensembles`)."""
    learned: dict[str, dict[str, float]] = {}
    for entry in [*manifest.get("models", []), *current_ensembles(task, manifest).values()]:
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


def current_ensembles(task: str, manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The manifest's ``ensembles`` records of ``task`` (:mod:`gsprestore.methods.ensemble`) whose
    ``members`` SHA-256 are the weights the manifest lists now, ``{method: entry}``; a record measured
    with other member weights is stale and left out, so new weights never inherit its scores."""
    shipped = {str(e.get("method")): e.get("sha256") for e in manifest.get("models", [])
               if isinstance(e, dict) and e.get("task") == task}
    out: dict[str, dict[str, Any]] = {}
    for entry in manifest.get("ensembles") or []:
        if not isinstance(entry, dict) or entry.get("task") != task:
            continue
        members = entry.get("members")
        if isinstance(members, dict) and members and all(
                shipped.get(m) is not None and shipped.get(m) == sha for m, sha in members.items()):
            out.setdefault(str(entry.get("method")), entry)
    return out


def members_shipped(members: Any, task: str) -> bool:
    """Whether every network named in ``members`` (an ensemble's) has its weights shipped for ``task``."""
    from .weights import weights_status

    return all(weights_status(m, task) == "shipped" for m in members)


def best_by_quality(task: str, manifest: dict[str, Any] | None = None) -> DefaultChoice:
    """The best method of ``task`` by recorded quality alone (what ``--best`` runs): a learned one
    only when its shipped weights beat the best classical method on both McM and Kodak, else
    :data:`CLASSICAL_DEFAULT`. ``manifest`` None: the shipped one (an unreadable manifest means no
    learned choice)."""
    from .weights import weights_status

    fallback = CLASSICAL_DEFAULT[task]
    if manifest is None:
        try:
            manifest = shipped_manifest()
        except WeightsError as exc:
            return DefaultChoice(task, fallback, f"{fallback}: the weights manifest is unreadable ({exc.reason})")
    learned, classical = recorded_scores(task, manifest)
    ensembles = current_ensembles(task, manifest)
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
        if method.endswith(NOISE_AWARE_SUFFIX):  # chosen by --denoise for a noisy camera RAW, not for clean input
            continue
        if not (members_shipped(ensembles[method]["members"], task) if method in ensembles
                else weights_status(method, task) == "shipped"):
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
        choice.ranked = [method for _, method in sorted(winners, reverse=True)]
        choice.method = choice.ranked[0]
        choice.reason = _beats(choice, choice.method)
        return choice
    why = "; ".join(losses) if losses else "no learned weights are recorded"
    choice.reason = f"{fallback}: no shipped learned weights beat the best classical method on both McM and Kodak ({why})"
    return choice


def _beats(choice: DefaultChoice, method: str) -> str:
    mcm, kodak = choice.best_classical("mcm"), choice.best_classical("kodak")
    scores = choice.learned[method]
    return (f"{method}: its shipped weights beat the best classical method on both McM "
            f"({scores['mcm']:.2f} vs {mcm[0]} {mcm[1]:.2f} dB) and Kodak ({scores['kodak']:.2f} vs {kodak[0]} "
            f"{kodak[1]:.2f} dB)")


#: A CPU-size network and its paper-size sibling (:func:`recorded_speed`'s lower bound).
LITE_SIBLING = {"ugtv-lite": "ugtv", "uglr-lite": "uglr"}


def recorded_speed(method: str, task: str, device: str, manifest: dict[str, Any]) -> float | None:
    """:func:`_recorded_speed`; for a ``-lite`` network with no record on ``device``, its paper-size
    sibling's record there, as a lower bound (cost-based, not measured): the lite network runs the
    same kinds of operations with strictly less work of each (one block instead of several, a
    narrower trunk at half resolution, fewer solver steps), so on a device where the sibling is
    fast enough, so is it. Until a GPU run records its own CUDA speed, this is what lets the best
    network shipped be the default there too (issue 48)."""
    own = _recorded_speed(method, task, device, manifest)
    if own is None and method in LITE_SIBLING and device != "cpu":
        return _recorded_speed(LITE_SIBLING[method], task, device, manifest)
    return own


def _recorded_speed(method: str, task: str, device: str, manifest: dict[str, Any]) -> float | None:
    """Megapixels (of output) per second that ``method`` was measured to restore for ``task`` on
    ``device`` (a kind: ``cpu`` / ``cuda``), or None when not recorded. Classical methods: the
    manifest's ``baselines.speed.<device>.<task>``; learned ones: the entry's ``speed.<device>``,
    else the ``megapixels_per_second`` of its recorded Kodak (then McM) benchmark row when that ran
    on ``device``."""
    entries = _learned_entries(task, manifest)
    if method in entries:
        entry = entries[method]
        own = (entry.get("speed") or {}).get(device)
        if isinstance(own, dict) and isinstance(own.get("megapixels_per_second"), (int, float)):
            return float(own["megapixels_per_second"])
        for dataset in ("kodak", "mcm"):
            block = (entry.get("scores") or {}).get(dataset)
            if not isinstance(block, dict):
                continue
            ran_on = str((block.get("protocol") or {}).get("device") or "")
            if ran_on.split(":")[0] != device:
                continue
            for row in block.get("rows") or []:
                if isinstance(row, dict) and not row.get("noise_sigma") and isinstance(
                        row.get("megapixels_per_second"), (int, float)):
                    return float(row["megapixels_per_second"])
        return None
    table = (((manifest.get("baselines") or {}).get("speed") or {}).get(device) or {}).get(task) or {}
    value = table.get(method)
    return float(value) if isinstance(value, (int, float)) else None


def _learned_entries(task: str, manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {**{str(e.get("method")): e for e in manifest.get("models", [])
               if isinstance(e, dict) and e.get("task") == task}, **current_ensembles(task, manifest)}


def speed_conditions(device: str, manifest: dict[str, Any] | None = None) -> str | None:
    """Where and how the speeds of ``device`` were measured (the manifest's words), or None."""
    if manifest is None:
        try:
            manifest = shipped_manifest()
        except WeightsError:
            return None
    cond = (((manifest.get("baselines") or {}).get("speed") or {}).get(device) or {}).get("conditions")
    return str(cond) if cond else None


def shipped_manifest() -> dict[str, Any]:
    from .weights import read_manifest

    return read_manifest()


def choose_default(task: str, manifest: dict[str, Any] | None = None, *, device: str = "cpu",
                   prefer: str | None = None) -> DefaultChoice:
    """The method ``task`` runs on ``device`` (a kind: ``cpu`` / ``cuda``) when none is named: the
    best by recorded quality (:func:`best_by_quality`) when its recorded speed on this kind of
    device is at least :data:`MIN_MP_PER_S`, else the next learned method that beats the classical
    ones on both sets and is fast enough there, else the classical one (see :data:`RULE`).
    ``prefer="best"``: the best by quality whatever its speed (``--best``); ``prefer="fast"``: the
    classical one (``--fast``)."""
    if prefer not in (None, "best", "fast"):
        raise ValueError(f"prefer must be None, 'best' or 'fast', got {prefer!r}")
    fallback = CLASSICAL_DEFAULT[task]
    if manifest is None:
        try:
            manifest = shipped_manifest()
        except WeightsError as exc:
            return DefaultChoice(task, fallback, f"{fallback}: the weights manifest is unreadable ({exc.reason})",
                                 device=device)
    quality = best_by_quality(task, manifest)
    quality.device = device
    quality.quality_method = quality.method
    table = (((manifest.get("baselines") or {}).get("speed") or {}).get(device) or {}).get(task) or {}
    quality.speeds = {m: v for m in {**quality.classical, **quality.learned, **table, fallback: {}}
                      if (v := recorded_speed(m, task, device, manifest)) is not None}
    if prefer == "best":
        quality.reason = f"--best: {quality.reason}"
        return quality
    if prefer == "fast":
        quality.method = fallback
        quality.reason = f"--fast: {fallback}, the classical method (no learned network)"
        return quality
    if quality.method == fallback:
        return quality
    speed = quality.speeds.get(quality.method)
    best = quality.method
    if speed is not None and speed >= MIN_MP_PER_S:
        quality.reason += f", and restores {_speed_words(best, task, device, speed, manifest)}; a default needs >= {MIN_MP_PER_S:g})"
        return quality
    why = (f"its speed on {device} is not recorded" if speed is None else
           f"it restores only {speed:.3g} MP/s on {device} ({1 / speed:.0f} s per megapixel, recorded), under "
           f"the {MIN_MP_PER_S:g} MP/s a default needs")
    for method in quality.ranked[1:]:  # the next learned one, in the same order, if fast enough here
        fast = quality.speeds.get(method)
        if fast is not None and fast >= MIN_MP_PER_S:
            quality.method = method
            quality.reason = (f"{_beats(quality, method)}, and restores {_speed_words(method, task, device, fast, manifest)}; "
                              f"a default needs >= {MIN_MP_PER_S:g}); {best} is better by quality but {why}; "
                              f"--best runs {best}")
            return quality
    quality.method = fallback
    quality.reason = (f"{fallback}: {best} is better by quality ({_margins(quality, best)}) but {why}; "
                      f"--best runs {best}")
    return quality


def _speed_words(method: str, task: str, device: str, speed: float, manifest: dict[str, Any]) -> str:
    """``1.1 MP/s on cpu (recorded`` or, for a lite network judged by its sibling's record,
    ``at least 13.1 MP/s on cuda (its paper-size sibling ugtv's record, a lower bound``."""
    if _recorded_speed(method, task, device, manifest) is None and method in LITE_SIBLING:
        return (f"at least {speed:.3g} MP/s on {device} (its paper-size sibling {LITE_SIBLING[method]}'s record, "
                "a lower bound by cost")
    return f"{speed:.3g} MP/s on {device} (recorded"


def _margins(choice: DefaultChoice, method: str) -> str:
    parts = []
    for d in DATASETS:
        b = choice.best_classical(d)
        if b is not None and d in choice.learned.get(method, {}):
            parts.append(f"{'McM' if d == 'mcm' else 'Kodak'} {choice.learned[method][d] - b[1]:+.2f} dB")
    return ", ".join(parts)


def expected_seconds(method: str, task: str, device: str, megapixels: float,
                     manifest: dict[str, Any] | None = None) -> float | None:
    """About how long ``method`` takes for ``megapixels`` of output on ``device`` (a kind), from its
    recorded speed; None when not recorded."""
    if manifest is None:
        try:
            manifest = shipped_manifest()
        except WeightsError:
            return None
    speed = recorded_speed(method, task, device, manifest)
    return None if not speed else megapixels / speed


def default_method(task: str, device: str = "cpu", prefer: str | None = None) -> str:
    """The name of ``task``'s default method on ``device`` (a kind; :func:`choose_default`; ``prefer``:
    ``"best"`` / ``"fast"``). A manifest that exists but cannot be read is a :class:`WeightsError`: a
    damaged install must not silently change the method (the classical fallback would be chosen
    without a word)."""
    from ..physics.tasks import check_task
    from .weights import read_manifest

    task = check_task(task)
    try:
        manifest = read_manifest()
    except WeightsError as exc:
        raise WeightsError(f"{exc.reason}: the default method is chosen from it; repair the install or name a "
                           f"method (e.g. --method {CLASSICAL_DEFAULT[task]})", exc.path) from None
    return choose_default(task, manifest, device=device, prefer=prefer).method  # the manifest read once


def choose_method(method: str | None, weights: str | None, task: str, device: str = "cpu",
                  prefer: str | None = None) -> str:
    """The one place a method is chosen, for the commands and the Python API alike: ``method`` when
    named, else the network of the ``weights`` file, else the task's default on this kind of device
    (:func:`default_method`)."""
    from .weights import file_method

    if method is not None:
        return method
    return file_method(weights) if weights is not None else default_method(task, device, prefer)


def recorded_self_ensembles(task: str, manifest: dict[str, Any] | None = None) -> dict[str, dict[str, float]]:
    """``{method: {dataset: dB}}``: the recorded scores of ``task``'s shipped networks and current
    ensembles as self-ensembles (their manifest entry's ``self_ensemble`` record)."""
    if manifest is None:
        try:
            manifest = shipped_manifest()
        except WeightsError:
            return {}
    out: dict[str, dict[str, float]] = {}
    for method, entry in _learned_entries(task, manifest).items():
        record = entry.get("self_ensemble")
        if isinstance(record, dict):
            out[method] = {d: float(record[d]) for d in DATASETS if isinstance(record.get(d), (int, float))}
    return out


def self_ensemble_gains(manifest: dict[str, Any] | None = None) -> tuple[float, float] | None:
    """The smallest and largest recorded gain (dB, McM and Kodak, both tasks) of a learned
    method's self-ensemble over its one pass: what ``--self-ensemble``'s help and the README
    state. None when nothing is recorded."""
    from ..physics.tasks import TASKS

    if manifest is None:
        try:
            manifest = shipped_manifest()
        except WeightsError:
            return None
    gains = []
    for task in TASKS:
        learned, _ = recorded_scores(task, manifest)
        for method, se in recorded_self_ensembles(task, manifest).items():
            gains += [se[d] - learned[method][d] for d in se if d in learned.get(method, {})]
    return (min(gains), max(gains)) if gains else None

