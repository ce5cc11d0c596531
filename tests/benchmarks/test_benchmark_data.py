"""The dev sets in benchmarks/data/ are the files their README describes, byte for byte.

The README lists one `sha256  name` line per file; a clone whose files differ (a damaged
download, a line-ending conversion, an edited row) fails here instead of skewing a measurement.
"""

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

from benchmarks import agreement, bench

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
CHECKSUM = re.compile(r"^([0-9a-f]{64})  (\S+\.jsonl)$", re.MULTILINE)
DEV_SETS = {"frank_dev.jsonl", "rose_coverage_dev.jsonl", "attribution_dev.jsonl"}


def recorded() -> dict[str, str]:
    text = (DATA / "README.md").read_text(encoding="utf-8")
    return {name: digest for digest, name in CHECKSUM.findall(text)}


def test_the_readme_lists_one_checksum_per_dev_set_and_every_file_is_listed():
    assert set(recorded()) == DEV_SETS
    assert {p.name for p in DATA.glob("*.jsonl")} == DEV_SETS


def test_every_dev_set_matches_its_recorded_sha256():
    for name, digest in recorded().items():
        got = hashlib.sha256((DATA / name).read_bytes()).hexdigest()
        assert got == digest, f"benchmarks/data/{name}: sha256 {got}, README says {digest}"


def test_the_scripts_default_to_the_dev_sets_of_this_checkout(monkeypatch, tmp_path):
    monkeypatch.delenv("EVALGPU_DATA", raising=False)
    assert bench.DATA == agreement.DATA == DATA / "frank_dev.jsonl"
    # Imported afresh in another working folder: the defaults do not depend on it.
    code = "from benchmarks import agreement, bench; print(agreement.DATA); print(bench.DATA)"
    env = {**os.environ, "PYTHONPATH": str(DATA.parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [str(DATA / "frank_dev.jsonl")] * 2
    monkeypatch.chdir(tmp_path)
    # Recorded JSON names a file of the checkout relative to it, and any other file as given.
    assert agreement.rel(agreement.DATA) == bench.rel(DATA / "frank_dev.jsonl")
    assert agreement.rel(agreement.DATA) == "benchmarks/data/frank_dev.jsonl"
    assert agreement.rel(tmp_path / "mine.jsonl") == str(tmp_path / "mine.jsonl")
