"""``python -m gsprestore``: the same entry point as the ``gsprestore`` console script."""

from .cli.entry import main

if __name__ == "__main__":  # pragma: no cover - exercised through subprocess tests
    main()
