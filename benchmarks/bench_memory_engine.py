"""Peak memory and speed of the transformers engine on one wave of real judge requests.

Two waves, each in a fresh subprocess (so that one's peak does not hide the other's):

- `frank`: the alignment and questions requests of the first 8 sources of
  benchmarks/data/frank_dev.jsonl (16 requests, articles of ~1,000 tokens);
- `attribution`: attribution requests of the 16 rows of benchmarks/data/attribution_dev.jsonl
  with the longest contexts (the ground truth cut into sentences stands in for its claims).

Each child samples its own resident memory (/proc/self/status VmRSS) every 50 ms, reports
the peak (and `ru_maxrss`) after loading and after the wave, and aborts the wave above
`--abort-gb` (so that a regression cannot take the machine down). `--max-tokens` caps each
request's reply budget: the prefill and the KV cache, not the reply length, set the peak, and
a cap keeps a run short.

    .venv/bin/python scripts/bench_memory_engine.py --model smollm2-135m-instruct
    .venv/bin/python scripts/bench_memory_engine.py --wave frank --max-tokens 64 --json out.json
    .venv/bin/python scripts/bench_memory_engine.py --wave frank --compute float32 --batch-size 4
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

from benchmarks.measure import DATA_DIR, module_command, transformers_engine, vmrss_kib, write_json
from benchmarks.measure.datasets import by_source, read_jsonl, sentences


def vmrss_gb() -> float:
    """This process's resident memory now, in GB (VmRSS KiB / 1e6, as ru_maxrss below)."""
    return (vmrss_kib() or 0) / 1e6


class Sampler(threading.Thread):
    """Samples VmRSS every 50 ms, keeping every sample since `reset`; kills the process above
    `abort_gb`."""

    def __init__(self, abort_gb: float) -> None:
        super().__init__(daemon=True)
        self.abort_gb = abort_gb
        self.samples: list[float] = []

    def reset(self) -> None:
        self.samples = []

    @property
    def peak(self) -> float:
        """The highest sample since `reset`."""
        return max(self.samples, default=0.0)

    def quarters(self) -> list[float]:
        """The peak of each quarter of the samples since `reset`: does memory creep?"""
        n = len(self.samples)
        cuts = [round(n * k / 4) for k in range(5)]
        return [round(max(self.samples[a:b], default=0.0), 2) for a, b in pairwise(cuts)]

    def run(self) -> None:
        while True:
            now = vmrss_gb()
            self.samples.append(now)
            if now > self.abort_gb:
                print(json.dumps({"aborted_at_gb": round(now, 2)}), flush=True)
                os._exit(3)
            time.sleep(0.05)


def frank_requests(n: int) -> list[Any]:
    """Alignment and questions requests of the first `n` distinct FRANK sources."""
    from evalgpu.scorers.summarization import alignment_request, questions_request

    out = []
    for source, rows in list(by_source(read_jsonl(DATA_DIR / "frank_dev.jsonl")).items())[:n]:
        out += [alignment_request(source, rows[0]["summary"]), questions_request(source, 5)]
    return out


def attribution_requests(n: int) -> list[Any]:
    """Attribution requests of the `n` rows with the longest contexts."""
    from evalgpu.scorers.context_recall import attribution_request

    rows = read_jsonl(DATA_DIR / "attribution_dev.jsonl")
    rows.sort(key=lambda r: -sum(len(p) for p in r["context"]))
    out = []
    for row in rows[:n]:
        claims = sentences(row["ground_truth"])[:6]
        out += [attribution_request(row["context"], claim) for claim in claims]
    return out


def child(args: argparse.Namespace) -> dict[str, Any]:
    """Load, run one wave, report; runs in its own process."""
    import torch

    from evalgpu.engines.base import JudgeRequest

    torch.set_num_threads(1)
    sampler = Sampler(args.abort_gb)
    sampler.start()
    t = time.perf_counter()
    engine = transformers_engine(
        args.model, batch_size=args.batch_size, compute=args.compute, threads=1
    )
    out: dict[str, Any] = {"wave": args.wave, "model": args.model, "compute": engine.compute}
    out["batch_size"] = args.batch_size
    out["load_s"] = round(time.perf_counter() - t, 1)
    out["rss_after_load_gb"] = round(vmrss_gb(), 2)
    build = frank_requests if args.wave == "frank" else attribution_requests
    requests = build(args.n)
    if args.max_tokens:
        requests = [
            JudgeRequest(r.tag, r.messages, r.schema, min(r.max_tokens, args.max_tokens))
            for r in requests
        ]
    sampler.reset()
    t = time.perf_counter()
    replies = engine.generate(requests)
    seconds = time.perf_counter() - t
    prompt = sum(r.prompt_tokens for r in replies if r.error_kind != "too_long")
    output = sum(r.output_tokens for r in replies)
    out |= {
        "requests": len(requests),
        "too_long": sum(r.error_kind == "too_long" for r in replies),
        "longest_prompt": max(r.prompt_tokens for r in replies),
        "prompt_tokens": prompt,
        "cached_tokens": sum(r.cached_tokens for r in replies),
        "output_tokens": output,
        "wave_s": round(seconds, 1),
        "output_tok_s": round(output / seconds, 2),
        "peak_rss_wave_gb": round(sampler.peak, 2),
        "peak_rss_by_quarter_gb": sampler.quarters(),
        "ru_maxrss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),
        "rss_after_wave_gb": round(vmrss_gb(), 2),
        "replies": [r.text for r in replies],
    }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--wave", choices=["frank", "attribution", "both"], default="both")
    parser.add_argument("--n", type=int, default=0, help="sources (frank) or rows; 0: 8 / 16")
    parser.add_argument("--max-tokens", type=int, default=0, help="cap on each reply; 0: none")
    parser.add_argument("--batch-size", type=int, default=16, help="requests decoded together")
    parser.add_argument("--compute", default="auto", help="auto, bfloat16, float32")
    parser.add_argument("--abort-gb", type=float, default=9.0)
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.n = args.n or (8 if args.wave == "frank" else 16)
        print(json.dumps(child(args)), flush=True)
        return 0
    results = []
    for wave in ["frank", "attribution"] if args.wave == "both" else [args.wave]:
        argv, env = module_command("benchmarks.bench_memory_engine")
        argv += ["--child", "--wave", wave, "--model", args.model]
        argv += ["--n", str(args.n), "--max-tokens", str(args.max_tokens)]
        argv += ["--abort-gb", str(args.abort_gb), "--batch-size", str(args.batch_size)]
        argv += ["--compute", args.compute]
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
        line = (proc.stdout.strip().splitlines() or ["{}"])[-1]
        result = json.loads(line) if line.startswith("{") else {"error": proc.stderr[-2000:]}
        result.setdefault("wave", wave)
        results.append(result)
        shown = {k: v for k, v in result.items() if k != "replies"}
        print(json.dumps(shown), flush=True)
        if proc.returncode:
            print(proc.stderr[-3000:], file=sys.stderr)
    if args.json:
        write_json(args.json, results, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
