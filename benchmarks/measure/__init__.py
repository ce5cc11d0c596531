"""What the measurement scripts share: the checkout's paths, results written as JSON, memory.

- `benchmarks.measure` (here): `ROOT`, `DATA_DIR`, `FRANK`, `rel`, `write_json`, `vmrss_kib`,
  `transformers_engine`, `module_command`;
- `benchmarks.measure.datasets`: reading the data sets of benchmarks/data/ (FRANK pairs,
  documents);
- `benchmarks.measure.stats`: the agreement statistics (scipy) and their bootstrap intervals.

Only `benchmarks.measure.stats` needs scipy (the `dev` extra), so that bench.py also runs where
it is missing.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "DATA_DIR",
    "FRANK",
    "ROOT",
    "module_command",
    "rel",
    "transformers_engine",
    "vmrss_kib",
    "write_json",
]

ROOT = Path(__file__).resolve().parents[2]
"""The checkout: `benchmarks` is imported from it, never installed."""
DATA_DIR = ROOT / "benchmarks" / "data"
"""The dev sets, found from this file, so that any working folder works."""
FRANK = DATA_DIR / "frank_dev.jsonl"
"""The default rows of agreement.py and bench.py: FRANK's dev set."""


def rel(path: Path) -> str:
    """`path` relative to the checkout when it lies inside it (recorded JSON names no machine)."""
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(path)


def write_json(path: Path, value: Any, indent: int = 2) -> None:
    """`value` as indented JSON in `path` (its folder made when missing), with a last newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=indent) + "\n")


def vmrss_kib(pid: int | str = "self") -> int | None:
    """A process's resident memory now (Linux VmRSS), in KiB; None once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def transformers_engine(model: str, **options: Any) -> Any:
    """The transformers engine on `model` (a folder or preset name), imported only when called."""
    from evalgpu.engines.transformers import TransformersEngine
    from evalgpu.models import resolve_model

    return TransformersEngine(str(resolve_model(model)), **options)


def module_command(module: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of `python -m module` in a fresh process that imports
    this checkout's `benchmarks` (its root first on PYTHONPATH), from any working folder."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return [sys.executable, "-m", module], env
