"""The dev sets in benchmarks/data/ are the files their README describes, byte for byte.

The README lists one `sha256  name` line per file; a clone whose files differ (a damaged
download, a line-ending conversion, an edited row) fails here instead of skewing a measurement.
"""

import hashlib
import re
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data"
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
