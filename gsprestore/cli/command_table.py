"""Where command functions are collected as their modules are imported; :func:`gsprestore.cli.app._register`
adds them to the Typer app. The command modules import this module, never the app, so the CLI's
imports form a tree (app -> commands -> each family -> registry), not a circle."""

from __future__ import annotations

from typing import Any, Callable

#: ``(name or None, function, Typer command options)`` in definition order.
COMMANDS: list[tuple[str | None, Callable[..., Any], dict[str, Any]]] = []


def command(name: str | None = None, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: ``@command("demosaic")`` records the function as the command ``name`` (None:
    Typer's name from the function's)."""

    def record(fn: Callable[..., Any]) -> Callable[..., Any]:
        COMMANDS.append((name, fn, options))
        return fn

    return record
