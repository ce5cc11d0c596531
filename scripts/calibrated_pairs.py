"""The command line of `benchmarks.calibrated_pairs` (its docstring says how to run it)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, for `benchmarks`

from benchmarks.calibrated_pairs import main

if __name__ == "__main__":
    raise SystemExit(main())
