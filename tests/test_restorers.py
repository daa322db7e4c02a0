"""The method registry (gsprestore.methods.registry): every METHODS entry builds through get_restorer for
each of its tasks and restores a tiny input of that task to the right shape; names and tasks it does
not know are usage errors that list the choices."""

from __future__ import annotations

import pytest
import torch

from gsprestore.methods import defaults
from gsprestore.methods import registry as restorers
from gsprestore.core.errors import UsageError
from gsprestore.methods.interface import Restorer
from gsprestore.physics.sampling import mosaic

CASES = [(name, task) for name, spec in restorers.METHODS.items() for task in spec.tasks]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny inputs: thread start-up costs more than it saves (the learned models run 2-3x faster)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_every_task_has_methods_and_a_registered_default():
    for task in restorers.TASKS:
        names = restorers.methods_for(task)
        assert names and all(task in restorers.METHODS[n].tasks for n in names)
        assert defaults.default_method(task) in names
    assert restorers.methods_for("demosaic")[:3] == ["bilinear", "malvar", "menon"]
    assert "menon" not in restorers.methods_for("upscale2x") and "bicubic" in restorers.methods_for("upscale2x")


@pytest.mark.parametrize("name,task", CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_every_method_builds_and_restores_a_tiny_input(name, task):
    r = restorers.get_restorer(name, task)
    assert isinstance(r, Restorer) and r.name == name and r.task == task
    assert r.kind == restorers.METHODS[name].kind and r.halo >= 0
    torch.manual_seed(0)  # a smooth ramp with a little texture: any restoration lands close to it
    ramp = torch.linspace(0.2, 0.8, 12)[None, None, :, None] * torch.ones(1, 3, 12, 12)
    gt = ramp + 0.02 * torch.rand(1, 3, 12, 12)
    y = mosaic(gt, "GRBG") if task == "demosaic" else gt[..., 0::2, 0::2]
    assert y.shape == ((1, 1, 12, 12) if task == "demosaic" else (1, 3, 6, 6))
    with torch.inference_mode():
        out = r(y, "GRBG")
    assert tuple(out.shape) == (1, 3, 12, 12)
    assert out.dtype == torch.float32 and bool(torch.isfinite(out).all())
    err = (out - gt)[..., 2:-2, 2:-2].abs().mean().item()
    assert err < 0.05, f"{name} {task}: mean error {err:.3f} on a smooth ramp"


def test_unknown_method_lists_the_methods():
    with pytest.raises(UsageError, match="unknown method 'nope'; methods for demosaic: bilinear, malvar, menon, "
                       "iglr") as exc:
        restorers.get_restorer("nope", "demosaic")
    assert "bicubic" not in str(exc.value)  # only the task's methods
    with pytest.raises(UsageError, match="unknown method 'nope'; expected one of bilinear, malvar, menon"):
        restorers.method_spec("nope")
    with pytest.raises(UsageError, match="did you mean 'bicubic'"):
        restorers.method_spec("bicubc", "upscale2x")


def test_method_that_does_not_do_the_task_names_those_that_do():
    with pytest.raises(UsageError, match="does not do upscale2x; methods for upscale2x: bicubic"):
        restorers.get_restorer("menon", "upscale2x")
    with pytest.raises(UsageError, match="does not do demosaic"):
        restorers.method_spec("bicubic", "demosaic")


def test_unknown_task_lists_the_tasks():
    with pytest.raises(UsageError, match="unknown task 'denoise'; expected one of demosaic, upscale2x"):
        restorers.get_restorer("menon", "denoise")
    with pytest.raises(UsageError, match="unknown task"):
        restorers.methods_for("denoise")


def test_method_names_are_case_insensitive_and_options_reach_the_factory():
    assert restorers.method_spec("MENON").name == "menon"
    r = restorers.get_restorer("menon", "demosaic", refining=False)
    assert r.info["refining"] is False and r.halo == 6
    with pytest.raises(UsageError, match="has no option"):
        restorers.get_restorer("bilinear", "demosaic", refining=False)
