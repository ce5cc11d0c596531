"""Speed of the transformers engine on a CPU, per compute (bfloat16, float32).

For each compute, in a fresh process (so that peak memory is that compute's), on the default
model unless told otherwise, it measures:

  (a) prefill: tokens per second of one ~600-token prompt (best of two);
  (b) a wave: 8 constrained requests of ~380 prompt tokens (the summarization alignment
      prompt over 8 different short sources, each reply at least two claims), in one
      `generate()`; output tokens per second of wall time, prefill included;
  (c) peak RSS of the process (load, both measurements);

and, against float32 when it is measured, how many of the wave's replies are identical and
how often the next-token choice over the ~600-token prompt agrees (teacher forcing). It prints
a markdown table and writes JSON (`--json`), with the load average before and after each run:
the machine may be shared.

    .venv/bin/python scripts/bench_cpu.py                       # every compute, default threads
    .venv/bin/python scripts/bench_cpu.py --computes bfloat16 --threads 1 --threads 2 --busy
    .venv/bin/python scripts/bench_cpu.py --json docs/measured/bench-cpu.json

`--threads` (repeatable) runs each compute at each thread count; `--busy` runs each also
beside a competing busy process (one spinning Python process, as another job on the machine).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from benchmarks.measure import module_command, transformers_engine, write_json
from evalgpu.engines import cpu_threads
from evalgpu.engines.base import JudgeRequest
from evalgpu.scorers.summarization import alignment_request

WAVE = 8
TOWNS = ["Arden", "Belmont", "Caris", "Dunmore", "Elsworth", "Farrow", "Glenby", "Hollins"]


class BenchClaim(BaseModel):
    """One claim of the summary and whether the source supports it."""

    claim: str = Field(max_length=160)
    """The claim, in a sentence."""
    supported: bool
    """True when the source supports the claim."""


class BenchAlignment(BaseModel):
    """The alignment reply with at least two claims, so that every reply has some length."""

    alignment: list[BenchClaim] = Field(min_length=2, max_length=4)
    """The summary's claims."""


def source_text(town: str, sentences: int = 14) -> str:
    """A short made-up news text about `town` (about 20 tokens a sentence)."""
    facts = [
        f"The council of {town} approved a new budget of {3 + len(town)} million euros on Monday.",
        f"Most of the money goes to the {town} river bridge, closed since the floods of 2019.",
        "Work on the bridge is to start in March and to end before the winter of next year.",
        f"The mayor of {town}, Anna Weber, said the town had waited too long for the repairs.",
        "Opposition members voted against the plan, saying that schools needed the money more.",
        "A local teachers' union announced a protest in front of the town hall for Friday.",
        "The regional government will pay a third of the cost of the bridge, a first for it.",
        f"Shops in the centre of {town} lost a fifth of their customers while it was closed.",
        "Engineers found that two of the five pillars must be rebuilt rather than repaired.",
        "The contract went to a builder from the capital after an open call for tenders.",
        "Traffic will be diverted through the northern ring road while the work goes on.",
        "Residents can follow the work on a public website that the council will update weekly.",
        "A ferry service, free of charge, will run on weekdays between the two river banks.",
        "The last bridge of the town was built in 1962 and carried 9,000 cars a day.",
    ]
    return " ".join(facts[:sentences])


def wave_requests() -> list[JudgeRequest]:
    """8 alignment prompts of ~380 tokens with the bench's bounded schema."""
    requests = []
    for town in TOWNS:
        summary = f"{town} will rebuild its bridge with money from a new budget, starting in May."
        shape = alignment_request(source_text(town, 4), summary)
        requests.append(JudgeRequest(shape.tag, shape.messages, BenchAlignment, 220))
    return requests


def child(model: str, compute: str, threads: int, attn: str | None) -> dict[str, Any]:
    """Measure one compute in this process; the parent reads the JSON line it prints."""
    import torch

    started = time.perf_counter()
    engine = transformers_engine(
        model,
        compute=compute,
        threads=threads,
        batch_size=WAVE,
        attn_implementation=attn,
    )
    out: dict[str, Any] = {"load_s": round(time.perf_counter() - started, 1)}
    out["compute"], out["threads"] = engine.compute, engine.threads
    out["attention"] = engine.model.config._attn_implementation
    tokenizer, net = engine.tokenizer, engine.model
    # (a) prefill of ~600 tokens: a long source in the chat template
    long = " ".join([source_text("Ivybridge"), source_text("Kelso"), source_text("Lorne", 3)])
    chat = [{"role": "user", "content": long + "\nSummarize."}]
    text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    out["prefill_tokens"] = int(ids.shape[1])
    best = float("inf")
    with torch.inference_mode():
        net(input_ids=ids[:, :16], logits_to_keep=1)  # first call allocations
        for _ in range(2):
            t = time.perf_counter()
            net(input_ids=ids, use_cache=True, logits_to_keep=1)
            best = min(best, time.perf_counter() - t)
        top1 = net(input_ids=ids).logits[0].argmax(-1).tolist()
    out["prefill_tok_s"] = round(ids.shape[1] / best, 1)
    # (b) the wave; a one-token request first compiles the schema, as a run's first wave does
    requests = wave_requests()
    warm = requests[0]
    t = time.perf_counter()
    engine.generate([JudgeRequest(warm.tag, warm.messages, warm.schema, 1)])
    out["schema_compile_s"] = round(time.perf_counter() - t, 1)
    t = time.perf_counter()
    replies = engine.generate(requests)
    wall = time.perf_counter() - t
    output = sum(r.output_tokens for r in replies)
    out["wave"] = {
        "requests": len(replies),
        "prompt_tokens_mean": round(sum(r.prompt_tokens for r in replies) / len(replies)),
        "output_tokens": output,
        "seconds": round(wall, 1),
        "output_tok_s": round(output / wall, 1),
        "invalid": sum(r.parsed is None for r in replies),
    }
    out["replies"] = [r.text for r in replies]
    out["top1"] = top1
    out["peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    return out


def run_child(
    model: str, compute: str, threads: int, busy: bool, attn: str | None
) -> dict[str, Any]:
    """One measurement in a fresh process, beside a spinning process when `busy`."""
    spinner = None
    if busy:
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    load_before = os.getloadavg()[0]
    cmd, env = module_command("benchmarks.bench_cpu")
    cmd += ["--child", compute, "--model", model]
    cmd += ["--attn", attn] if attn else []
    done = subprocess.run(
        [*cmd, "--threads", str(threads)], capture_output=True, text=True, env=env
    )
    if spinner is not None:
        spinner.kill()
        spinner.wait()
    if done.returncode != 0:
        raise RuntimeError(f"{compute}, {threads} thread(s): {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["busy"] = busy
    result["load_before"], result["load_after"] = round(load_before, 2), os.getloadavg()[0]
    return result


def compare(results: list[dict[str, Any]]) -> None:
    """Agreement of each run with the float32 run at the same threads, when there is one."""
    for r in results:
        ref = next(
            (x for x in results if x["compute"] == "float32" and x["threads"] == r["threads"]),
            None,
        )
        if ref is None:
            continue
        same = sum(a == b for a, b in zip(r["top1"], ref["top1"], strict=True))
        r["vs_float32"] = {
            "next_token_agreement": round(same / len(ref["top1"]), 4),
            "identical_replies": sum(
                a == b for a, b in zip(r["replies"], ref["replies"], strict=True)
            ),
        }


def table(results: list[dict[str, Any]]) -> str:
    """The markdown table of the runs."""
    lines = [
        "| compute | attention | threads | busy | load | prefill tok/s "
        "| wave output tok/s (prefill incl.) | wave s | output tokens | peak RSS GB | load s "
        "| same as float32 |",
        "|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        w, vs = r["wave"], r.get("vs_float32")
        same = (
            f"{vs['identical_replies']}/{w['requests']} replies, "
            f"{vs['next_token_agreement']:.1%} next tokens"
            if vs
            else "-"
        )
        lines.append(
            f"| {r['compute']} | {r['attention']} | {r['threads']} "
            f"| {'yes' if r['busy'] else 'no'} "
            f"| {r['load_before']:.1f}→{r['load_after']:.1f} | {r['prefill_tok_s']} "
            f"| **{w['output_tok_s']}** | {w['seconds']} | {w['output_tokens']} "
            f"| {r['peak_rss_gb']} | {r['load_s']} | {same} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--computes", default="bfloat16,float32")
    parser.add_argument("--threads", type=int, action="append", help="default: the engine's")
    parser.add_argument("--busy", action="store_true", help="also beside a busy process")
    parser.add_argument("--attn", help="the engine's attn_implementation (sdpa, eager)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        threads = args.threads[0] if args.threads else cpu_threads()
        print(json.dumps(child(args.model, args.child, threads, args.attn)))
        return 0
    results = []
    for compute in args.computes.split(","):
        for threads in args.threads or [cpu_threads()]:
            for busy in [False, True] if args.busy else [False]:
                print(f"{compute}, {threads} thread(s), busy={busy} ...", file=sys.stderr)
                results.append(run_child(args.model, compute, threads, busy, args.attn))
    compare(results)
    print(table(results))
    if args.json:
        for r in results:
            del r["replies"], r["top1"]
        meta = {"cpu": _cpu_name(), "cores": os.cpu_count(), "model": args.model}
        write_json(args.json, {"machine": meta, "runs": results})
    return 0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())
