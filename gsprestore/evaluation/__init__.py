"""Scoring under the paper's protocol: data sets, the benchmark and its plan, the paper's numbers,
synthetic test images; what a model costs (the cost model, the operator count, timing)."""
