"""``gsprestore models``: the catalog of methods (:func:`gsprestore.methods.catalog.catalog`,
:mod:`gsprestore.methods.catalog`) as JSON, or one table per task with the default rule and why
each task's default was chosen. No torch import at module level."""

import json
from typing import Annotated, Any

import typer

from .command_table import command

#: Narrowest description column worth drawing; below it the descriptions are listed under the table.
MIN_DESCRIPTION = 24


def _cells(r: dict[str, Any]) -> list[str]:
    return [r["method"] + (" (default)" if r["default"] else ""), r["kind"], "-" if not r["params"] else
            f"{r['params']:,}", r["weights"], "-" if r["mcm"] is None else f"{r['mcm']:.2f}",
            "-" if r["kodak"] is None else f"{r['kodak']:.2f}",
            "-" if r["mp_per_s"] is None else f"{r['mp_per_s']:.3g}"]


def _print_stacked(console, rows: list[dict[str, Any]], all_cells: list[list[str]], heads: tuple[str, ...],
                   defaults: dict[str, dict[str, str]], device: str) -> None:
    """The tables of :func:`print_tables` for a terminal too narrow for their figures: per method a
    line of its name, kind, parameters and weights, a line of its figures, its description wrapped."""
    from rich.padding import Padding
    from rich.text import Text

    for task in dict.fromkeys(r["task"] for r in rows):
        console.print(Text(f"{task} (default on {device}: {defaults[task]['method']})"))
        for r, c in zip(rows, all_cells):
            if r["task"] != task:
                continue
            name = [c[0], c[1]] + ([f"{c[2]} params"] if c[2] != "-" else []) + [c[3]]
            console.print(Padding(Text("  ".join(name)), (0, 0, 0, 2)))
            console.print(Padding(Text(f"{heads[4]} {c[4]}  {heads[5]} {c[5]}  {heads[6]} {c[6]}"), (0, 0, 0, 4)))
            console.print(Padding(Text(" ".join(r["summary"].split())), (0, 0, 0, 4)))
        console.print()


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
    if room < 0:  # the figures do not fit on one line: two lines a method, nothing cut
        _print_stacked(console, rows, all_cells, heads, defaults, device)
        return
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
    from ..methods.catalog import catalog
    from ..methods.weights import read_manifest
    from ..runtime.tiling import device_kind

    read_manifest()  # a damaged manifest, or GSPRESTORE_WEIGHTS naming no folder: one line, not a table of menon
    info = catalog(device_kind(device))
    if as_json:
        typer.echo(json.dumps(info, indent=2))
        return
    from rich.console import Console

    kind, conditions = info["device"], info["speed_conditions"]
    console = Console(highlight=False)
    print_tables(console, info["models"], info["defaults"], kind)
    console.print(f"weights: {info['weights_dir']}; params and unrolling: the shipped weights'; McM / Kodak: recorded "
                  "PSNR (dB, data-set MSE, no noise) from the weights manifest; MP/s: recorded megapixels of "
                  f"output per second on {kind}" + (f" ({conditions})" if conditions else " (none recorded)"),
                  markup=False)
    console.print(f"rule: {info['rule']}", markup=False)
    for task, d in info["defaults"].items():
        console.print(f"default for {task} on {kind}: {d['reason']}", markup=False)
