"""``gsprestore models``: every method with its tasks, kind, parameter count, weights status, the
McM / Kodak scores recorded in the weights manifest, and which method is each task's default and
why (:mod:`gsprestore.methods.defaults`).

A learned method's parameter count and unrolling are those of the weights that ship (recorded in
the manifest from the file when it was shipped, or read from the file), not the paper-size
default configuration; only a learned method without weights shows the default one, and says so.

Thin wrapper over :func:`models_overview`; no torch import at module level (it is imported only
where the manifest does not record a shipped network's configuration, or for a network with no
weights)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from .registry import command

#: Narrowest description column worth drawing; below it the descriptions are listed under the table.
MIN_DESCRIPTION = 24


def default_choices(device: str = "cpu") -> dict[str, Any]:
    """``{task: DefaultChoice}`` for every task on ``device`` (a kind), from the weights manifest's
    recorded scores and speeds."""
    from ..methods.defaults import choose_default
    from ..methods.registry import TASKS

    return {task: choose_default(task, device=device) for task in TASKS}


def device_kind(device: str) -> str:
    """``--device`` of ``gsprestore models`` as a kind: auto -> this machine's (cuda if available)."""
    from ..core.errors import UsageError

    name = device.strip().lower()
    if name == "auto":
        from ..runtime.tiling import resolve_device

        return resolve_device("auto").type
    kind = name.split(":")[0]
    if kind not in ("cpu", "cuda"):
        raise UsageError(f"unknown device {device!r}; expected auto, cpu or cuda")
    return kind


def unrolling(method: str, config: dict[str, Any]) -> str:
    """The unrolled solver of a configuration in words: ``5 blocks x 4 heads, 2 ADMM x 5 CG`` (uGTV),
    ``5 blocks x 4 heads, 15 CG`` (uGLR), with ``, green-difference`` when that is the signal."""
    heads = config.get("heads", "?")
    text = f"{config.get('blocks', '?')} blocks x {heads} head{'' if heads == 1 else 's'}, "
    if config.get("prior", method.removeprefix("u")[:3]) == "gtv":
        text += f"{config.get('admm_iters', '?')} ADMM x {config.get('cg_iters', '?')} CG"
    else:
        text += f"{config.get('cg_iters', '?')} CG"
    if config.get("signal", "rgb") != "rgb":
        text += f", {config['signal']}"
    if config.get("feature_trunk") == "packed":
        text += f", one {config.get('width', '?')}-wide {config.get('cnn_layers', '?')}-layer half-resolution trunk"
    return text


def learned_network(method: str, task: str) -> tuple[int, dict[str, Any], str]:
    """``(params, config, source)`` of a learned method: the shipped network (``source`` "shipped":
    the manifest's ``params`` and ``config``, recorded from the file by ``ship_weights``, else the
    file itself, SHA-256 checked), or the paper-size default configuration (``source`` "default")
    when no weights ship."""
    from ..core.errors import WeightsError
    from ..methods.weights import manifest_entry, weights_status

    if weights_status(method, task) == "shipped":
        try:
            entry = manifest_entry(method, task) or {}
        except WeightsError:
            entry = {}
        params, config = entry.get("params"), entry.get("config")
        if isinstance(params, int) and isinstance(config, dict):
            return params, dict(config), "shipped"
        try:
            from ..methods.weights import load_model

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
    from ..methods.registry import METHODS
    from ..methods.weights import weights_status

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
                kind = ("CPU-size " if spec.name.endswith("-lite") else "") + kind
                row.update(params=params, config=config, config_source=source, unrolling=unrolling(spec.name, config),
                           summary=f"unrolled {kind} network: {unrolling(spec.name, config)}"
                                   + ("" if source == "shipped" else " (default configuration; no weights)"))
            if spec.kind == "ensemble":
                from ..methods.defaults import members_shipped
                from ..methods.ensemble import MEMBERS

                row.update(params=sum(learned_network(m, task)[0] for m in MEMBERS),
                           weights="shipped" if members_shipped(MEMBERS, task) else "missing")
                if row["mcm"] is None:
                    row["summary"] += " (no scores recorded with the member weights shipped now)"
            rows.append(row)
    return rows


def _cells(r: dict[str, Any]) -> list[str]:
    return [r["method"] + (" (default)" if r["default"] else ""), r["kind"], "-" if not r["params"] else
            f"{r['params']:,}", r["weights"], "-" if r["mcm"] is None else f"{r['mcm']:.2f}",
            "-" if r["kodak"] is None else f"{r['kodak']:.2f}",
            "-" if r["mp_per_s"] is None else f"{r['mp_per_s']:.3g}"]


def print_tables(console, rows: list[dict[str, Any]], defaults: dict[str, dict[str, str]], device: str = "cpu") -> None:
    """One table per task; the description is a column (wrapped, never cut) where at least
    :data:`MIN_DESCRIPTION` characters fit beside the figures, else a list under the table."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    style = {"shipped": "green", "missing": "red"}
    heads = ("method", "kind", "params", "weights", "McM", "Kodak", f"MP/s {device}")
    all_cells = [_cells(r) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in all_cells)) for i, h in enumerate(heads)]
    used = sum(widths) + 2 * (len(widths) - 1)  # two spaces between columns, none at the edges
    room = console.width - used - 2
    for task in dict.fromkeys(r["task"] for r in rows):
        mine = [(r, c) for r, c in zip(rows, all_cells) if r["task"] == task]
        table = Table(title=f"{task} (default on {device}: {defaults[task]['method']})", title_justify="left",
                      box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1),
                      collapse_padding=True)
        for i, h in enumerate(heads):
            table.add_column(h, justify="left" if i in (0, 1, 3) else "right", no_wrap=True, min_width=widths[i])
        if room >= MIN_DESCRIPTION:
            table.add_column("description", overflow="fold", ratio=1)
        for r, c in mine:
            c = list(c)
            if c[3] in style:
                c[3] = f"[{style[c[3]]}]{c[3]}[/]"
            table.add_row(*c, *([r["summary"]] if room >= MIN_DESCRIPTION else []))
        console.print(table)
        if room < MIN_DESCRIPTION:  # aligned and wrapped under the table
            listing = Table.grid(padding=(0, 1))
            listing.add_column(no_wrap=True)
            listing.add_column(overflow="fold")
            for r, _ in mine:
                listing.add_row(f"  {r['method']}", Text(r["summary"]))
            console.print(listing)
        console.print()


@command("models")
def models(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    device: Annotated[str, typer.Option("--device", help="The kind of device whose speeds and defaults are shown: "
                                        "auto (this machine's), cpu or cuda.")] = "auto",
) -> None:
    """List every method: task, kind, parameter count and unrolling of the shipped weights, weights
    status, the recorded McM / Kodak PSNR and speed, and each task's default method on this kind
    of device, the rule that chose it and why."""
    from ..methods.defaults import RULE, speed_conditions
    from ..methods.weights import weights_dir

    kind = device_kind(device)
    choices = default_choices(kind)
    rows = models_overview(choices)
    defaults = {task: {"method": c.method, "reason": c.reason, "best_by_quality": c.quality_method}
                for task, c in choices.items()}
    conditions = speed_conditions(kind)
    if as_json:
        typer.echo(json.dumps({"weights_dir": str(weights_dir()), "device": kind, "rule": RULE,
                               "speed_conditions": conditions, "defaults": defaults, "models": rows}, indent=2))
        return
    from rich.console import Console

    console = Console(highlight=False)
    print_tables(console, rows, defaults, kind)
    console.print(f"weights: {weights_dir()}; params and unrolling: the shipped weights'; McM / Kodak: recorded "
                  "PSNR (dB, data-set MSE, no noise) from the weights manifest; MP/s: recorded megapixels of "
                  f"output per second on {kind}" + (f" ({conditions})" if conditions else " (none recorded)"),
                  markup=False)
    console.print(f"rule: {RULE}", markup=False)
    for task, d in defaults.items():
        console.print(f"default for {task} on {kind}: {d['reason']}", markup=False)
