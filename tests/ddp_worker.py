"""One rank of a multi-process test (tests/test_distributed.py): ``python tests/ddp_worker.py ARGS``
runs ``gsprestore ARGS`` exactly as the console script does, under ``torchrun`` or with ``RANK`` /
``WORLD_SIZE`` / ``MASTER_ADDR`` / ``MASTER_PORT`` set by the test.

``GSP_TEST_HOOK=KIND:RANK:STEP`` makes rank RANK misbehave right after training step STEP:
``sigterm`` (SIGTERM to itself), ``kill`` (SIGKILL to itself: a rank that dies), ``hang``
(SIGSTOP to itself: a rank that stops answering, its connections open) or ``late``
(its time budget says stop from then on). ``GSP_TEST_DUMP=PATH`` writes each rank's final
weights to ``PATH.<rank>.pt``, so a test can check that the ranks hold the same model."""

from __future__ import annotations

import os
import signal
import sys


def _install_hooks() -> None:
    from gsprestore.training import loop as L

    rank = int(os.environ.get("RANK", "0"))
    hook = os.environ.get("GSP_TEST_HOOK")
    if hook:
        kind, who, at = hook.split(":")
        if int(who) == rank:
            real_step = L.TrainingRun.step

            def step(self, *args, **kwargs):
                real_step(self, *args, **kwargs)
                if self.state["step"] == int(at):
                    if kind == "sigterm":
                        os.kill(os.getpid(), signal.SIGTERM)
                    elif kind == "kill":
                        os.kill(os.getpid(), signal.SIGKILL)
                    elif kind == "hang":
                        os.kill(os.getpid(), signal.SIGSTOP)
                    elif kind == "late":
                        self.deadline.out_of_time = lambda: True

            L.TrainingRun.step = step
    dump = os.environ.get("GSP_TEST_DUMP")
    if dump:
        import torch

        real_close = L.TrainingRun.close

        def close(self):
            real_close(self)
            if getattr(self, "model", None) is not None:
                torch.save({k: v.detach().cpu() for k, v in self.model.state_dict().items()}, f"{dump}.{rank}.pt")

        L.TrainingRun.close = close


if __name__ == "__main__":
    _install_hooks()
    from gsprestore.cli.app import main

    sys.argv = ["gsprestore", *sys.argv[1:]]
    main()
