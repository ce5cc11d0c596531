"""Measure the verdict schemas' bounds on the default model (the numbers in docs/SCHEMAS.md).

Three measurements, each printed as JSON lines (one per configuration):

- `compile`: seconds to compile each step's schema into an outlines index (the first use of a
  schema in a process), per bound setting;
- `replies`: valid-reply rate, cut replies and output tokens per step, on real prompts built by
  the scorers' request functions from the dev sets in benchmarks/data/ (or $EVALGPU_DATA);
- `speed`: output tokens per second at several batch sizes (prefill included).

A bound setting is `MAX_CLAIMS,CLAIM_CHARS,REASON_CHARS`: the script patches those constants
(and the schemas and budgets built from them) into `evalgpu.verdicts` and the scorers, so the
requests are exactly what the scorers would send with those bounds.

    python scripts/measure_schemas.py compile --bounds 12,200,120 8,120,120 16,300,120
    python scripts/measure_schemas.py replies --bounds 12,200,120 --rows 12 --batch-size 16
    python scripts/measure_schemas.py speed --batch-sizes 1 16 32

The machine is noted with each line (CPU count and load average): timings on a shared CPU are
noisy.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import re
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path

import evalgpu.verdicts as verdicts
from evalgpu.engines.base import JudgeRequest
from evalgpu.scorers import context_recall, summarization

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("EVALGPU_DATA", ROOT / "benchmarks" / "data"))
"""The dev sets: the checkout's benchmarks/data/ (found from this file), or $EVALGPU_DATA."""
BOUND_NAMES = ("MAX_CLAIMS", "CLAIM_CHARS", "REASON_CHARS")
DUMP: Path | None = None


def variant(bounds: tuple[int, int, int]) -> types.ModuleType:
    """`evalgpu.verdicts` executed again with other bound constants."""
    source = Path(verdicts.__file__).read_text()
    for name, value in zip(BOUND_NAMES, bounds, strict=True):
        source = re.sub(rf"^{name} = \d+", f"{name} = {value}", source, flags=re.M)
    name = "evalgpu_verdicts_" + "_".join(map(str, bounds))
    module = types.ModuleType(name)
    sys.modules[name] = module  # pydantic resolves annotations through sys.modules
    exec(compile(source, verdicts.__file__, "exec"), module.__dict__)
    return module


@contextlib.contextmanager
def use_bounds(bounds: tuple[int, int, int]) -> Iterator[types.ModuleType]:
    """Make the scorers' request functions build requests with `bounds`."""
    v = variant(bounds)
    saved: list[tuple[types.ModuleType, str, object]] = []
    for module in (summarization, context_recall):
        for name in dir(v):
            if name in module.__dict__ and getattr(verdicts, name, None) is module.__dict__[name]:
                saved.append((module, name, module.__dict__[name]))
                setattr(module, name, getattr(v, name))
        for task in ("ALIGNMENT_TASK", "CLAIMS_TASK"):
            if task in module.__dict__:
                saved.append((module, task, module.__dict__[task]))
                text = module.__dict__[task].replace(
                    f"at most {verdicts.MAX_CLAIMS}", f"at most {v.MAX_CLAIMS}"
                )
                setattr(module, task, text)
    try:
        yield v
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def machine() -> dict[str, object]:
    import torch

    return {
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load": [round(x, 2) for x in os.getloadavg()],
    }


def rss_mb() -> float:
    """This process's resident memory (Linux)."""
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def frank_rows(n: int, max_chars: int) -> list[dict]:
    """The first `n` distinct documents of frank_dev (source <= max_chars), one summary each."""
    rows, seen = [], set()
    with (DATA / "frank_dev.jsonl").open() as f:
        for line in f:
            row = json.loads(line)
            if row["source"] in seen or len(row["source"]) > max_chars:
                continue
            seen.add(row["source"])
            rows.append(row)
            if len(rows) == n:
                break
    return rows


def attribution_rows(n: int, max_chars: int) -> list[dict]:
    """The first `n` rows of attribution_dev whose passages total <= max_chars."""
    rows = []
    with (DATA / "attribution_dev.jsonl").open() as f:
        for line in f:
            row = json.loads(line)
            if sum(len(c) for c in row["context"]) <= max_chars:
                rows.append(row)
            if len(rows) == n:
                break
    return rows


def step_requests(
    rows: list[dict], passages: int = 3, max_questions: int = 10
) -> list[JudgeRequest]:
    """One request of each step, built from the first row (for compile timing)."""
    row = rows[0]
    return [
        summarization.alignment_request(row["source"], row["summary"]),
        summarization.questions_request(row["source"], max_questions),
        # The largest coverage and attribution schemas: one verdict per question / claim.
        summarization.coverage_request(row["summary"], ["q"] * max_questions),
        context_recall.claims_request(row["summary"]),
        context_recall.attribution_request(["p"] * passages, ["c"] * context_recall.MAX_CLAIMS),
    ]


def cmd_compile(args: argparse.Namespace) -> None:
    from outlines.backends.outlines_core import OutlinesCoreBackend
    from outlines.models.transformers import TransformerTokenizer
    from outlines_core import Index
    from outlines_core.json_schema import build_regex_from_schema
    from transformers import AutoTokenizer

    tokenizer = TransformerTokenizer(AutoTokenizer.from_pretrained(args.model))
    vocabulary = OutlinesCoreBackend.create_outlines_core_vocabulary(
        tokenizer.get_vocab(),
        tokenizer.eos_token_id,
        tokenizer.eos_token,
        tokenizer.convert_token_to_string,
    )
    rows = frank_rows(1, 10_000)
    for bounds in args.bounds:
        with use_bounds(bounds):
            for request in step_requests(rows, max_questions=args.max_questions):
                regex = build_regex_from_schema(json.dumps(request.schema.model_json_schema()))
                before = rss_mb()
                started = time.monotonic()
                index = Index(regex, vocabulary)
                seconds = time.monotonic() - started
                size = rss_mb() - before
                # Free it for the next measurement (Index.get_transitions() would take GBs).
                del index
                ctypes.CDLL("libc.so.6").malloc_trim(0)
                print(
                    json.dumps(
                        {
                            "measure": "compile",
                            "bounds": dict(zip(BOUND_NAMES, bounds, strict=True)),
                            "step": request.tag,
                            "schema": request.schema.__name__,
                            "max_tokens": request.max_tokens,
                            "regex_chars": len(regex),
                            "index_mb": round(size),
                            "seconds": round(seconds, 2),
                            **machine(),
                        }
                    ),
                    flush=True,
                )


def strings(value: object, key: str = "") -> list[tuple[str, str]]:
    """Every (key, string value) in a parsed JSON reply."""
    if isinstance(value, str):
        return [(key, value)]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in strings(v, k)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v, key)]
    return []


def summarize(
    tag: str, replies: list, budget: int, seconds: float, caps: tuple[int, int, int]
) -> dict[str, object]:
    """One step's numbers; `caps` is its schema's (max items, claim chars, reason chars)."""
    if DUMP is not None:
        with DUMP.open("a") as f:
            for r in replies:
                f.write(
                    json.dumps(
                        {
                            "step": tag,
                            "finish": r.finish_reason,
                            "error": r.error,
                            "output_tokens": r.output_tokens,
                            "text": r.text,
                        }
                    )
                    + "\n"
                )
    out = [r.output_tokens for r in replies]
    errors = [r.error for r in replies if r.error]
    parsed = [r.parsed.model_dump() for r in replies if r.parsed is not None]
    items = [len(next(iter(p.values()))) for p in parsed]
    found = [(k, len(s)) for p in parsed for k, s in strings(p)]
    lengths = [n for _, n in found]
    return {
        "step": tag,
        "n": len(replies),
        "valid": sum(r.error is None for r in replies),
        "cut": sum(r.finish_reason == "length" for r in replies),
        "errors": sorted(set(errors))[:3],
        "max_tokens": budget,
        "output_tokens_mean": round(sum(out) / len(out), 1) if out else 0,
        "output_tokens_max": max(out, default=0),
        "prompt_tokens_mean": round(sum(r.prompt_tokens for r in replies) / max(len(replies), 1)),
        "items_mean": round(sum(items) / len(items), 1) if items else 0,
        "items_max": max(items, default=0),
        "string_chars_max": max(lengths, default=0),
        "string_chars_p90": sorted(lengths)[int(0.9 * (len(lengths) - 1))] if lengths else 0,
        "replies_at_max_items": sum(n >= caps[0] for n in items),
        "strings_at_max_chars": sum(n >= caps[2 if k == "reason" else 1] for k, n in found),
        "chars_per_token_min": round(
            min(
                (len(r.text) / r.output_tokens for r in replies if r.parsed is not None),
                default=0,
            ),
            2,
        ),
        "seconds": round(seconds, 1),
    }


def run_step(engine, requests: list[JudgeRequest]) -> tuple[list, float]:
    """Replies and generation seconds (schemas are compiled first, outside the timing)."""
    for schema in {r.schema for r in requests}:
        started = time.monotonic()
        engine.index(schema)
        print(
            json.dumps(
                {
                    "measure": "compile",
                    "schema": schema.__name__,
                    "seconds": round(time.monotonic() - started, 1),
                }
            ),
            file=sys.stderr,
            flush=True,
        )
    started = time.monotonic()
    replies = engine.generate(requests) if requests else []
    return replies, time.monotonic() - started


def cmd_replies(args: argparse.Namespace) -> None:
    from evalgpu.engines.transformers import TransformersEngine

    engine = TransformersEngine(args.model, batch_size=args.batch_size)
    frank = frank_rows(args.rows, args.max_source_chars)
    attribution = attribution_rows(args.rows, args.max_source_chars)
    for bounds in args.bounds:
        lines = []
        with use_bounds(bounds) as v:
            # Summarization: alignment and questions, then coverage with the questions got.
            first = [summarization.alignment_request(r["source"], r["summary"]) for r in frank]
            first += [
                summarization.questions_request(r["source"], args.max_questions) for r in frank
            ]
            replies, seconds = run_step(engine, first)
            n = len(frank)
            lines.append(
                summarize(
                    "summarization.alignment",
                    replies[:n],
                    first[0].max_tokens,
                    seconds,
                    (v.MAX_CLAIMS, v.CLAIM_CHARS, v.REASON_CHARS),
                )
            )
            lines.append(
                summarize(
                    "summarization.questions",
                    replies[n:],
                    first[n].max_tokens,
                    0,
                    (args.max_questions, v.CLAIM_CHARS, v.REASON_CHARS),
                )
            )
            asked = [
                (r, list(q.parsed.questions))
                for r, q in zip(frank, replies[n:], strict=True)
                if q.parsed is not None and q.parsed.questions
            ]
            second = [summarization.coverage_request(r["summary"], qs) for r, qs in asked]
            replies, seconds = run_step(engine, second)
            budget = second[0].max_tokens if second else 0
            lines.append(
                summarize(
                    "summarization.coverage",
                    replies,
                    budget,
                    seconds,
                    (args.max_questions, v.CLAIM_CHARS, v.REASON_CHARS),
                )
            )
            # Context recall: claims of the ground truth, then attribution to the passages.
            claims = [context_recall.claims_request(r["ground_truth"]) for r in attribution]
            replies, seconds = run_step(engine, claims)
            lines.append(
                summarize(
                    "context_recall.claims",
                    replies,
                    claims[0].max_tokens,
                    seconds,
                    (v.MAX_CLAIMS, v.CLAIM_CHARS, v.REASON_CHARS),
                )
            )
            found = [
                (r, list(c.parsed.claims))
                for r, c in zip(attribution, replies, strict=True)
                if c.parsed is not None and c.parsed.claims
            ]
            checks = [context_recall.attribution_request(r["context"], cs) for r, cs in found]
            replies, seconds = run_step(engine, checks)
            budget = max((c.max_tokens for c in checks), default=0)
            lines.append(
                summarize(
                    "context_recall.attribution",
                    replies,
                    budget,
                    seconds,
                    (v.MAX_CLAIMS, v.CLAIM_CHARS, v.REASON_CHARS),
                )
            )
        for line in lines:
            line = {
                "measure": "replies",
                "bounds": dict(zip(BOUND_NAMES, bounds, strict=True)),
                "batch_size": args.batch_size,
                **line,
                **machine(),
            }
            print(json.dumps(line), flush=True)


def cmd_speed(args: argparse.Namespace) -> None:
    from evalgpu.engines.transformers import TransformersEngine

    engine = TransformersEngine(args.model, batch_size=max(args.batch_sizes))
    rows = attribution_rows(max(args.batch_sizes), 2_000)
    requests = [context_recall.claims_request(r["ground_truth"]) for r in rows]
    engine.generate(requests[:1])  # compile the schema and warm up
    for size in args.batch_sizes:
        engine.batch_size = size
        batch = requests[: max(size, args.min_requests)]
        replies, seconds = run_step(engine, batch)
        tokens = sum(r.output_tokens for r in replies)
        line = {
            "measure": "speed",
            "step": "context_recall.claims",
            "batch_size": size,
            "requests": len(batch),
            "output_tokens": tokens,
            "prompt_tokens_mean": round(sum(r.prompt_tokens for r in replies) / len(replies)),
            "seconds": round(seconds, 1),
            "output_tok_per_s": round(tokens / seconds, 1),
            "valid": sum(r.error is None for r in replies),
            **machine(),
        }
        print(json.dumps(line), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("measure", choices=["compile", "replies", "speed"])
    parser.add_argument("--model", default="models/smollm2-135m-instruct")
    parser.add_argument(
        "--bounds",
        nargs="+",
        type=lambda s: tuple(int(x) for x in s.split(",")),
        default=[(verdicts.MAX_CLAIMS, verdicts.CLAIM_CHARS, verdicts.REASON_CHARS)],
        help="MAX_CLAIMS,CLAIM_CHARS,REASON_CHARS (several settings allowed)",
    )
    parser.add_argument("--rows", type=int, default=12)
    parser.add_argument("--max-source-chars", type=int, default=2500)
    parser.add_argument("--max-questions", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16, 32])
    parser.add_argument("--min-requests", type=int, default=4, help="speed: requests per size")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch default)")
    parser.add_argument("--dump", type=Path, help="replies: append every reply to this JSONL")
    args = parser.parse_args()
    global DUMP
    DUMP = args.dump
    if DUMP is not None:
        DUMP.parent.mkdir(parents=True, exist_ok=True)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    {"compile": cmd_compile, "replies": cmd_replies, "speed": cmd_speed}[args.measure](args)


if __name__ == "__main__":
    main()
