"""gsprestore: demosaicking and 2x interpolation with unrolled graph-smoothness priors.

Importing the package is cheap (no torch); the Python API functions import torch on first use.
"""

from ._version import __version__

__all__ = ["__version__"]
