"""Scoring under the paper's protocol: data sets, the benchmark and its plan, the paper's numbers,
synthetic test images. (What a model costs, shipping weights and the results page are lab tooling:
``lab/gsprestore_lab``, not part of the installed package.)"""
