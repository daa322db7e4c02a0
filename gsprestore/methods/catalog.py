"""The catalog of methods behind ``gsprestore models``: every method with its tasks, kind,
parameter count, weights status, the McM / Kodak scores and speed recorded in the weights
manifest, and which method is each task's default and why (:mod:`gsprestore.methods.defaults`).

A learned method's parameter count and unrolling are those of the weights that ship (recorded in
the manifest from the file when it was shipped, or read from the file), not the paper-size
default configuration; only a learned method without weights shows the default one, and says so.

No torch import at module level (it is imported only where the manifest does not record a shipped
network's configuration, or for a network with no weights)."""

from __future__ import annotations

from typing import Any


def default_choices(device: str = "cpu") -> dict[str, Any]:
    """``{task: DefaultChoice}`` for every task on ``device`` (a kind), from the weights manifest's
    recorded scores and speeds."""
    from .defaults import choose_default
    from .registry import TASKS

    return {task: choose_default(task, device=device) for task in TASKS}


def unrolling(method: str, config: dict[str, Any]) -> str:
    """The unrolled solver of a configuration in words: ``5 blocks x 4 heads, 2 ADMM x 5 CG`` (uGTV),
    ``5 blocks x 4 heads, 15 CG`` (uGLR), with ``, green-difference`` when that is the signal."""
    blocks, heads = config.get("blocks", "?"), config.get("heads", "?")
    text = f"{blocks} block{'' if blocks == 1 else 's'} x {heads} head{'' if heads == 1 else 's'}, "
    if config.get("prior", method.removeprefix("u")[:3]) == "gtv":
        text += f"{config.get('admm_iters', '?')} ADMM x {config.get('cg_iters', '?')} CG"
    else:
        text += f"{config.get('cg_iters', '?')} CG"
    if config.get("signal", "rgb") != "rgb":
        text += f", {config['signal']}"
    if config.get("feature_trunk") == "packed":
        text += f", one {config.get('width', '?')}-wide {config.get('cnn_layers', '?')}-layer half-resolution trunk"
    if config.get("noise_input"):
        text += ", noise level in, samples denoised on a learned graph"
    if config.get("clean_anchor"):
        text += ", the clean network's weights blended in at low noise"
    return text


def learned_network(method: str, task: str) -> tuple[int, dict[str, Any], str]:
    """``(params, config, source)`` of a learned method: the shipped network (``source`` "shipped":
    the manifest's ``params`` and ``config``, recorded from the file by ``ship_weights``, else the
    file itself, SHA-256 checked), or the paper-size default configuration (``source`` "default")
    when no weights ship."""
    from ..core.errors import WeightsError
    from .weights import manifest_entry, weights_status

    if weights_status(method, task) == "shipped":
        try:
            entry = manifest_entry(method, task) or {}
        except WeightsError:
            entry = {}
        params, config = entry.get("params"), entry.get("config")
        if isinstance(params, int) and isinstance(config, dict):
            return params, dict(config), "shipped"
        try:
            from .weights import load_model

            model = load_model(method, task)
            return model.num_params(), dict(model.config), "shipped"
        except WeightsError:
            pass
    from ..models import build_model

    model = build_model(method, task)
    return model.num_params(), dict(model.config), "default"


def models_overview(choices: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per ``(method, task)`` of ``restorers.METHODS``: ``method``, ``task``, ``kind``,
    ``params`` (0 for methods with nothing learned), ``weights`` (``shipped`` / ``missing`` /
    ``n.a.``), ``mcm`` / ``kodak`` (recorded PSNR in dB, or None), ``mp_per_s`` (recorded speed on the
    choices' kind of device, or None), ``default``, ``summary``; learned
    rows also ``config`` and ``unrolling`` (:func:`learned_network`: the shipped network's, or the
    default configuration's when ``config_source`` is "default")."""
    from .registry import METHODS
    from .weights import weights_status

    choices = default_choices() if choices is None else choices
    rows = []
    for spec in METHODS.values():
        for task in spec.tasks:
            recorded = {**choices[task].classical, **choices[task].learned}.get(spec.name, {})
            row: dict[str, Any] = {
                "method": spec.name,
                "task": task,
                "kind": spec.kind,
                "params": 0,
                "weights": weights_status(spec.name, task),
                "mcm": recorded.get("mcm"),
                "kodak": recorded.get("kodak"),
                "mp_per_s": choices[task].speeds.get(spec.name),
                "default": choices[task].method == spec.name,
                "summary": spec.summary,
            }
            if spec.kind == "learned":
                params, config, source = learned_network(spec.name, task)
                kind = "GTV" if config.get("prior") == "gtv" else "GLR"
                kind = ("CPU-size " if config.get("feature_trunk") == "packed" else "") + kind
                row.update(params=params, config=config, config_source=source, unrolling=unrolling(spec.name, config),
                           summary=f"unrolled {kind} network: {unrolling(spec.name, config)}"
                                   + ("" if source == "shipped" else " (default configuration; no weights)"))
            if spec.kind == "ensemble":
                from .defaults import members_shipped
                from .ensemble import MEMBERS

                row.update(params=sum(learned_network(m, task)[0] for m in MEMBERS),
                           weights="shipped" if members_shipped(MEMBERS, task) else "missing")
                if row["mcm"] is None:
                    row["summary"] += " (no scores recorded with the member weights shipped now)"
            rows.append(row)
    return rows


def catalog(kind: str) -> dict[str, Any]:
    """Everything ``gsprestore models --json`` prints for devices of ``kind`` (cpu / cuda):
    ``weights_dir``, ``device``, the default ``rule``, the ``speed_conditions`` the speeds were
    recorded under, each task's ``defaults`` (method, reason, best by quality) and the ``models``
    rows (:func:`models_overview`)."""
    from .defaults import RULE, speed_conditions
    from .weights import weights_dir

    choices = default_choices(kind)
    rows = models_overview(choices)
    defaults = {task: {"method": c.method, "reason": c.reason, "best_by_quality": c.quality_method}
                for task, c in choices.items()}
    return {"weights_dir": str(weights_dir()), "device": kind, "rule": RULE,
            "speed_conditions": speed_conditions(kind), "defaults": defaults, "models": rows}
