"""``gsprestore models``: every method with its tasks, kind, parameter count, weights status, the
McM / Kodak scores recorded in the weights manifest, and which method is each task's default and
why (:mod:`gsprestore.defaults`).

Thin wrapper over :func:`models_overview`; no torch import at module level (it is imported only to
count the learned networks' parameters)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from .registry import command


def default_choices() -> dict[str, Any]:
    """``{task: DefaultChoice}`` for every task (from the weights manifest's recorded scores)."""
    from ..defaults import choose_default
    from ..restorers import TASKS

    return {task: choose_default(task) for task in TASKS}


def models_overview(choices: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per ``(method, task)`` of ``restorers.METHODS``: ``method``, ``task``, ``kind``,
    ``params`` (counted by building the network for learned methods, 0 otherwise),
    ``weights`` (``shipped`` / ``missing`` / ``n.a.``), ``mcm`` / ``kodak`` (recorded PSNR in dB,
    or None), ``default`` and ``summary``."""
    from ..restorers import METHODS
    from ..weights import weights_status

    choices = default_choices() if choices is None else choices
    rows = []
    for spec in METHODS.values():
        for task in spec.tasks:
            params = 0
            recorded = {**choices[task].classical, **choices[task].learned}.get(spec.name, {})
            if spec.kind == "learned":
                from ..models import build_model

                params = build_model(spec.name, task).num_params()
            rows.append({
                "method": spec.name,
                "task": task,
                "kind": spec.kind,
                "params": params,
                "weights": weights_status(spec.name, task),
                "mcm": recorded.get("mcm"),
                "kodak": recorded.get("kodak"),
                "default": choices[task].method == spec.name,
                "summary": spec.summary,
            })
    return rows


@command("models")
def models(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List every method: task, kind, parameter count, weights status, the recorded McM / Kodak PSNR,
    and each task's default method and why."""
    choices = default_choices()
    rows = models_overview(choices)
    defaults = {task: {"method": c.method, "reason": c.reason} for task, c in choices.items()}
    if as_json:
        from ..weights import weights_dir

        typer.echo(json.dumps({"weights_dir": str(weights_dir()), "defaults": defaults, "models": rows}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    from ..weights import weights_dir

    console = Console()
    table = Table(title="gsprestore methods", caption=f"weights: {weights_dir()}; McM / Kodak: recorded PSNR (dB, "
                  "data-set MSE, no noise) from the weights manifest")
    style = {"shipped": "green", "missing": "red"}
    cells = [
        [r["method"] + (" (default)" if r["default"] else ""), r["task"], r["kind"], f"{r['params']:,}", r["weights"],
         "-" if r["mcm"] is None else f"{r['mcm']:.2f}", "-" if r["kodak"] is None else f"{r['kodak']:.2f}"]
        for r in rows
    ]
    used = 1
    for i, col in enumerate(("method", "task", "kind", "params", "weights", "McM", "Kodak")):
        width = max(len(col), *(len(c[i]) for c in cells))
        table.add_column(col, justify="right" if col in ("params", "McM", "Kodak") else "left", no_wrap=True,
                         min_width=width)
        used += width + 3
    room = console.width - used - 3  # the description column only where it fits
    if room >= 20:
        table.add_column("description", no_wrap=True, overflow="ellipsis", max_width=room)
    for r, c in zip(rows, cells):
        if c[4] in style:
            c[4] = f"[{style[c[4]]}]{c[4]}[/]"
        table.add_row(*c, *([r["summary"]] if room >= 20 else []))
    console.print(table)
    for task, d in defaults.items():
        console.print(f"default for {task}: {d['reason']}", markup=False, highlight=False)
