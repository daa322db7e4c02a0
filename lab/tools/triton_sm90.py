"""Compile every fused Triton kernel that the GPU job launches for an H100 / H200 (sm_90) with
Triton's real compiler, on a machine without a GPU, and time each compile.

The kernels (gsprestore/graph/triton_kernels.py, gsprestore/solvers/cg/triton_kernels.py,
gsprestore/solvers/gtv/triton_kernels.py) compile at their first launch on the GPU, inside the job's
short window. This tool finds the variants that launch would compile and compiles them here:

1. **record** (a child process under ``TRITON_INTERPRET=1``, so that CPU tensors take the fused
   path): the four shipped models' forwards (the job's sanity check; its inference and
   validation run the same kernels) and a training step of each (unrolled CG's training kernels,
   :mod:`gsprestore.solvers.cg.triton_adjoint`, and uGTV's ADMM edge term,
   :mod:`gsprestore.solvers.gtv.triton_adjoint`) at each ``--shapes`` size, with every kernel launch recorded
   (kernel, argument kinds and values, constexpr keywords) and not run (interpreted, the shipped
   models' launches take tens of minutes; no dispatch depends on the values they write);
2. **compile** (a child process, Triton's NVIDIA backend told that the current target is
   ``GPUTarget("cuda", 90, 32)``): each recorded launch through the kernel's own ``warmup``, which
   specialises the arguments as a launch on the GPU would (an integer equal to 1 or divisible by
   16, a pointer aligned to 16 bytes) and compiles each new variant to a cubin (ptxas included).

Prints one line per variant and, with ``--json FILE``, writes every variant's kernel, the shapes
that launched it, its compile seconds (wall and CPU) and its registers and stack (spilled) bytes
a thread from the cubin (tests/test_triton_sm90.py checks them)::

    .venv/bin/python lab/tools/triton_sm90.py [--shapes 16x16,22x18] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODELS = ["ugtv_demosaic", "uglr_demosaic", "ugtv_upscale2x", "uglr_upscale2x"]


def _describe(a):
    """A launch argument as JSON: a tensor by its dtype and 16-byte alignment, else its value."""
    import torch

    if isinstance(a, torch.Tensor):
        return {"tensor": str(a.dtype).replace("torch.", ""), "aligned16": a.data_ptr() % 16 == 0}
    return a


def record(shapes: list[tuple[int, int]]) -> list[dict]:
    """Every kernel launch of the shipped models' forwards at each (H, W) (TRITON_INTERPRET=1; the
    kernels are not run)."""
    import importlib

    import torch

    from gsprestore.core import backend
    from gsprestore.physics.tasks import network_input
    from gsprestore.methods.weights import load_model

    if os.environ.get("TRITON_INTERPRET") != "1" or backend.usable(torch.zeros(1)):
        raise SystemExit("record runs under TRITON_INTERPRET=1 with GSPRESTORE_NATIVE=0")
    launches: list[dict] = []
    current: dict = {}

    class Recorder:
        def __init__(self, module: str, name: str):
            self.module, self.name = module, name

        def __getitem__(self, grid):
            def run(*args, **kwargs):
                launches.append({"module": self.module, "kernel": self.name, **current,
                                 "args": [_describe(a) for a in args], "kwargs": kwargs})

            return run

    for module, name in backend.TRITON_KERNELS:
        mod = importlib.import_module(module)
        setattr(mod, name, Recorder(module, name))
    torch.manual_seed(0)
    for name in MODELS:
        method, task = name.split("_")
        model = load_model(method, task)
        for h, w in shapes:
            current.update(model=name, shape=f"{h}x{w}")
            with torch.no_grad():
                model(*network_input(task, torch.rand(2, 3, h, w)))
            # a training step (the job's): unrolled CG's training kernels, forward and backward
            current.update(model=name + " (training)")
            model.zero_grad(set_to_none=True)
            model(*network_input(task, torch.rand(2, 3, h, w))).mean().backward()
    return launches


def _cpu() -> float:
    """CPU seconds of this process and its finished children (ptxas): a compile's cost however
    loaded the machine is."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class _Sm90Driver:
    """What Triton's JIT asks the driver when it compiles (no launch): the target is sm_90."""

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):  # noqa: ARG002
        return 0

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")


def resource_usage(cubin) -> tuple:
    """(registers a thread, stack bytes a thread) of a compiled kernel, read by the ``cuobjdump``
    that Triton's NVIDIA backend ships; (None, None) without it. A stack on these kernels is
    registers spilled to local memory: the first CG training kernel took 255 registers and spilled
    ~1 KB a thread, and ran 11x slower than the forward's step on an H100."""
    import re
    import shutil

    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    tool = str(tool) if tool.is_file() else shutil.which("cuobjdump")
    if not cubin or tool is None:
        return None, None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True).stdout
    regs, stack = re.search(r"REG:(\d+)", out), re.search(r"STACK:(\d+)", out)
    return (int(regs.group(1)), int(stack.group(1))) if regs and stack else (None, None)


def compile_all(launches: list[dict]) -> list[dict]:
    """Each recorded launch through its kernel's ``warmup`` for sm_90: one row per compiled variant
    (a launch that reuses a variant adds its shape to that row)."""
    import importlib

    import torch
    import triton
    import triton.language as tl
    from triton.runtime.driver import driver

    driver.set_active(_Sm90Driver())

    @triton.jit
    def _first(x_ptr):  # Triton's one-time start (backend, ptxas version) is not a kernel's cost
        tl.store(x_ptr, 1.0)

    _first.warmup(torch.zeros(4), grid=(1,))
    keep: list = []  # tensors stay alive (and their addresses distinct) through the compiles

    def stand_in(a):
        if isinstance(a, dict):  # a tensor: a small one of its dtype and 16-byte alignment
            t = torch.zeros(8, dtype=getattr(torch, a["tensor"]))
            t = t if a["aligned16"] else t[1:]
            keep.append(t)
            return t
        return a

    variants: dict = {}
    for rec in launches:
        kernel = getattr(importlib.import_module(rec["module"]), rec["kernel"])
        args = [stand_in(a) for a in rec["args"]]
        t0, c0 = time.perf_counter(), _cpu()
        compiled = None
        try:
            compiled = kernel.warmup(*args, grid=(1,), **rec["kwargs"])
            key, error = (rec["kernel"], compiled.hash), None
        except Exception as exc:  # noqa: BLE001 - reported per variant
            key, error = (rec["kernel"], json.dumps(rec["args"]) + json.dumps(rec["kwargs"])), f"{type(exc).__name__}: {exc}"
        secs, cpu = time.perf_counter() - t0, _cpu() - c0
        row = variants.get(key)
        if row is None:
            regs, stack = resource_usage(compiled.asm.get("cubin")) if compiled is not None else (None, None)
            row = variants[key] = {"kernel": rec["kernel"], "module": rec["module"], "constexprs": rec["kwargs"],
                                   "seconds": round(secs, 2), "cpu_seconds": round(cpu, 2), "error": error,
                                   "registers": regs, "stack_bytes": stack, "shapes": [], "models": []}
            usage = "" if regs is None else f" {regs:4d} regs {stack:5d} B stack"
            print(f"{rec['kernel']:22s} {json.dumps(rec['kwargs']):64s} {secs:6.2f} s wall {cpu:6.2f} s CPU{usage}"
                  + (f"  FAILED {error}" if error else ""), flush=True)
        for field, value in (("shapes", rec["shape"]), ("models", rec["model"])):
            if value not in row[field]:
                row[field].append(value)
    return list(variants.values())


def _child(mode: str, shapes: str, out: Path, env: dict) -> None:
    cmd = [sys.executable, __file__, "--child", mode, "--shapes", shapes, "--json", str(out)]
    res = subprocess.run(cmd, env=env, cwd=REPO)
    if res.returncode != 0:
        raise SystemExit(f"triton_sm90 {mode} failed (exit {res.returncode})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="16x16,22x18", help="H x W of the recorded forwards, comma-separated")
    ap.add_argument("--json", type=Path, help="write the variants and their compile seconds here")
    ap.add_argument("--child", choices=["record", "compile"], help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",") if s]
    if a.child == "record":
        a.json.write_text(json.dumps(record(shapes)))
        return 0
    if a.child == "compile":
        launches = json.loads(a.json.read_text())
        a.json.write_text(json.dumps(compile_all(launches), indent=1))
        return 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "GSPRESTORE_NATIVE": "0", "GSPRESTORE_TRITON": "1"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns while the default is unset
    with tempfile.TemporaryDirectory(prefix="gsp-sm90-") as tmp:
        work = Path(tmp) / "launches.json"
        t0 = time.perf_counter()
        _child("record", a.shapes, work, {**env, "TRITON_INTERPRET": "1"})
        n = len(json.loads(work.read_text()))
        print(f"recorded {n} launches in {time.perf_counter() - t0:.0f} s; compiling for sm_90 "
              "(kernel, constexprs, seconds):", flush=True)
        # a fresh cache: every variant is compiled, none read back
        _child("compile", a.shapes, work, {**env, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(Path(tmp) / "cache")})
        variants = json.loads(work.read_text())
    total, cpu = sum(v["seconds"] for v in variants), sum(v["cpu_seconds"] for v in variants)
    failed = sum(1 for v in variants if v["error"])
    print(f"{len(variants)} variants, {total:.1f} s wall / {cpu:.1f} s CPU of compiling, {failed} failed")
    if a.json:
        a.json.write_text(json.dumps({"shapes": a.shapes, "variants": variants, "total_seconds": round(total, 2),
                                      "total_cpu_seconds": round(cpu, 2)}, indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
