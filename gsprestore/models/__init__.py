"""The paper's graph models, bottom up:

* :mod:`.estimate` - the initial estimate (tent normalised convolution in the 5x5 window);
* :mod:`.interpolators` - iGLR / iGTV, the non-learned solvers with the paper's constants;
* :mod:`.unrolled` - the feature CNN, one unrolled block, uGLR / uGTV and :func:`build_model`;
* :mod:`.pattern` - running an RGGB-trained demosaicker on any Bayer pattern.

The networks only: the restorer factory over them is :mod:`gsprestore.methods.graph_methods`.
"""

from .estimate import initial_estimate
from .interpolators import GraphInterpolator, build_interpolator
from .pattern import to_rggb
from .unrolled import PAPER_PARAMS, FeatureCNN, UnrolledBlock, UnrolledNet, build_model, default_config

__all__ = [
    "PAPER_PARAMS",
    "FeatureCNN",
    "GraphInterpolator",
    "UnrolledBlock",
    "UnrolledNet",
    "build_interpolator",
    "build_model",
    "default_config",
    "initial_estimate",
    "to_rggb",
]
