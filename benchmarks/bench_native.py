"""The native CPU kernels as shipped (compiled when the package is built, gsprestore/native) against
the first-use JIT build they replace and the PyTorch path (issue 16, "No compiler at run time").

(a) first-run: ``gsprestore demosaic`` (uGTV, the shipped weights) of a 768 x 512 mosaic (Kodak
    size) twice, each in a fresh process, with a fresh, empty cache (XDG_CACHE_HOME,
    TORCH_EXTENSIONS_DIR, PYTHONPYCACHEPREFIX in a new temporary folder): wall time of each run
    and first / second (target <= 1.5). ``--pythonpath DIR`` runs another tree's code the same
    way (e.g. an export of the last JIT revision: its first run compiles the kernels).
(b) forward: one uGTV and one uGLR demosaicking forward (paper-size default config, random
    initialisation: timing does not depend on the weights) at 768 x 512 with the shipped library,
    (``--jit-rev REV``) with the kernels of git revision REV compiled by
    ``torch.utils.cpp_extension.load_inline`` as graph._native did before (the compile is timed
    too: the old first-run stall), and (``--with-pytorch``) with the PyTorch path. The variants
    alternate within each round (this shared machine's speed drifts); the medians over
    ``--repeats`` rounds of the forward time and of the time spent inside the kernel calls (the
    part the carrier can change, less noisy than the whole forward) and their ratios are printed.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_native.py --part first-run
    .venv/bin/python benchmarks/bench_native.py --part forward --jit-rev 299d6b6 --repeats 3 [--with-pytorch]
    git archive 299d6b6 | tar -x -C /tmp/old-tree     # the last JIT revision, then:
    .venv/bin/python benchmarks/bench_native.py --part first-run --pythonpath /tmp/old-tree
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from gsprestore.core import backend
from gsprestore import native
from gsprestore.physics import sampling
from gsprestore.models import build_model
from gsprestore.methods.registry import observation
from gsprestore_lab.timing import synthetic_rgb

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def _write_mosaic(path: str, h: int, w: int) -> None:
    import numpy as np
    from PIL import Image

    y = sampling.mosaic(synthetic_rgb(h, w))[0, 0]
    Image.fromarray((y.numpy() * 255 + 0.5).astype(np.uint8)).save(path)


def first_run(args) -> dict:
    """``args.rounds`` times: two CLI runs in fresh processes sharing one new, empty cache folder."""
    rounds = [_first_run_round(args) for _ in range(max(1, args.rounds))]
    med = sorted(rounds, key=lambda r: r["ratio"])[(len(rounds) - 1) // 2]
    res = dict(med, rounds=[(r["first_s"], r["second_s"], r["first_cpu_s"], r["second_cpu_s"]) for r in rounds])
    if len(rounds) > 1:
        cpu_med = statistics.median(r["cpu_ratio"] for r in rounds)
        res["median_cpu_ratio"] = cpu_med
        print(f"median round: first / second = {med['ratio']:.2f} wall (target <= 1.5), "
              f"median CPU-time ratio {cpu_med:.2f} (less sensitive to other jobs)")
    return res


def _first_run_round(args) -> dict:
    code_root = os.path.abspath(args.pythonpath or ROOT)
    with tempfile.TemporaryDirectory(prefix="gsp-first-run-") as tmp:
        src = os.path.join(tmp, "mosaic.png")
        _write_mosaic(src, args.height, args.width)
        env = dict(os.environ)
        env.update({
            "PYTHONPATH": code_root + os.pathsep + env.get("PYTHONPATH", ""),
            "HOME": os.path.join(tmp, "home"),
            "XDG_CACHE_HOME": os.path.join(tmp, "cache"),
            "TORCH_EXTENSIONS_DIR": os.path.join(tmp, "cache", "torch_extensions"),
        })
        env.pop("GSPRESTORE_NATIVE", None)
        cmd = [sys.executable, "-c", "from gsprestore.cli.app import main; main()", "demosaic", src,
               "-o", os.path.join(tmp, "out.png"), "--method", args.cli_method, "--overwrite", "--quiet"]
        probe = [sys.executable, "-c", "import gsprestore, importlib.util; from gsprestore.graph import operators as G; "
                 "ok = G.native_available(); "
                 "err = importlib.import_module('gsprestore.core.backend').error() "
                 "if importlib.util.find_spec('gsprestore.core.backend') else G._native_state.get('error'); "
                 "print(gsprestore.__file__, ok, err)"]
        times, cpu = [], []
        for i in range(2):
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tmp)
            times.append(time.perf_counter() - t0)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
            if proc.returncode != 0:
                raise SystemExit(f"run {i + 1} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
            if proc.stderr.strip():
                print(f"run {i + 1} stderr: {proc.stderr.strip()[-500:]}")
        state = subprocess.run(probe, env=env, capture_output=True, text=True, cwd=tmp).stdout.strip()
    res = {"part": "first-run", "code": code_root, "method": args.cli_method, "size": [args.height, args.width],
           "first_s": times[0], "second_s": times[1], "ratio": times[0] / times[1], "target_ratio": 1.5,
           "first_cpu_s": cpu[0], "second_cpu_s": cpu[1], "cpu_ratio": cpu[0] / cpu[1],
           "native_available_error": state}
    print(f"gsprestore demosaic --method {args.cli_method} of a {args.width}x{args.height} mosaic, fresh cache, "
          f"code from {code_root}:")
    print(f"  first run {times[0]:.2f} s, second run {times[1]:.2f} s: first / second = {res['ratio']:.2f} "
          f"(target <= 1.5); CPU time {cpu[0]:.2f} s / {cpu[1]:.2f} s = {res['cpu_ratio']:.2f}; "
          f"(package, native kernels, error): {state}")
    return res


def _jit_module(rev: str):
    """The kernels of git revision ``rev`` (gsprestore/_graph_native.py) built the way graph._native
    built them there (load_inline, -O3 -mavx2 -mfma on AVX2 CPUs), in a new build folder."""
    from torch.utils import cpp_extension

    text = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:gsprestore/_graph_native.py"], check=True,
                          capture_output=True, text=True).stdout
    ns: dict = {}
    exec(compile(text, f"{rev}:_graph_native.py", "exec"), ns)
    cap = torch.backends.cpu.get_cpu_capability()
    flags = ["-O3"] + (["-mavx2", "-mfma"] if cap in ("AVX2", "AVX512") else [])
    build = tempfile.mkdtemp(prefix="gsp-jit-")
    t0 = time.perf_counter()
    mod = cpp_extension.load_inline(name=f"gsp_jit_{rev[:10]}", cpp_sources=[ns["SOURCE"]],
                                    functions=list(ns["FUNCTIONS"]), extra_cflags=flags, build_directory=build,
                                    verbose=False)
    return mod, time.perf_counter() - t0


class _Timed:
    """A kernel module whose calls add their wall time to ``acc`` (time inside the kernels)."""

    def __init__(self, mod, acc: list):
        self._mod, self._acc = mod, acc

    def __getattr__(self, name):
        fn = getattr(self._mod, name)

        def timed(*a, **k):
            t0 = time.perf_counter()
            out = fn(*a, **k)
            self._acc[0] += time.perf_counter() - t0
            return out

        return timed


def forward(args) -> dict:
    torch.manual_seed(0)
    H, W = args.height, args.width
    variants = {"shipped": native.load()}
    res: dict = {"part": "forward", "size": [H, W], "threads": torch.get_num_threads(),
                 "library": variants["shipped"].path}
    if args.jit_rev:
        mod, t_build = _jit_module(args.jit_rev)
        variants["jit"] = mod
        res["jit_rev"], res["jit_build_s"] = args.jit_rev, t_build
        print(f"JIT build of the kernels of {args.jit_rev} (load_inline, what the first command used to wait for): "
              f"{t_build:.1f} s")
    if args.with_pytorch:
        variants["pytorch"] = None
    rgb = synthetic_rgb(H, W)
    known, mask = observation("demosaic", sampling.mosaic(rgb))
    for method in args.methods.split(","):
        model = build_model(method, "demosaic").eval()
        times: dict[str, list[float]] = {k: [] for k in variants}
        in_kernels: dict[str, list[float]] = {k: [] for k in variants}
        outs = {}
        with torch.inference_mode():
            for k, mod in variants.items():  # warm-up, and the outputs agree
                backend.use(mod)
                outs[k] = model(known, mask)
            for _ in range(max(1, args.repeats)):
                for k, mod in variants.items():
                    acc = [0.0]
                    backend.use(None if mod is None else _Timed(mod, acc))
                    t0 = time.perf_counter()
                    model(known, mask)
                    times[k].append(time.perf_counter() - t0)
                    in_kernels[k].append(acc[0])
        med = {k: statistics.median(v) for k, v in times.items()}
        med_k = {k: statistics.median(v) for k, v in in_kernels.items()}
        diff = {k: float((outs[k] - outs["shipped"]).abs().max()) for k in variants if k != "shipped"}
        res[method] = {"median_s": med, "median_in_kernels_s": med_k, "rounds_s": times,
                       "rounds_in_kernels_s": in_kernels, "max_abs_diff_vs_shipped": diff}
        line = ", ".join(f"{k} {v:.2f} s" + (f" ({med_k[k]:.2f} s in the kernels)" if variants[k] is not None else "")
                         for k, v in med.items())
        print(f"{method} demosaic forward at {W}x{H}, median of {len(times['shipped'])} rounds: {line}")
        for k in variants:
            if k != "shipped":
                kr = f", in the kernels {med_k['shipped'] / med_k[k]:.2f}" if variants[k] is not None else ""
                print(f"  shipped / {k}: forward {med['shipped'] / med[k]:.2f}{kr}   "
                      f"(max |output difference| {diff[k]:.1e})")
    backend.use("auto")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["first-run", "forward", "both"], default="both")
    ap.add_argument("--height", type=int, default=512)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--cli-method", default="ugtv", help="first-run: the demosaic method")
    ap.add_argument("--pythonpath", help="first-run: run the code of this tree instead")
    ap.add_argument("--rounds", type=int, default=1, help="first-run: fresh caches, median ratio")
    ap.add_argument("--methods", default="ugtv,uglr", help="forward: the networks timed")
    ap.add_argument("--jit-rev", help="forward: also time the JIT-built kernels of this git revision")
    ap.add_argument("--with-pytorch", action="store_true", help="forward: also time the PyTorch path (slow)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write the figures to this JSON file")
    args = ap.parse_args()
    out = []
    if args.part in ("first-run", "both"):
        out.append(first_run(args))
    if args.part in ("forward", "both"):
        out.append(forward(args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
