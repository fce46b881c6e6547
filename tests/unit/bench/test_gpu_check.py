"""bench/gpu_check.py from an NVML recording: detection, carving and the jobs' environment
run for real (CUDA itself is not here, so no verdict), and a machine without GPUs says so."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
H100X2 = ROOT / "tests" / "unit" / "agent" / "detect" / "fixtures" / "nvml" / "h100x2.json"
NO_NVML = H100X2.with_name("no-nvml.json")


def gpu_check():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


def test_from_a_recording_each_job_gets_its_slots_environment(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert gpu_check().main(["--fake", str(H100X2)]) == 0
    lines = capsys.readouterr().out.splitlines()
    jobs = [line for line in lines if " slot " in line]
    assert len(jobs) == 4
    assert "AssignedGPUs='GPU-3f1a6c2e'" in jobs[0]
    assert "CUDA_VISIBLE_DEVICES='GPU-3f1a6c2e-7b94-d0e5-18a2-5c9e4f7b2d61'" in jobs[0]
    assert "CUDA_VISIBLE_DEVICES='10000'" in jobs[1]
    assert "CUDA_VISIBLE_DEVICES='GPU-3f1a6c2e'" in jobs[2]  # AUTO_SET_NVIDIA_VISIBLE_DEVICES false


def test_no_gpu_is_a_clear_line_and_success(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_check().main(["--fake", str(NO_NVML)]) == 0
    assert "no NVIDIA GPU here" in capsys.readouterr().out
