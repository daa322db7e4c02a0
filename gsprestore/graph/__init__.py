"""The 5x5-window pixel graph of the paper (Sec. 2, Sec. 5.2): the window, the graph operators and
learned edge weights (eqs. 27-28), their hand-written backwards and Triton kernels."""
