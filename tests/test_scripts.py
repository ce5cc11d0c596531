"""scripts/: the commands a user runs (the measurements' own tests: tests/benchmarks/)."""

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENTRY_POINTS = sorted(p.stem for p in (ROOT / "scripts").glob("*.py"))


def test_every_measurement_has_its_entry_point_in_scripts():
    modules = {p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "__init__"}
    # bench_ray is no command of its own: `scripts/bench.py --ray` runs it.
    assert set(ENTRY_POINTS) == modules - {"bench_ray"}


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_an_entry_point_runs_its_measurements_command_line(name, monkeypatch, capsys):
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "argv", [f"scripts/{name}.py", "--help"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(ROOT / "scripts" / f"{name}.py"), run_name="__main__")
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: {name}.py")


def test_an_entry_point_runs_from_any_working_folder(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "agreement.py"), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: agreement.py")


def test_gpu_check_without_a_gpu_says_so_in_one_line_and_passes(tmp_path):
    import subprocess

    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(
        [str(ROOT / "scripts" / "gpu-check"), str(tmp_path / "no-model")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"gpu-check: no CUDA GPU visible to {sys.executable} (torch sees none): nothing to check"
    ]
