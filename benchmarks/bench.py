"""Throughput of evalgpu against the way per-row evaluators run, side by side in one run.

On the same engine, model and rows (sources and summaries from FRANK,
benchmarks/data/frank_dev.jsonl unless --data says otherwise), it times:

  (a) evalgpu      `scorer.run_batch(rows)`: every ready call of every row in one generate();
  (b) sequential   each row's judge calls one after another, one request per generate(),
                   no sharing between rows: the way per-row peers (one API call at a time) run;
  (c) ceiling      the identical request lists that (a) sent, one generate() per wave, with
                   no scorer logic: what the engine alone does with that work.

With `--design NAME...` (benchmarks/designs/: evalgpu, the default, mastra-1call, deepeval,
direct) it times each design's summarization scorer in turn on the same rows and engine, each
from a cold prefix cache, and reports per design its rows/s, judge requests per row and the
cached share of prompt tokens (prompt tokens the engine served from its prefix cache).

It prints a markdown table and `speedup batched/sequential: X.XX` as its last line (one line
per design when there are several, `speedup batched/sequential, NAME: X.XX`), and writes the
numbers as JSON.

    .venv/bin/python scripts/bench.py --quick            # the tiny preset, 5 rows, minutes
    .venv/bin/python scripts/bench.py --rows 64 --max-questions 10 --json docs/bench.json
    .venv/bin/python scripts/bench.py --rows 20 --skip-sequential \
        --design evalgpu mastra-1call deepeval direct
    # GPU, 7-8 B judge (see docs/BENCHMARKS.md):
    python scripts/bench.py --backend vllm --model /models/qwen2.5-7b-instruct --rows 2000
    # vLLM's CPU build, tiny preset (VLLM_CPU_KVCACHE_SPACE=2 in the environment):
    .venv/bin/python scripts/bench.py --quick --backend vllm \
        --engine-option dtype=float32 --engine-option enforce_eager=true
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.designs import DEFAULT, DESIGNS
from benchmarks.measure import FRANK as DATA
from benchmarks.measure import rel, write_json
from benchmarks.measure.datasets import documents
from evalgpu import load_engine
from evalgpu.engines.base import Engine, JudgeReply, JudgeRequest
from evalgpu.runner import Runner


@dataclass
class Meter:
    """Wraps an engine: counts generate() calls and tokens, and keeps the request waves."""

    engine: Engine
    calls: int = 0
    requests: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    invalid: int = 0
    waves: list[list[JudgeRequest]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.engine.name

    def generate(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]:
        self.calls += 1
        self.requests += len(requests)
        self.waves.append(list(requests))
        replies = self.engine.generate(requests)
        for reply in replies:
            self.prompt_tokens += reply.prompt_tokens
            self.output_tokens += reply.output_tokens
            self.cached_tokens += reply.cached_tokens
            self.invalid += reply.error is not None
        return replies


class OneAtATime:
    """An engine that sends each request on its own, as a per-row evaluator does."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.name = engine.name

    def generate(self, requests: Sequence[JudgeRequest]) -> list[JudgeReply]:
        return [self.engine.generate([r])[0] for r in requests]


def engine_options(pairs: Sequence[str]) -> dict[str, Any]:
    """`KEY=VALUE` pairs as keyword arguments; a VALUE that parses as JSON is taken as such."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"bench: --engine-option wants KEY=VALUE, got {pair!r}")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def measure(label: str, design: str, meter: Meter, seconds: float, rows: int) -> dict[str, Any]:
    return {
        "mode": label,
        "design": design,
        "rows": rows,
        "seconds": round(seconds, 2),
        "rows_per_s": rows / seconds,
        "prompt_tok_per_s": meter.prompt_tokens / seconds,
        "output_tok_per_s": meter.output_tokens / seconds,
        "prompt_tokens": meter.prompt_tokens,
        "output_tokens": meter.output_tokens,
        "cached_share": meter.cached_tokens / meter.prompt_tokens if meter.prompt_tokens else 0.0,
        "requests_per_row": meter.requests / rows if rows else 0.0,
        "generate_calls": meter.calls,
        "invalid_replies": meter.invalid,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="a small run that ends in minutes on a 2-core CPU"
    )
    parser.add_argument(
        "--model", default=None, help="model folder or preset (default: the embedded model)"
    )
    parser.add_argument(
        "--backend", default="auto", help="auto | vllm | transformers | module:factory"
    )
    parser.add_argument(
        "--engine-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="passed to load_engine (VALUE read as JSON when it parses): dtype=float32, "
        "enforce_eager=true, max_model_len=4096, batch_size=32",
    )
    parser.add_argument("--rows", type=int, default=24)
    parser.add_argument(
        "--docs", type=int, default=None, help="take the rows from this many documents"
    )
    parser.add_argument(
        "--first-doc", type=int, default=0, help="skip this many documents (ordered by text)"
    )
    parser.add_argument("--max-questions", type=int, default=5)
    parser.add_argument(
        "--design",
        nargs="+",
        choices=list(DESIGNS),
        default=[DEFAULT],
        metavar="NAME",
        help="judge designs to time side by side (benchmarks/designs/): evalgpu (default), "
        "mastra-1call, deepeval, direct",
    )
    parser.add_argument(
        "--data", type=Path, default=DATA, help="JSONL with source and summary (default: FRANK)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write the numbers here")
    parser.add_argument("--skip-sequential", action="store_true", help="(b) is the slow one")
    parser.add_argument(
        "--skip-ceiling", action="store_true", help="no (c): designs compared by (a) alone"
    )
    parser.add_argument(
        "--ray",
        action="store_true",
        help="instead: the same rows as local and as Ray sweeps (benchmarks/bench_ray.py)",
    )
    parser.add_argument("--replicas", type=int, default=2, help="with --ray (default: 2)")
    parser.add_argument("--chunk-size", type=int, default=16, help="with --ray (default: 16)")
    parser.add_argument(
        "--synthetic",
        type=int,
        metavar="N",
        help="with --ray: N generated rows instead of FRANK's (for the scripted engine)",
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=None,
        help="with --ray: row counts to time (default: rows/8 and rows)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        # The 5 summaries of one article. Not the first article: on it the default model
        # writes a 1,692-token string of digits, retried at twice that, which at batch 1
        # takes minutes in every mode and measures the tiny model's loop, not the scoring.
        args.rows, args.docs, args.first_doc, args.max_questions = 5, 1, 1, 3
        # The tiny preset: --quick measures batching, not judging, in minutes on a CPU.
        args.model = args.model or "smollm2-135m-instruct"

    args.design = list(dict.fromkeys(args.design))  # each design once, in the order given
    if args.ray:
        if args.design != [DEFAULT]:
            parser.error("--ray times the package's scorers only; leave out --design")
        return ray_main(args)
    rows = documents(args.data, args.rows, args.docs, args.first_doc)
    engine = load_engine(args.model, backend=args.backend, **engine_options(args.engine_option))
    print(
        f"# {len(rows)} rows, max_questions={args.max_questions}, engine={engine.name}",
        file=sys.stderr,
    )

    table: list[dict[str, Any]] = []
    ratios_by_design: dict[str, dict[str, float]] = {}
    for design in args.design:
        modes, ratios = bench_design(design, engine, rows, args)
        table += modes
        ratios_by_design[design] = ratios

    print(
        "| mode | rows/s | prompt tok/s | output tok/s | cached share | requests/row "
        "| generate() calls | invalid |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for m in table:
        print(
            f"| {m['mode']} | {m['rows_per_s']:.3f} | {m['prompt_tok_per_s']:.0f} | "
            f"{m['output_tok_per_s']:.1f} | {m['cached_share']:.0%} | "
            f"{m['requests_per_row']:.1f} | {m['generate_calls']} | {m['invalid_replies']} |"
        )
    print()
    for design, ratios in ratios_by_design.items():
        if "a_over_c" in ratios:
            print(f"(a)/(c), {design} = {ratios['a_over_c']:.2f}")
    first = table[0]
    for m in table[1:]:
        if m["mode"].startswith("(a)"):  # each design's rows/s against the first design's
            print(
                f"rows/s {first['mode']} / {m['mode']}: {first['rows_per_s'] / m['rows_per_s']:.2f}"
            )
    if args.json:
        recorded_args = {
            k: rel(v) if isinstance(v, Path) else str(v) for k, v in vars(args).items()
        }
        write_json(
            args.json,
            {
                "args": recorded_args,
                "modes": table,
                "ratios": ratios_by_design[args.design[0]],
                "ratios_by_design": ratios_by_design,
            },
        )
    for design, ratios in ratios_by_design.items():
        if "a_over_b" in ratios:
            name = "" if len(ratios_by_design) == 1 else f", {design}"
            print(f"speedup batched/sequential{name}: {ratios['a_over_b']:.2f}")
    return 0


def bench_design(
    design: str, engine: Engine, rows: list[dict[str, Any]], args: argparse.Namespace
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Modes (a), (b) and (c) of one design's summarization scorer on `rows`, and their ratios."""

    def scorer(judge: Any) -> Any:
        return DESIGNS[design]("faithfulness", judge, 1.0, args.max_questions)

    # Warm up once (compiles the schemas' constraints, loads kernels) so no mode pays for it.
    scorer(engine).run_batch(rows[:1])

    # Every mode starts with a cold prefix cache (vLLM's outlives a generate() call), so that
    # no mode is served prompts that an earlier mode (or design) computed.
    cold = getattr(engine, "reset_prefix_cache", lambda: None)

    def timed(mode: str, meter: Meter, run: Callable[[], Any]) -> tuple[dict[str, Any], Any]:
        """`run()` timed from a cold prefix cache, as mode `mode` ("(a) run_batch") of `meter`."""
        cold()
        t = time.perf_counter()
        result = run()
        letter, what = mode.split(" ", 1)
        m = measure(f"{letter} {design} {what}", design, meter, time.perf_counter() - t, len(rows))
        print(f"# {letter} {design}: {m['seconds']} s", file=sys.stderr)
        return m, result

    # (a) run_batch over all rows, through a fresh Meter: replies are cached per engine
    # object, so nothing the warm-up asked of the bare engine is answered from a cache.
    batched = Meter(engine)
    a, results = timed("(a) run_batch", batched, lambda: scorer(batched).run_batch(rows))
    a["row_errors"] = sum(r.error is not None for r in results)

    modes, ratios = [a], {}
    # (c) the raw ceiling: the identical request lists of (a), one generate() per wave.
    if not args.skip_ceiling:
        ceiling = Meter(engine)
        c, _ = timed(
            "(c) ceiling, same requests",
            ceiling,
            lambda: [ceiling.generate(wave) for wave in batched.waves],
        )
        modes.append(c)
        ratios["a_over_c"] = a["rows_per_s"] / c["rows_per_s"]
    # (b) sequential: one row at a time, one request per generate(), no reuse between rows.
    if not args.skip_sequential:
        sequential = Meter(engine)
        one_by_one = OneAtATime(sequential)
        scorer_b = scorer(one_by_one)
        b, _ = timed(
            "(b) sequential, per row",
            sequential,
            lambda: [
                Runner(one_by_one, cache=False).run([(scorer_b.id, scorer_b.steps(row))])
                for row in rows
            ],
        )
        modes.insert(1, b)
        ratios["a_over_b"] = a["rows_per_s"] / b["rows_per_s"]
    return modes, ratios


def ray_main(args: argparse.Namespace) -> int:
    """`--ray`: local vs Ray sweeps of the same rows (benchmarks/bench_ray.py)."""
    from benchmarks import bench_ray

    if args.synthetic:
        rows = bench_ray.synthetic_rows(args.synthetic)
    else:
        rows = documents(args.data, args.rows, args.docs, args.first_doc)
    result = bench_ray.compare(
        rows,
        model=args.model,
        backend=args.backend,
        replicas=args.replicas,
        max_questions=args.max_questions,
        chunk_size=args.chunk_size,
        sizes=args.sizes or [max(1, len(rows) // 8), len(rows)],
    )
    print(bench_ray.table(result))
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
