"""``gsprestore models``: every method with its tasks, kind, parameter count and weights status.

Thin wrapper over :func:`models_overview`; no torch import at module level (it is imported only to
count the learned networks' parameters)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from .app import app


def models_overview() -> list[dict[str, Any]]:
    """One row per ``(method, task)`` of ``restorers.METHODS``: ``method``, ``task``, ``kind``,
    ``params`` (counted by building the network for learned methods, 0 otherwise),
    ``weights`` (``shipped`` / ``missing`` / ``n.a.``), ``default`` and ``summary``."""
    from ..restorers import DEFAULT_METHOD, METHODS
    from ..weights import weights_status

    rows = []
    for spec in METHODS.values():
        for task in spec.tasks:
            params = 0
            if spec.kind == "learned":
                from ..models import build_model

                params = build_model(spec.name, task).num_params()
            rows.append({
                "method": spec.name,
                "task": task,
                "kind": spec.kind,
                "params": params,
                "weights": weights_status(spec.name, task),
                "default": DEFAULT_METHOD.get(task) == spec.name,
                "summary": spec.summary,
            })
    return rows


@app.command("models")
def models(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List every method: task, kind, parameter count and pretrained-weights status."""
    rows = models_overview()
    if as_json:
        from ..weights import weights_dir

        typer.echo(json.dumps({"weights_dir": str(weights_dir()), "models": rows}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    from ..weights import weights_dir

    console = Console()
    table = Table(title="gsprestore methods", caption=f"weights: {weights_dir()}")
    style = {"shipped": "green", "missing": "red"}
    cells = [
        [r["method"] + (" (default)" if r["default"] else ""), r["task"], r["kind"], f"{r['params']:,}", r["weights"]]
        for r in rows
    ]
    used = 1
    for i, col in enumerate(("method", "task", "kind", "params", "weights")):
        width = max(len(col), *(len(c[i]) for c in cells))
        table.add_column(col, justify="right" if col == "params" else "left", no_wrap=True, min_width=width)
        used += width + 3
    room = console.width - used - 3  # the description column only where it fits
    if room >= 20:
        table.add_column("description", no_wrap=True, overflow="ellipsis", max_width=room)
    for r, c in zip(rows, cells):
        if c[4] in style:
            c[4] = f"[{style[c[4]]}]{c[4]}[/]"
        table.add_row(*c, *([r["summary"]] if room >= 20 else []))
    console.print(table)
