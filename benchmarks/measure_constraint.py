"""Measure the transformers engine's constraints (llguidance) on a model's vocabulary.

The numbers of docs/SCHEMAS.md, "The transformers engine's constraint", printed as JSON lines:

- `vocabulary`: seconds and memory to build the engine's `Grammars` (once per engine);
- `compile`: milliseconds and memory to compile each step's largest schema (first use);
- `mask`: milliseconds to fill the bitmasks of a batch of 8 rows (two of each of four schemas)
  at each step, walking valid replies token by token; every token must be allowed, and once a
  reply is complete only the end token.

Only the tokenizer is loaded (no weights). The vocabulary size is the model's output layer
(`config.json`'s `vocab_size`).

    python scripts/measure_constraint.py --model models/qwen2.5-coder-1.5b-instruct
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from benchmarks.measure import vmrss_kib
from evalgpu.engines.transformers import Grammars
from evalgpu.scorers.summarization import ENGLISH_CLOSED
from evalgpu.verdicts import Claims, Reason, Supported, attribution_schema, questions_schema


def rss_mb() -> float:
    """This process's resident memory (Linux), in MiB."""
    return (vmrss_kib() or 0) / 1024


def emit(record: dict[str, Any]) -> None:
    """One JSON line, with the machine's CPU count and load average."""
    load = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps({**record, "cpus": os.cpu_count(), "load": load}), flush=True)


def replies() -> list[tuple[Any, str]]:
    """Valid replies of four schemas at their largest, as json.dumps writes them."""
    claim = "The Golden Gate Bridge opened in 1937 in San Francisco."
    question = "Did the bridge open in 1937?"
    return [
        (Claims, json.dumps({"claims": [claim] * 10})),
        (questions_schema(10, ENGLISH_CLOSED), json.dumps({"questions": [question] * 10})),
        (Supported, json.dumps({"supported": True})),
        (attribution_schema(4), json.dumps({"supported": True, "passages": [1, 3]})),
    ]


def measure_masks(grammars: Grammars, tokenizer: Any, eos: int) -> dict[str, Any]:
    """Bitmask time per step for 8 rows walking `replies()` (each twice)."""
    import torch

    rows = replies() * 2
    constraints = [grammars.start(schema) for schema, _ in rows]
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] + [eos] for _, text in rows]
    words = grammars.bitmask(len(rows))
    shifts = torch.arange(32, dtype=torch.int32)
    times = []
    for step in range(max(map(len, ids))):
        live = [i for i in range(len(rows)) if step < len(ids[i])]
        started = time.perf_counter()
        for i in live:
            constraints[i].allowed(words, i)
        times.append(time.perf_counter() - started)
        for i in live:
            token = ids[i][step]
            allowed = ((words[i].unsqueeze(-1) >> shifts) & 1).bool().view(-1)
            if not allowed[token]:
                raise SystemExit(f"row {i} step {step}: token {token} not allowed")
            if token == eos:
                if allowed.nonzero().flatten().tolist() != [eos]:
                    raise SystemExit(f"row {i}: tokens other than the end token allowed")
            else:
                constraints[i].advance(token)
    times.sort()
    n = len(times)
    return {
        "measure": "mask",
        "rows": len(rows),
        "steps": n,
        "mean_ms": round(1000 * sum(times) / n, 3),
        "p50_ms": round(1000 * times[n // 2], 3),
        "p99_ms": round(1000 * times[int(0.99 * (n - 1))], 3),
        "max_ms": round(1000 * times[-1], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("models/qwen2.5-coder-1.5b-instruct"))
    args = parser.parse_args()
    import torch
    from transformers import AutoTokenizer

    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    size = json.loads((args.model / "config.json").read_text())["vocab_size"]
    before, started = rss_mb(), time.perf_counter()
    grammars = Grammars(tokenizer, size, {tokenizer.eos_token_id})
    seconds = time.perf_counter() - started
    emit(
        {
            "measure": "vocabulary",
            "tokens": size,
            "seconds": round(seconds, 2),
            "mb": round(rss_mb() - before),
        }
    )
    schemas = [schema for schema, _ in replies()] + [Claims, Reason]
    for schema in schemas:
        before, started = rss_mb(), time.perf_counter()
        grammars.grammar(schema)
        grammars.start(schema)
        ms = 1000 * (time.perf_counter() - started)
        emit(
            {
                "measure": "compile",
                "schema": schema.__name__,
                "ms": round(ms, 2),
                "mb": round(rss_mb() - before, 1),
            }
        )
    emit(measure_masks(grammars, tokenizer, tokenizer.eos_token_id))


if __name__ == "__main__":
    main()
