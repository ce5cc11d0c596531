"""Memory of `python -m evalgpu run` as the dataset grows: flat, whatever the file size.

Generates JSON Lines files of N rows (distinct sources, summaries, ground truths, contexts),
scores each with both scorers through the real CLI in a subprocess, on the scripted engine
(`--backend scripted`, rule-based, no model; loaded so that it keeps no record of its calls), and
samples the subprocess's resident memory every 0.2 s. Then runs the same command again, which
finds every row done (resume). Prints a markdown table (rows, file size, wall time, rows/s,
peak RSS, RSS at 25/50/75/95 % of the run, the re-run's time and peak) and writes it as JSON.

    .venv/bin/python scripts/bench_memory.py                    # 10 K and 100 K rows
    .venv/bin/python scripts/bench_memory.py --rows 1000 --rows 100000 --json docs/memory.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.measure import ROOT, vmrss_kib, write_json

NAMES = ["Ada", "Bruno", "Chen", "Dalia", "Emeka", "Freya", "Goran", "Hana", "Ivo", "Jun"]
THINGS = ["bakery", "shipyard", "library", "observatory", "brewery", "clinic", "theatre", "mill"]
CITIES = ["Lyon", "Porto", "Tartu", "Kyoto", "Austin", "Accra", "Perth", "Bergen", "Cusco"]


def row(i: int, rng: random.Random) -> dict[str, Any]:
    """One row with every field both scorers read; texts differ from row to row."""
    name, thing, city = rng.choice(NAMES), rng.choice(THINGS), rng.choice(CITIES)
    year, staff, grown = 1850 + rng.randrange(170), rng.randrange(2, 50), rng.randrange(60, 900)
    source = (
        f"The {thing} number {i} was founded in {year} by {name}. It started with {staff} "
        f"employees and grew to {grown} by 2020. The {thing} is based in {city}. "
        f"Its records are kept in archive {i % 997}."
    )
    summary = rng.choice(
        [
            f"{name} founded the {thing} number {i} in {year}. It is based in {city}.",
            f"The {thing} number {i} grew to {grown} employees by 2020.",
            f"{name} founded the {thing} number {i} in {year + 1} in {city}.",
        ]
    )
    return {
        "id": f"row-{i}",
        "source": source,
        "summary": summary,
        "input": f"Who founded the {thing} number {i}?",
        "ground_truth": f"{name} founded the {thing} number {i}. It is based in {city}.",
        "context": [
            f"The {thing} number {i} was founded by {name} in {year}.",
            f"The {thing} number {i} is based in {rng.choice(CITIES)}.",
        ],
    }


def generate(path: Path, n: int) -> None:
    rng = random.Random(1234)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps(row(i, rng)) + "\n")


def measure(data: Path, out: Path, chunk_size: int) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src")
    argv = [
        sys.executable,
        "-m",
        "evalgpu",
        "run",
        str(data),
        "--scorer",
        "summarization",
        "--scorer",
        "context-recall",
        "--out",
        str(out),
        "--chunk-size",
        str(chunk_size),
        "--backend",
        "scripted",
        "--progress",
        "off",
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.monotonic()
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    samples: list[tuple[float, int]] = []
    while proc.poll() is None:
        kib = vmrss_kib(proc.pid)
        if kib is not None:
            samples.append((time.monotonic() - started, kib))
        time.sleep(0.2)
    wall = time.monotonic() - started
    stderr = proc.stderr.read() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"the run failed ({proc.returncode}):\n{stderr}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    rows = sum(1 for _ in open(data, "rb"))
    records = sum(1 for _ in open(out / "results.jsonl", "rb"))

    def at(share: float) -> float | None:
        chosen = [kib for t, kib in samples if t >= share * wall]
        return round(chosen[0] / 1024, 1) if chosen else None

    return {
        "rows": rows,
        "records": records,
        "file_mib": round(data.stat().st_size / 2**20, 1),
        "results_mib": round((out / "results.jsonl").stat().st_size / 2**20, 1),
        "wall_s": round(wall, 1),
        "rows_per_s": round(rows / wall, 1),
        # ru_maxrss of the children is a high-water mark over all of them so far: the runs go
        # from small to large, so each run's value is its own peak unless an earlier run's was
        # higher (then the sampled peak below tells).
        "peak_rss_mib": round(max(peak, before) / 1024, 1) if peak > before else None,
        "sampled_peak_mib": round(max(k for _, k in samples) / 1024, 1) if samples else None,
        "rss_mib_at": {f"{int(s * 100)}%": at(s) for s in (0.25, 0.5, 0.75, 0.95)},
        "last_line": stderr.strip().splitlines()[-1] if stderr.strip() else "",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", type=int, action="append", help="file sizes (default 10000, 100000)"
    )
    parser.add_argument("--chunk-size", type=int, default=256)
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--keep", type=Path, help="keep the files and outputs in this folder")
    args = parser.parse_args(argv)
    sizes = sorted(args.rows or [10_000, 100_000])
    results = []
    with tempfile.TemporaryDirectory(prefix="evalgpu-bench-memory-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for n in sizes:
            data = work / f"rows-{n}.jsonl"
            generate(data, n)
            out = work / f"out-{n}"
            if out.exists():
                raise SystemExit(f"{out} exists; remove it or use another --keep folder")
            results.append(measure(data, out, args.chunk_size))
            print(f"{n:,} rows done: {results[-1]['last_line']}", file=sys.stderr)
            # The same command again: it reads results.jsonl, finds every row done, scores none.
            rerun = measure(data, out, args.chunk_size)
            results[-1]["rerun"] = {
                k: rerun[k] for k in ("wall_s", "sampled_peak_mib", "last_line")
            }
            print(f"{n:,} rows again: {rerun['last_line']}", file=sys.stderr)
    print(
        "| rows | file MiB | results MiB | wall s | rows/s | peak RSS MiB "
        "| RSS at 25/50/75/95 % MiB | re-run (all done): s, peak MiB |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for r in results:
        at = " / ".join(str(v) for v in r["rss_mib_at"].values())
        peak = r["peak_rss_mib"] or r["sampled_peak_mib"]
        print(
            f"| {r['rows']:,} | {r['file_mib']} | {r['results_mib']} | {r['wall_s']} | "
            f"{r['rows_per_s']} | {peak} | {at} | "
            f"{r['rerun']['wall_s']}, {r['rerun']['sampled_peak_mib']} |"
        )
    if args.json:
        write_json(args.json, {"chunk_size": args.chunk_size, "runs": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
