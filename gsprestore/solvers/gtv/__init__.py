"""GTV interpolation by the ADMM of Sec. 4.2 (the LP ``min ||C-bar x||_1 s.t. H x = y``, eq. 10), every
form of it side by side:

* :mod:`.reference` - the plain nine-vector ADMM, one function per equation 19-24: the readable
  spec (:func:`gtv_admm_reference`);
* :mod:`.admm` - the fast form (:func:`gtv_interpolate`): three edge tensors instead of nine, the
  edge state replayed by the native kernels at inference, the Jacobi-scaled x-update; tested equal
  to the reference (x and gradients);
* :mod:`.edge_step` - the fused edge step :func:`admm_edge_step` (eqs. 19, 21, 23, 24 and the edge
  term of the next eq. 20) as one custom op, and its native replay;
* :mod:`.triton_kernels` and :mod:`.triton_adjoint` - the edge term's replay and its training
  backward as Triton kernels on a GPU.

The x-update's linear system is solved by :mod:`gsprestore.solvers.cg`.
"""

from __future__ import annotations

from .admm import gtv_interpolate
from .edge_step import admm_edge_step
from .reference import (AdmmState, gtv_admm_reference, gtv_laplacian, multiplier_update, q_update, qtilde_update,
                        x_update_rhs, z_update)

__all__ = ["gtv_interpolate", "gtv_laplacian", "gtv_admm_reference", "admm_edge_step", "AdmmState", "z_update",
           "x_update_rhs", "q_update", "qtilde_update", "multiplier_update"]
