"""Issue 16's CPU target: uGTV (and uGLR) demosaicking of a Kodak-size image against a plain CNN of
demosaicnet's shape on the same image, in one run, with the conv-equivalent figures.

The CNN is Gharbi et al. 2016's demosaicnet (``BayerDemosaick``: depth 15, width 64) rebuilt with
``torch.nn`` and random weights (timing only): the mosaic packed 2x2 into 4 channels at half
resolution, 15 3x3 convolutions with ReLU (4 -> 64, 13 x 64 -> 64, 64 -> 128), the last layer's
two halves multiplied (filters x masks), a 1x1 conv to 12 channels, a grouped 2x2 transposed conv
to RGB at full resolution, concatenated with the 3-channel mosaic, a 3x3 conv 6 -> 64 with ReLU
and a 1x1 conv to 3: 560,834 parameters (demosaicnet: 561k). Zero padding keeps the size (the
original crops; the arithmetic is the same to within the borders). It runs in NCHW and in
channels-last; the faster of the two is the CNN's time.

The graph models are the shipped ones (``weights/``, what ``gsprestore demosaic`` runs) unless
``--paper-config`` (the paper-size network, random initialisation). The conv-equivalent unit is one
48 -> 48 3x3 convolution at full resolution (NCHW), as in bench_models.py. Each round times the
reference conv (best of 3), the CNN (both layouts) and one forward of each graph model, one after
the other (this shared machine's speed drifts); the median round's figures are printed.

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_cpu_target.py                       # 768x512, uGTV and uGLR
    .venv/bin/python benchmarks/bench_cpu_target.py --image kodim19.png   # a real Kodak image (RGB, mosaicked here)
    .venv/bin/python benchmarks/bench_cpu_target.py --task upscale2x      # 2x: 384x256 -> 768x512
    .venv/bin/python benchmarks/bench_cpu_target.py --methods ugtv-lite,ugtv --threads 2   # issue 39: the CPU-size
        # network against the paper-size one and the CNN, MP/s and ratios; --weights ugtv-lite=RUN/model.pt
        # for weights not shipped yet
    .venv/bin/python benchmarks/bench_cpu_target.py --methods ugtv-lite --threads 2 --repeats 5 \
        --candidate w48=ugtv-lite:width=48 --candidate b2=ugtv-lite:blocks=2   # price the size frontier

For ``--task upscale2x`` the graph models interpolate a 768x512 output from every other pixel
(the paper's 2x task) and the reference CNN is the same demosaicnet-shape network run at the
same output size (the 2x observation as its 3-channel input): a CNN of demosaicnet's cost class,
for scale; there is no demosaicnet for 2x.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

try:  # before torch, as the gsprestore command does (GOMP_SPINCOUNT=300000: libgomp's default)
    from gsprestore.core.process import configure_openmp

    configure_openmp()
except ImportError:  # a tree from before it (PYTHONPATH=<export>): that tree's command set nothing
    pass

import torch  # noqa: E402
from torch import nn  # noqa: E402

from gsprestore.graph import operators as G  # noqa: E402
from gsprestore.models import build_model  # noqa: E402
from gsprestore.physics.tasks import observation, observe  # noqa: E402
from gsprestore.methods.weights import load_model  # noqa: E402
from gsprestore_lab.timing import DemosaicnetShape, best_of, synthetic_rgb  # noqa: E402


def _image(args) -> torch.Tensor:
    if not args.image:
        return synthetic_rgb(args.height, args.width)
    import numpy as np
    from PIL import Image

    a = np.asarray(Image.open(args.image).convert("RGB"), dtype=np.float32) / 255.0
    return torch.from_numpy(a).permute(2, 0, 1)[None].contiguous()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--image", help="an RGB image (default: a synthetic 768x512 one; timing is data-independent)")
    ap.add_argument("--height", type=int, default=512)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--methods", default="ugtv,uglr")
    ap.add_argument("--task", default="demosaic", choices=["demosaic", "upscale2x"])
    ap.add_argument("--paper-config", action="store_true", help="paper-size networks instead of the shipped ones")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--weights", action="append", default=[], metavar="METHOD=PATH",
                    help="weights for a method instead of the shipped ones (repeatable)")
    ap.add_argument("--candidate", action="append", default=[], metavar="NAME=BASE:KEY=VALUE,...",
                    help="a network of the BASE method's shipped configuration with keys changed, random weights "
                         "(timing is data-independent): e.g. w48b2=ugtv-lite:width=48,blocks=2 (repeatable)")
    ap.add_argument("--noise-level", choices=["low", "medium", "high"],
                    help="give noise-aware networks (ugtv-lite-denoise) this level of the noisy protocol, so their "
                         "denoising passes run (default: clean, which skips them)")
    ap.add_argument("--allocator", choices=["product", "default"], default="product",
                    help="product (default): glibc keeps freed memory in the heap, as gsprestore's CPU restore engine "
                         "sets it for every model (gsprestore.core.memory.keep_freed_heap_memory), the CNN and the "
                         "graph models alike; default: glibc's own settings (large tensors come back from the OS "
                         "as fresh zero pages at every forward)")
    ap.add_argument("--json", help="write the figures to this JSON file")
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.allocator == "product":
        from gsprestore.core.memory import keep_freed_heap_memory

        keep_freed_heap_memory()
    if args.threads:
        torch.set_num_threads(args.threads)
    weights = dict(w.split("=", 1) for w in args.weights)

    rgb = _image(args)
    H, W = rgb.shape[-2:]
    known, mask = observation(args.task, observe(args.task, rgb))
    cnn = DemosaicnetShape().eval()
    cnn_cl = DemosaicnetShape().eval().to(memory_format=torch.channels_last)
    cnn_cl.load_state_dict(cnn.state_dict())
    n_cnn = sum(p.numel() for p in cnn.parameters())
    known_cl = known.contiguous(memory_format=torch.channels_last)
    conv = nn.Conv2d(48, 48, 3, padding=1)
    feat = torch.randn(1, 48, H, W)
    feat_cl = feat.contiguous(memory_format=torch.channels_last)
    models = {}
    for m in args.methods.split(","):
        models[m] = (build_model(m, args.task) if args.paper_config
                     else load_model(m, args.task, path=weights.get(m))).eval()
    for spec in args.candidate:  # the size frontier: shipped configuration, keys changed
        name, rest = spec.split("=", 1)
        base, _, keys = rest.partition(":")
        config = {k: v for k, v in load_model(base, args.task).config.items() if k not in ("prior", "task")}
        for item in filter(None, keys.split(",")):
            k, v = item.split("=", 1)
            config[k] = json.loads(v)
        models[name] = build_model(base, args.task, **config).eval()

    noise = None
    if args.noise_level:
        from gsprestore.physics.noise import level_params

        noise = torch.as_tensor(level_params(args.noise_level), dtype=torch.float32).reshape(1, 3, 2)

    def run(model):
        # one image, one job: the buffers a network keeps between the tiles of a job are freed at
        # its end by the restore engine (gsprestore.runtime.tiling.restore), so each timed forward
        # allocates its own, as a one-tile job does
        release = getattr(model, "release_workspace", None)
        if callable(release):
            release()
        if noise is not None and model.config.get("noise_input"):
            return model(known, mask, noise=noise)
        return model(known, mask)

    rounds = []
    with torch.inference_mode():
        conv(feat)  # warm-ups
        cnn(known)
        cnn_cl(known_cl)
        for model in models.values():
            run(model)
        for _ in range(max(1, args.repeats)):
            r = {"conv48_s": best_of(lambda: conv(feat), 3), "conv48_cl_s": best_of(lambda: conv(feat_cl), 3)}
            t0 = time.perf_counter()
            cnn(known)
            r["cnn_nchw_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            cnn_cl(known_cl)
            r["cnn_channels_last_s"] = time.perf_counter() - t0
            r["cnn_s"] = min(r["cnn_nchw_s"], r["cnn_channels_last_s"])
            for m, model in models.items():
                t0 = time.perf_counter()
                run(model)
                r[f"{m}_s"] = time.perf_counter() - t0
            rounds.append(r)
            print("round: conv {:.0f} ms, CNN {:.2f} s, ".format(r["conv48_s"] * 1e3, r["cnn_s"])
                  + ", ".join(f"{m} {r[f'{m}_s']:.2f} s" for m in models))
    key = args.methods.split(",")[0]
    med = sorted(rounds, key=lambda r: r[f"{key}_s"] / r["cnn_s"])[(len(rounds) - 1) // 2]
    conv_s = med["conv48_s"]
    print(f"\n{W}x{H} {args.task}, {torch.get_num_threads()} threads, native kernels: {G.native_available()}, "
          f"{args.allocator} allocator settings, "
          f"graph models: {'paper-size, random' if args.paper_config else 'shipped weights'}; "
          f"median round (by {key} / CNN):")
    conv_cl_s = med["conv48_cl_s"]
    print(f"  reference 48->48 3x3 conv: {conv_s * 1e3:.1f} ms (channels-last, the layout the graph models' CNNs "
          f"use: {conv_cl_s * 1e3:.1f} ms)")
    print(f"  demosaicnet-shape CNN ({n_cnn:,} params): {med['cnn_s']:.2f} s = {med['cnn_s'] / conv_s:.1f} conv-eq "
          f"(NCHW {med['cnn_nchw_s']:.2f} s, channels-last {med['cnn_channels_last_s']:.2f} s)")
    probe = probe_gflops()  # the machine's convolution speed, recorded beside the figures (not used by the rule)
    print(f"  convolution probe ({PROBE}): {probe:.1f} GFLOP/s")
    res = {"task": args.task, "size": [H, W], "threads": torch.get_num_threads(), "native": G.native_available(),
           "device_name": machine_key().split("|")[0], "torch": torch.__version__, "probe_gflops": probe,
           "conditions": f"whole {W}x{H} image, {torch.get_num_threads()} threads, median of {len(rounds)} rounds "
                         f"after a warm-up, {args.allocator} allocator settings (benchmarks/bench_cpu_target.py)"
                         + (f", noise level {args.noise_level} given to noise-aware networks" if args.noise_level else ""),
           "cnn_params": n_cnn, "noise_level": args.noise_level, "rounds": rounds, "median": med,
           "paper_config": args.paper_config}
    mp = H * W / 1e6
    print(f"  MP/s (output megapixels per second, median round): CNN {mp / med['cnn_s']:.2f}, "
          + ", ".join(f"{m} {mp / med[f'{m}_s']:.2f}" for m in models)
          + (f"; {key} is {med[f'{models_list[1]}_s'] / med[f'{key}_s']:.1f}x faster than {models_list[1]} "
             f"(median of rounds {statistics.median(r[f'{models_list[1]}_s'] / r[f'{key}_s'] for r in rounds):.1f}x)"
             if len(models_list := list(models)) > 1 else ""))
    for m, model in models.items():
        t = med[f"{m}_s"]
        ratios = [r[f"{m}_s"] / r["cnn_s"] for r in rounds]
        print(f"  {m} ({sum(p.numel() for p in model.parameters()):,} params): {t:.2f} s = {t / conv_s:.1f} conv-eq "
              f"(goal <= 30; {t / conv_cl_s:.1f} channels-last conv-eq), {t / med['cnn_s']:.2f} x the CNN (target <= 1; rounds "
              f"{min(ratios):.2f}-{max(ratios):.2f})")
        res[m] = {"s": t, "megapixels_per_s": mp / t, "megapixels": mp, "method": m, "task": args.task,
                  "threads": torch.get_num_threads(), "probe_gflops": probe, "conv_eq": t / conv_s,
                  "conv_eq_channels_last": t / conv_cl_s, "vs_cnn": t / med["cnn_s"],
                  "vs_cnn_median_of_rounds": statistics.median(ratios)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


PROBE = "fp32 3x3 convolution 32 -> 32 channels on a 256x256 image, channels-last, best of 5"


def probe_gflops(repeats: int = 5) -> float:
    """GFLOP/s (a multiply-add counts 2) of :data:`PROBE` on torch's current threads: what kind of
    machine (and how loaded) the speeds of this run were measured on."""
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(0)
    x = torch.rand(1, 32, 256, 256, generator=gen).contiguous(memory_format=torch.channels_last)
    w = torch.rand(32, 32, 3, 3, generator=gen)
    best = float("inf")
    with torch.inference_mode():
        F.conv2d(x, w, padding=1)
        for _ in range(repeats):
            t0 = time.perf_counter()
            F.conv2d(x, w, padding=1)
            best = min(best, time.perf_counter() - t0)
    return 2 * 32 * 32 * 9 * 256 * 256 / best / 1e9


def machine_key() -> str:
    """CPU model, logical CPUs, torch threads, torch version."""
    import os
    import platform
    from pathlib import Path

    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}|{os.cpu_count()}|{torch.get_num_threads()}|{torch.__version__}"


if __name__ == "__main__":
    main()
