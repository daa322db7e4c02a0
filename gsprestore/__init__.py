"""gsprestore: demosaicking and 2x interpolation with unrolled graph-smoothness priors.

Importing the package is cheap (no torch); the Python API functions import torch on first use:

>>> import gsprestore
>>> rgb = gsprestore.demosaic(raw, method="menon", pattern="RGGB")   # doctest: +SKIP
>>> big = gsprestore.upscale2x(rgb, method="bicubic")                # doctest: +SKIP
"""

from ._version import __version__

__all__ = ["__version__", "demosaic", "upscale2x", "restore_file"]

_LAZY = {"demosaic": "gsprestore.api", "upscale2x": "gsprestore.api", "restore_file": "gsprestore.api"}


def __getattr__(name: str):
    # PEP 562: the API functions are imported on first use so `import gsprestore` stays torch-free.
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gsprestore' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
