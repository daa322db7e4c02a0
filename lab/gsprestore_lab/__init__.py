"""gsprestore's lab: measurement, release and research code that no product path needs. It
imports ``gsprestore`` like any user (absolute imports, public names) and is not part of the
installed package (lab/README.md).

* :mod:`.cost_model` (with :mod:`.op_count`): FLOPs, bytes and time per pixel of each part of a network;
* :mod:`.timing`: what the speed measurements share (synthetic image and mosaic, best-of timing,
  the demosaicnet-shape CNN);
* :mod:`.precision`: the PSNR change of reduced precision on held-out crops;
* :mod:`.release`: shipping weights (the manifest's training records, scores and speeds);
* :mod:`.results_page`: docs/results.md, the paper's tables beside ours.
"""
