"""The transformers engine's prefix store across waves: seconds and cached prompt tokens, on/off.

One process, one engine (the default model, 1 thread unless told otherwise), two waves shaped
like the summarization scorer's, over the first `--sources` distinct sources of
benchmarks/data/frank_dev.jsonl:

  W1: one questions call per source (system message, the fenced source, the questions task);
  W2: `--verify` verify-like calls per source (system message, the fenced source, a fixed task,
      then one sentence of a summary of that source as the claim; the verdict first).

W1 then W2 run with the prefix store off, then with a fresh store on (`--on-first`: the other
way round; the engine's `prefix_store` is swapped between runs: one model load). A warm-up
call on another prompt compiles both schemas first. It prints per run and wave the seconds,
prompt tokens and the share of them served from a cache (`cached_tokens`), and how many
replies are identical. The machine may be shared: it prints the load average before and
after, and the process's CPU seconds beside the wall seconds (with one thread, the work
done, whatever else runs).

    .venv/bin/python scripts/bench_prefix.py
    .venv/bin/python scripts/bench_prefix.py --model smollm2-135m-instruct --sources 2
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from measure import FRANK, transformers_engine, write_json
from measure.datasets import by_source, read_jsonl, sentences
from pydantic import BaseModel, ConfigDict, Field

from evalgpu.engines.base import JudgeReply, JudgeRequest
from evalgpu.prompting import fence, judge_chat
from evalgpu.scorers.summarization import questions_request
from evalgpu.verdicts import Verdict

VERIFY_TASK = """\
Task: judge the claim below against the source alone. supported is true only when the source \
states the claim or directly implies it; numbers, dates and names must match exactly. Give the \
verdict, then a short reason."""


class Checked(Verdict):
    """A verify-like verdict: the verdict first, then a short reason."""

    supported: bool
    reason: str = Field(min_length=1, max_length=100)


class Verify(BaseModel):
    model_config = ConfigDict(extra="forbid")
    verdict: Checked


def rows(n_sources: int, n_claims: int) -> list[tuple[str, list[str]]]:
    """The first `n_sources` distinct sources and `n_claims` summary sentences of each."""
    out = []
    for source, group in list(by_source(read_jsonl(FRANK)).items())[:n_sources]:
        claims: list[str] = []
        for row in group:
            claims += [s for s in sentences(row["summary"]) if len(s) > 20 and s not in claims]
        out.append((source, claims[:n_claims]))
    return out


def waves(n_sources: int, n_claims: int, w1_tokens: int) -> list[list[JudgeRequest]]:
    """W1 (questions per source) and W2 (verify calls per claim)."""
    w1, w2 = [], []
    for source, claims in rows(n_sources, n_claims):
        q = questions_request(source, 3)
        w1.append(JudgeRequest(q.tag, q.messages, q.schema, w1_tokens))
        for claim in claims:
            user = f"{fence('source', source)}\n\n{VERIFY_TASK}\n\n{fence('claim', claim)}"
            w2.append(JudgeRequest("summarization.alignment", judge_chat(user), Verify, 48))
    return [w1, w2]


def run(engine: Any, all_waves: list[list[JudgeRequest]]) -> list[dict[str, Any]]:
    """Each wave in turn: seconds, tokens, replies."""
    out = []
    for requests in all_waves:
        t, cpu = time.perf_counter(), time.process_time()
        replies: list[JudgeReply] = engine.generate(requests)
        seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
        prompt = sum(r.prompt_tokens for r in replies)
        cached = sum(r.cached_tokens for r in replies)
        out.append(
            {
                "requests": len(replies),
                "seconds": round(seconds, 1),
                "cpu_seconds": round(cpu, 1),
                "prompt_tokens": prompt,
                "cached_tokens": cached,
                "cached_share": round(cached / prompt, 3),
                "output_tokens": sum(r.output_tokens for r in replies),
                "texts": [r.text for r in replies],
            }
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sources", type=int, default=4)
    parser.add_argument("--verify", type=int, default=3, help="verify calls per source")
    parser.add_argument("--w1-tokens", type=int, default=64, help="max_tokens of W1 calls")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--on-first", action="store_true", help="run with the store first")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()

    from evalgpu.engines._prefix import PrefixStore

    engine = transformers_engine(args.model, threads=args.threads, batch_size=args.batch_size)
    budget = engine.prefix_store.budget_bytes if engine.prefix_store else 1024 << 20
    all_waves = waves(args.sources, args.verify, args.w1_tokens)
    engine.prefix_store = None
    warm = [
        JudgeRequest(r.tag, judge_chat("Warm-up."), r.schema, 2)
        for r in (all_waves[0][0], all_waves[1][0])
    ]
    engine.generate(warm)  # compiles both schemas, first-call allocations
    results: dict[str, Any] = {"model": args.model, "compute": engine.compute}
    results["threads"], results["load_before"] = engine.threads, os.getloadavg()[0]
    runs = [("off", None), ("on", PrefixStore(budget))]
    for name, store in runs[::-1] if args.on_first else runs:
        engine.prefix_store = store
        print(f"store {name} ...", file=sys.stderr)
        results[name] = run(engine, all_waves)
        if store is not None:
            results["store_mb"] = round(store.nbytes / 2**20, 1)
    results["load_after"] = os.getloadavg()[0]
    print(
        f"{args.model}, {engine.compute}, {engine.threads} thread(s), load "
        f"{results['load_before']:.1f}->{results['load_after']:.1f}, "
        f"store after W2: {results['store_mb']} MB"
    )
    print(
        "| store | wave | requests | prompt tokens | cached share | output tokens "
        "| seconds | CPU seconds |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for name in ("off", "on"):
        for i, w in enumerate(results[name], 1):
            print(
                f"| {name} | W{i} | {w['requests']} | {w['prompt_tokens']} "
                f"| {w['cached_share']:.1%} | {w['output_tokens']} | {w['seconds']} "
                f"| {w['cpu_seconds']} |"
            )
        total = sum(w["seconds"] for w in results[name])
        cpu = sum(w["cpu_seconds"] for w in results[name])
        print(f"| {name} | total | | | | | **{total:.1f}** | **{cpu:.1f}** |")
    for i, (off, on) in enumerate(zip(results["off"], results["on"], strict=True), 1):
        same = sum(a == b for a, b in zip(off["texts"], on["texts"], strict=True))
        print(f"W{i}: {same}/{len(off['texts'])} replies identical with the store on and off")
    if args.json:
        write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
