"""Shared fixtures."""

from __future__ import annotations

import os

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs one worker per core: each worker's PyTorch (and the interpreters its tests
    # start) on one thread, so that the workers do not fight over the cores
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"



@pytest.fixture(params=["pytorch", "native"])
def either_backend(request):
    """Run a test on the PyTorch path and on the optional native kernels (skipped if they do
    not build here)."""
    from gsprestore.core import backend as BK

    if request.param == "pytorch":
        with BK.use("torch"):
            yield request.param
        return
    if not BK.native_available():
        pytest.skip(f"native kernels unavailable: {BK.error()}")
    yield request.param


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory):
    """The wheel ``pip install .`` would install, built once from a clean copy of the sources
    (no stale build/ folder or in-place ``.so`` can leak in; setup.py compiles the kernels);
    skips where no wheel can be built."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        if (root / name).exists():
            shutil.copy2(root / name, src / name)
    shutil.copytree(root / "gsprestore", src / "gsprestore",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", "-w", str(tmp), str(src)],
        capture_output=True, text=True, cwd=tmp,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {proc.stderr.strip().splitlines()[-1:]}")
    (wheel,) = tmp.glob("gsprestore-*.whl")
    return wheel


@pytest.fixture
def slowed(monkeypatch):
    """``slowed(module, name, seconds=0.6)``: ``module.name`` made to sleep before it runs, with
    progress lines every 0.15 s (``GSPRESTORE_PROGRESS_INTERVAL``): a long run in a short test."""
    import time

    def slow_down(module, name: str, seconds: float = 0.6) -> None:
        real = getattr(module, name)

        def slow(*args, **kwargs):
            time.sleep(seconds)
            return real(*args, **kwargs)

        monkeypatch.setenv("GSPRESTORE_PROGRESS_INTERVAL", "0.15")
        monkeypatch.setattr(module, name, slow)

    return slow_down


# The tests `make test-fast` (pytest -m "not slow") leaves out, besides those marked in place: the
# slowest ones, as measured (pytest --durations=0 on 2 shared cores, 2026-11-28), kept in one list
# so that marking them touches no test file. Each module keeps at least one fast test (but
# test_training_traffic.py, whose one test runs a research script for 20 s). An entry is
# "file::test" (every parametrisation) or a full node id; a stale entry (its file collected, the
# test gone) is an error, so the list cannot silently rot.
SLOW: set[str] = {
    "test_adversarial.py::test_a_killed_build_cannot_hang_a_later_run",
    "test_adversarial.py::test_oriented_mosaic_is_demosaicked_in_sensor_order[uint16]",
    "test_adversarial.py::test_recursive_discovery_visits_each_real_folder_once",
    "test_adversarial.py::test_recursive_glob_through_link_loops_ends",
    "test_adversarial.py::test_signal_during_a_write_leaves_no_part_file[15]",
    "test_adversarial.py::test_signal_during_a_write_leaves_no_part_file[2]",
    "test_adversarial.py::test_two_runs_on_one_output_folder_share_the_work",
    "test_benchmark.py::test_cli_weights_option_scores_a_weights_file",
    "test_camera_files.py::test_compare_and_explain_open_camera_raw",
    "test_cg_adjoint.py::test_gradcheck_float64",
    "test_cg_adjoint.py::test_gradcheck_float64_native_backward",
    "test_cg_adjoint.py::test_shipped_models_gradients_equal_reference",
    "test_cli_restore.py::test_a_long_file_prints_progress_lines_when_stderr_is_not_a_terminal",
    "test_cli_restore.py::test_console_script_error_is_one_line",
    "test_cli_restore.py::test_each_bad_input_is_one_line_naming_the_file",
    "test_cost_model.py::test_analytic_flops_match_the_dispatch_count[ugtv_demosaic-None-24-40]",
    "test_cost_model.py::test_analytic_flops_match_the_dispatch_count[ugtv-lite_demosaic-opts2-24-40]",
    "test_cost_model.py::test_analytic_flops_match_the_dispatch_count[uglr-lite_demosaic-opts4-23-37]",
    "test_defaults.py::test_models_table_keeps_every_description_at_80_columns_and_piped",
    "test_distributed.py::test_a_rank_that_stops_answering_ends_the_job_after_the_collective_timeout",
    "test_distributed.py::test_a_rank_without_patches_in_the_last_batch_still_steps_with_the_others",
    "test_distributed.py::test_a_world_size_that_does_not_divide_the_global_batch_is_refused_in_one_line",
    "test_distributed.py::test_cosine_time_ranks_agree_on_the_learning_rate_and_keep_equal_weights",
    "test_distributed.py::test_shards_of_an_array_job_share_the_files",
    "test_distributed.py::test_sigterm_on_one_rank_stops_both_with_a_checkpoint_and_the_run_resumes_on_one",
    "test_distributed.py::test_the_ranks_agree_on_the_time_budget",
    "test_distributed.py::test_two_ranks_under_torchrun_train_the_weights_of_one_rank",
    "test_distributed.py::test_two_ranks_write_each_file_once_and_the_union_is_one_ranks_output",
    "test_docs_examples.py::test_doc_example_runs[cli.md:benchmark --task demosaic --dataset custom --data]",
    "test_docs_examples.py::test_doc_example_runs[cli.md:compare photo.png --methods menon,ugtv,ugtv+se -o]",
    "test_docs_examples.py::test_doc_example_runs[cli.md:compare photo.png --task demosaic --methods bilin]",
    "test_docs_examples.py::test_doc_example_runs[cli.md:demosaic IMG_0042.dng]",
    "test_docs_examples.py::test_doc_example_runs[cli.md:explain IMG_0042.dng --method igtv -o explain-raw]",
    "test_docs_examples.py::test_doc_example_runs[cli.md:explain photo.png --method igtv --task demosaic -]",
    "test_docs_examples.py::test_doc_example_runs[cli.md:explain photo.png --method ugtv --weights my_ugtv]",
    "test_docs_examples.py::test_doc_example_runs[cli.md:upscale2x folder/ -o big/ --prior gtv]",
    "test_docs_examples.py::test_doc_example_runs[cli.md:upscale2x photo.png -o photo-2x.png --best]",
    "test_docs_examples.py::test_help_shows_no_python_type_tags",
    "test_ensemble.py::test_the_api_and_the_engine_run_it_tiled_like_untiled",
    "test_graph.py::test_gradcheck_full_jacobian_tiny",
    "test_graph_backward.py::test_gradcheck[lbar]",
    "test_graph_backward.py::test_gradcheck[normalized]",
    "test_graph_backward.py::test_normalized_weights_broadcast_heads",
    "test_hostile.py::test_dev_zero_and_a_fifo_are_refused_before_they_are_opened",
    "test_hostile.py::test_json_to_a_full_device_is_one_line",
    "test_hostile.py::test_output_names_longer_than_name_max",
    "test_hostile.py::test_truncated_dng_is_one_line_with_libraws_words",
    "test_hostile.py::test_weights_pickle_that_would_run_code_is_one_whole_line",
    "test_sampling.py::test_mosaic_command_does_not_import_torch",
    "test_shipped_weights.py::test_shipped_model_clearly_beats_the_classical_baseline",
    "test_shipped_weights.py::test_shipped_model_reproduces_its_recorded_chart_scores",
    "test_solvers.py::test_admm_history_and_gradients",
    "test_solvers.py::test_admm_reaches_lp_optimum",
    "test_solvers.py::test_gradcheck_admm_edge_step",
    "test_solvers.py::test_gradcheck_solvers[pytorch]",
    "test_training.py::test_cli_smoke_run_with_the_real_model",
    "test_training.py::test_cosine_time_schedule_anneals_over_the_budget",
    "test_training.py::test_init_adopts_the_weights_own_configuration",
    "test_training.py::test_keep_freed_memory_reuses_pages_instead_of_faulting_them_in",
    "test_training.py::test_log_has_a_record_at_least_every_interval",
    "test_training.py::test_progress_lines_by_the_clock_when_stderr_is_not_a_terminal",
    "test_training.py::test_python_dash_m_runs_the_cli",
    "test_training.py::test_set_mmap_threshold_gives_large_blocks_their_own_mapping",
    "test_training.py::test_time_budget_budgets_the_first_step_too",
    "test_training.py::test_time_budget_validates_and_exports_before_the_deadline",
    "test_training.py::test_train_help_shows_every_default_it_names",
    "test_training_traffic.py::test_fused_training_step_moves_and_launches_less_than_the_unfused_one",
    "test_trainpack.py::test_pack_is_deterministic_and_refuses_to_overwrite",
    "test_trainpack.py::test_split_budget_texture_and_lossless_crops",
    "test_trainpack.py::test_training_uses_the_recorded_split",
    "test_trainpack.py::test_uniform_draw_takes_flat_crops_too",
    "test_visualize.py::test_a_long_explain_prints_progress_lines_when_stderr_is_not_a_terminal",
    "test_weights.py::test_ship_tool_records_benchmark_rows",
    "test_user_files.py::test_closed_standard_output",
    "test_user_files.py::test_a_second_train_into_one_out_is_refused",
    "test_user_files.py::test_train_on_an_empty_folder_prints_only_its_error",
    "test_user_files.py::test_scoring_a_large_image_needs_strips_not_whole_image_copies",
    "test_benchmark.py::test_make_results_end_to_end",
}


@pytest.hookimpl(tryfirst=True)  # before -m "not slow" deselects
def pytest_collection_modifyitems(config, items):
    from pathlib import Path

    seen_files, matched = set(), set()
    for item in items:
        file = Path(item.nodeid.split("::")[0]).name
        seen_files.add(file)
        base = f"{file}::{item.nodeid.split('::', 1)[1].split('[')[0]}"
        full = f"{file}::{item.nodeid.split('::', 1)[1]}"
        for key in (base, full):
            if key in SLOW:
                item.add_marker(pytest.mark.slow)
                matched.add(key)
    # the slow tests first, so that on several workers (`make test`) they tend to start early
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    stale = sorted(k for k in SLOW if k.split("::")[0] in seen_files and k not in matched)
    whole_files = not any("::" in str(a) for a in config.args)  # not one test picked out of a file
    if stale and whole_files and not config.getoption("keyword") and not config.getoption("deselect"):
        raise pytest.UsageError(f"tests/conftest.py SLOW names tests that do not exist: {stale}")
