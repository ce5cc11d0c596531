"""The same rows through two engines: do they list the same claims and questions, and reach the
same verdicts with the same p?

Scores `examples/summarization.jsonl` and `examples/context_recall.jsonl` with the same judge
through each engine in turn, in one process (vLLM first, then the transformers engine), and
compares the records row by row:

- claims (summarization: the alignment claims; context recall: the ground truth's claims) and
  questions, as lists: identical or not;
- every check the two runs share (the same row, kind and text): the hard verdict, and |Δp|;
- p tied at exactly 0.5 in each engine (a tie in the logits).

It prints one line per scorer and writes everything as JSON (`--json`). `engine_agreement`
is what tests/engines/test_engines_agree.py asserts on (the same rows, the same verdicts).

    .venv/bin/python scripts/compare_engines.py --json out/compare.json
    .venv/bin/python scripts/compare_engines.py --vllm-option dtype=float32
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from benchmarks.measure import ROOT, rel, write_json

EXAMPLES = {
    "summarization": ROOT / "examples" / "summarization.jsonl",
    "context-recall": ROOT / "examples" / "context_recall.jsonl",
}
"""Scorer name -> the rows it scores by default."""

CHECKS = {
    # scorer -> (record path of the list of checks, field of the text, field of the verdict)
    "summarization": (
        (("preprocessStepResult", "alignment"), "claim", "supported"),
        (("analyzeStepResult", "coverage"), "question", "answered"),
    ),
    "context-recall": ((("analyzeStepResult", "verdicts"), "claim", "attributed"),),
}


def texts(record: Mapping[str, Any], scorer: str) -> dict[str, list[str]]:
    """The lists a judge wrote for a record: its claims, and (summarization) its questions."""
    pre = record.get("preprocessStepResult") or {}
    if scorer == "summarization":
        return {
            "claims": [c["claim"] for c in pre.get("alignment", [])],
            "questions": list(pre.get("questions", [])),
        }
    return {"claims": list(pre.get("claims", []))}


def checks(record: Mapping[str, Any], scorer: str) -> dict[tuple[str, int, str], dict[str, Any]]:
    """A record's checks by (kind, position, text): the verdict and its p."""
    found: dict[tuple[str, int, str], dict[str, Any]] = {}
    for path, text_field, verdict_field in CHECKS[scorer]:
        node: Any = record
        for key in path:
            node = (node or {}).get(key)
        for i, check in enumerate(node or []):
            found[(path[-1], i, check[text_field])] = {
                "verdict": bool(check[verdict_field]),
                "p": check.get("p"),
            }
    return found


def engine_agreement(
    a: Iterable[Mapping[str, Any]], b: Iterable[Mapping[str, Any]], scorer: str
) -> dict[str, Any]:
    """How two engines' records of the same rows agree (records matched by row id).

    Returns the rows compared, the rows whose claims (and questions) are identical (but for a
    final full stop), the checks
    both made (same row, kind, position and text), how many of those have the same hard verdict,
    the median and largest |Δp|, the rows missing or failed in either run, and each run's p
    tied at exactly 0.5.
    """
    first = {r["id"]: r for r in a}
    second = {r["id"]: r for r in b}
    rows = [i for i in first if i in second and not first[i]["error"] and not second[i]["error"]]
    same_lists: dict[str, int] = {}
    differing: list[dict[str, Any]] = []
    shared = same = 0
    deltas: list[float] = []
    ties = [0, 0]
    for row in rows:
        lists_a, lists_b = texts(first[row], scorer), texts(second[row], scorer)
        for name in lists_a:
            if _plain(lists_a[name]) == _plain(lists_b[name]):
                same_lists[name] = same_lists.get(name, 0) + 1
            else:
                differing.append(
                    {
                        "id": row,
                        "list": name,
                        "a": lists_a[name],
                        "b": lists_b[name],
                        "shared_prefix": _shared_prefix(lists_a[name], lists_b[name]),
                    }
                )
        checks_a, checks_b = checks(first[row], scorer), checks(second[row], scorer)
        for key in checks_a.keys() & checks_b.keys():
            shared += 1
            same += checks_a[key]["verdict"] == checks_b[key]["verdict"]
            pa, pb = checks_a[key]["p"], checks_b[key]["p"]
            if pa is not None and pb is not None:
                deltas.append(abs(pa - pb))
        for side, found in enumerate((checks_a, checks_b)):
            ties[side] += sum(c["p"] == 0.5 for c in found.values())
    return {
        "scorer": scorer,
        "rows": len(rows),
        "rows_missing_or_failed": sorted((first.keys() | second.keys()) - set(rows)),
        "same_lists": {name: same_lists.get(name, 0) for name in texts({}, scorer)},
        "differing_lists": differing,
        "checks_shared": shared,
        "same_verdicts": same,
        "same_verdict_share": same / shared if shared else None,
        "median_abs_dp": statistics.median(deltas) if deltas else None,
        "max_abs_dp": max(deltas) if deltas else None,
        "ties_at_half": {"a": ties[0], "b": ties[1]},
    }


def score(engine: Any, scorer: str, data: Path) -> list[dict[str, Any]]:
    """Every record of `data` scored by `scorer` on `engine` (in memory, no output folder)."""
    from evalgpu import create_context_recall_scorer, create_summarization_scorer, evaluate

    if scorer == "summarization":
        made = create_summarization_scorer(engine)
    else:
        made = create_context_recall_scorer(engine, context=["(each row brings its context)"])
    return list(evaluate(data, [made]))


def run_engine(
    backend: str, model: str, options: Mapping[str, Any], data: Mapping[str, Path]
) -> dict[str, Any]:
    """Load one engine, score every file, close it; records and seconds per step."""
    from evalgpu import load_engine

    started = time.perf_counter()
    engine = load_engine(model, backend=backend, **options)
    loaded = time.perf_counter()
    records: dict[str, list[dict[str, Any]]] = {}
    seconds: dict[str, float] = {"load": loaded - started}
    for scorer, path in data.items():
        t = time.perf_counter()
        records[scorer] = score(engine, scorer, path)
        seconds[scorer] = time.perf_counter() - t
    close = getattr(engine, "close", None)
    if close is not None:
        close()
    del engine
    gc.collect()
    return {"backend": backend, "options": dict(options), "seconds": seconds, "records": records}


def compare(
    model: str,
    vllm_options: Mapping[str, Any],
    transformers_options: Mapping[str, Any],
    data: Mapping[str, Path] = EXAMPLES,
) -> dict[str, Any]:
    """Both engines on the same rows; their runs and `engine_agreement` per scorer."""
    runs = [
        run_engine("vllm", model, vllm_options, data),
        run_engine("transformers", model, transformers_options, data),
    ]
    return {
        "model": model,
        "data": {scorer: rel(path) for scorer, path in data.items()},
        "runs": runs,
        "agreement": {
            scorer: engine_agreement(runs[0]["records"][scorer], runs[1]["records"][scorer], scorer)
            for scorer in data
        },
    }


def parse_option(text: str) -> tuple[str, Any]:
    """`name=value`, the value read as JSON when it parses (true, 2, "x"), else as a string."""
    name, _, value = text.partition("=")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--vllm-option", action="append", default=[], type=parse_option)
    parser.add_argument("--transformers-option", action="append", default=[], type=parse_option)
    parser.add_argument("--json", type=Path, help="write the comparison here")
    args = parser.parse_args(argv)
    result = compare(args.model, dict(args.vllm_option), dict(args.transformers_option))
    for scorer, found in result["agreement"].items():
        lists = ", ".join(f"{n} {k}/{found['rows']}" for n, k in found["same_lists"].items())
        print(
            f"{scorer}: same {lists}; verdicts {found['same_verdicts']}/{found['checks_shared']}; "
            f"median |dp| {found['median_abs_dp']}; ties at 0.5 vllm {found['ties_at_half']['a']}"
            f", transformers {found['ties_at_half']['b']}"
        )
    for run in result["runs"]:
        print(
            f"{run['backend']}: " + ", ".join(f"{k} {v:.1f} s" for k, v in run["seconds"].items())
        )
    if args.json:
        write_json(args.json, result)
    return 0


def _shared_prefix(a: list[str], b: list[str]) -> int:
    """How many items two lists share before they first part (greedy lists part once, at a
    near tie, and go their own ways from there)."""
    shared = 0
    for x, y in zip(_plain(a), _plain(b), strict=False):
        if x != y:
            break
        shared += 1
    return shared


def _plain(items: list[str]) -> list[str]:
    """A list's texts without a final full stop: "X." and "X" are one claim (the engines' greedy
    choices part there on a near tie: eiffel-missed, EPYC AVX512-BF16, 2026-12-07)."""
    return [item.strip().removesuffix(".") for item in items]


if __name__ == "__main__":
    raise SystemExit(main())
