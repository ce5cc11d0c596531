"""Which engine should score on a CPU? vLLM's CPU build and the transformers engine, side by side.

Runs agreement.py (`scripts/agreement.py`) once per engine and file, each as a whole process in
turn (vLLM first), on the same rows, judge and environment, and reports for each:

- the process's wall time (start-up, load and compile included) and its scoring time, and
  rows/s of each;
- the agreement with people (FRANK: pair win of the soft alignment and soft score;
  AttributionBench: ROC-AUC of the soft score), and vLLM minus transformers with an interval
  over the same rows (pairs) resampled for both (`agreement.compare`);
- ties: checks whose p is exactly 0.5 (a tie in the logits), and FRANK pairs whose two soft
  scores are equal.

The default rows were never used to develop a prompt or design (FRANK has 84 such pairs; 60-83
are the held-out ones): FRANK pairs 60-67 of the
agreement draw (16 rows) and AttributionBench shuffle positions 300-319 (20 rows).

    .venv/bin/python scripts/engine_trial.py --json docs/measured/engine-trial.json

Both engines must import in the interpreter that runs it (`.venv`, where scripts/setup
installed vLLM's CPU build).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.agreement import compare
from benchmarks.measure import ROOT, module_command, write_json

ENGINES = ("vllm", "transformers")
RUNS = {
    # name -> agreement.py arguments (the rows), the metrics reported
    "frank": (
        ["benchmarks/data/frank_dev.jsonl", "--pairs", "8", "--offset", "60"],
        ("pair_win(alignment_soft)", "pair_win(soft score)", "roc_auc(alignment_soft)"),
    ),
    "attribution": (
        ["benchmarks/data/attribution_dev.jsonl", "--limit", "20", "--offset", "300"],
        ("roc_auc(soft score)", "roc_auc(score)"),
    ),
}


def run(engine: str, rows: list[str], out: Path) -> dict[str, Any]:
    """One agreement.py process: its JSON, with its wall time and peak RSS added."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    cmd, env = module_command("benchmarks.agreement")
    proc = subprocess.run(
        [*cmd, *rows, "--backend", engine, "--json", str(out)], cwd=ROOT, env=env, check=False
    )
    wall = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result = json.loads(out.read_text()) if out.exists() else {}
    result["process_seconds"] = round(wall, 1)
    result["exit_status"] = proc.returncode
    # ru_maxrss of children is the largest of any child so far: exact for the first run only.
    result["peak_rss_gib_children"] = round(max(peak, before) / 2**20, 2)
    return result


def ties(result: dict[str, Any]) -> dict[str, int]:
    """Checks at p exactly 0.5, of all checks with a p; FRANK pairs with equal soft scores."""
    ps = [
        p
        for row in result.get("scored", [])
        for listed in row.get("p", {}).values()
        for p in listed
        if p is not None
    ]
    out = {"checks": len(ps), "p_at_half": sum(p == 0.5 for p in ps)}
    scored = {row["id"]: row for row in result.get("scored", [])}
    if result.get("kind") == "faithfulness":
        soft = [scored[i].get("soft_score") for i in scored]
        out["rows_with_equal_soft_score"] = len(soft) - len(set(soft))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS))
    parser.add_argument("--keep", type=Path, default=None, help="folder for each run's JSON")
    args = parser.parse_args(argv)
    keep = args.keep or Path(tempfile.mkdtemp(prefix="engine-trial-"))
    keep.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"cpu_threads": len(os.sched_getaffinity(0)), "runs": {}}
    for name in args.runs:
        rows, metrics = RUNS[name]
        results = {e: run(e, rows, keep / f"{name}-{e}.json") for e in ENGINES}
        entry: dict[str, Any] = {"rows_args": rows}
        for engine, result in results.items():
            n = result.get("rows", 0)
            entry[engine] = {
                "rows": n,
                "invalid": result.get("invalid"),
                "too_long": result.get("too_long"),
                "exit_status": result["exit_status"],
                "process_seconds": result["process_seconds"],
                "scoring_seconds": result.get("seconds"),
                "rows_per_s_process": round(n / result["process_seconds"], 4),
                "rows_per_s_scoring": (
                    round(n / result["seconds"], 4) if result.get("seconds") else None
                ),
                "metrics": {m: result.get(m) for m in metrics},
                "ties": ties(result),
            }
        if all(r.get("scored") for r in results.values()):
            # Each value's ranking metric (FRANK: pair win; AttributionBench: ROC-AUC).
            entry["vllm_minus_transformers"] = compare(results["vllm"], results["transformers"])
        report["runs"][name] = entry
        print(json.dumps({name: entry}, indent=1), flush=True)
    if args.json:
        write_json(args.json, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
