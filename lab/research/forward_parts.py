"""Where one inference forward of a CPU-size network spends its time (session 12's profiling,
``lab/notes/performance.md``, "The CPU-size networks' inference"): the network's parts timed by
wrapping them (noise map, trunk, denoiser, initial estimate, the block) and every native kernel
call by name, over ``--repeats`` forwards of a synthetic 768x512 image after two warm-ups, with
the allocator settings of the restore engine.

GNU OpenMP's idle spin is the command's (``gsprestore.core.process.configure_openmp``) unless the
environment sets ``GOMP_SPINCOUNT`` (300000: libgomp's default), e.g. the sweep::

    for s in 1000 10000 30000 100000 300000; do
      GOMP_SPINCOUNT=$s .venv/bin/python lab/research/forward_parts.py --threads 2; done
"""

from __future__ import annotations

import argparse
import collections
import time

from gsprestore.core.process import configure_openmp

configure_openmp()

import torch  # noqa: E402

from gsprestore import native  # noqa: E402
from gsprestore.core.memory import keep_freed_memory  # noqa: E402
from gsprestore.methods.weights import load_model  # noqa: E402
from gsprestore.physics.noise import level_params  # noqa: E402
from gsprestore.physics.tasks import observation, observe  # noqa: E402
from gsprestore_lab.timing import synthetic_rgb  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--level", default="medium", help="the noise level given to ugtv-lite-denoise")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()
    known, mask = observation("demosaic", observe("demosaic", synthetic_rgb(512, 768)))
    noise = torch.as_tensor(level_params(args.level), dtype=torch.float32).reshape(1, 3, 2)
    times: dict[str, float] = collections.defaultdict(float)
    calls: collections.Counter = collections.Counter()

    def timed(obj, name, label):
        f = getattr(obj, name)

        def g(*a, **k):
            t0 = time.perf_counter()
            r = f(*a, **k)
            times[label] += time.perf_counter() - t0
            return r

        setattr(obj, name, g)

    call = native.Kernels._call

    def kernel(self, name, tensors, ints=()):
        t0 = time.perf_counter()
        call(self, name, tensors, ints)
        times["kernel " + name] += time.perf_counter() - t0
        calls[name] += 1

    native.Kernels._call = kernel
    for method in ("ugtv-lite-denoise", "ugtv-lite"):
        model = load_model(method, "demosaic").eval()
        for part in ("noise_map", "trunk_features", "initial"):
            timed(model, part, part)
        if hasattr(model, "denoiser"):
            timed(model.denoiser, "forward", "denoiser")
        timed(model.blocks[0], "forward", "block")
        kw = {"noise": noise} if method.endswith("denoise") else {}
        with torch.inference_mode():
            for _ in range(2):
                model(known, mask, **kw)
            times.clear()
            calls.clear()
            t0 = time.perf_counter()
            for _ in range(args.repeats):
                model.release_workspace()  # one image, one job (as bench_cpu_target.py)
                model(known, mask, **kw)
            total = (time.perf_counter() - t0) / args.repeats
        print(f"{method}: {total * 1e3:.1f} ms a forward, {args.threads} threads")
        for label, t in sorted(times.items(), key=lambda kv: -kv[1]):
            n = calls[label[7:]] // args.repeats if label.startswith("kernel ") else ""
            print(f"  {label:34s} {t / args.repeats * 1e3:7.2f} ms {n}")


if __name__ == "__main__":
    main()
