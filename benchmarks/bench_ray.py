"""`scripts/bench.py --ray`: the same rows scored locally and on Ray, in one run.

Both sides are whole sweeps into an output folder (`evaluate`, `run_ray`), so they do the same work:
read, score a chunk at a time, append, write summary.json. It times

  local   `evaluate(...)` in this process, the engine loaded beforehand (timed apart);
  ray     `run_ray(settings, replicas=N)` on a local cluster started beforehand (timed apart):
          actor start and engine load in each replica, the chunks sent to the actors, the appends.

at two sizes (an eighth of the rows, then all of them), so that the fixed cost of a Ray run
(actors, engine loads) and its cost per row (per chunk: a task, pickling, a block through the
object store) come apart:

    per-row overhead = ((ray - local) at n  -  (ray - local) at n/8) / (n - n/8)

and checks that the two sides wrote the same records. On a 2-core machine, 2 replicas cannot
be faster than one local engine; the point is that the overhead is small and the records are
the same.

    .venv/bin/python scripts/bench.py --ray --replicas 2 --backend scripted --synthetic 512
    .venv/bin/python scripts/bench.py --ray --replicas 2 --model smollm2-135m-instruct \\
        --backend transformers --rows 10 --docs 2 --first-doc 1 --sizes 10
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalgpu.distributed import run_ray
from evalgpu.engines import load_engine
from evalgpu.evaluation import evaluate
from evalgpu.runner import reply_cache
from evalgpu.settings import RunSettings


def _records(out: Path) -> dict[tuple[str, int, str], dict[str, Any]]:
    found = {}
    for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        key = (r["file"], r["row"], r["scorer"])
        if key in found:
            raise SystemExit(f"bench: {key} recorded twice in {out}")
        found[key] = r
    return found


def _without_usage(found: dict[Any, dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    return {k: {f: v for f, v in r.items() if f != "usage"} for k, r in found.items()}


def synthetic_rows(n: int, per_source: int = 4) -> list[dict[str, Any]]:
    """Rows the scripted engine scores without errors: short sentences, 4 summaries a source.

    (FRANK's sentences make the scripted engine's questions longer than their schema allows,
    so on FRANK every scripted row is an error record: a poor measure of the pipeline.)
    """
    rows = []
    for i in range(n):
        doc = i // per_source
        source = (
            f"Town {doc} built a bridge in {1800 + doc % 200}. A flood closed it in "
            f"{1900 + doc % 100}. Volunteers from town {doc} reopened it last spring."
        )
        summaries = [
            f"Town {doc} built a bridge.",
            f"A flood closed the bridge of town {doc}.",
            f"Volunteers reopened the bridge in town {doc}.",
            f"Town {doc} built a tunnel.",
        ]
        rows.append({"input": source, "output": summaries[i % per_source]})
    return rows


def compare(
    rows: Sequence[dict[str, Any]],
    *,
    model: str | None,
    backend: str,
    replicas: int,
    max_questions: int,
    chunk_size: int,
    sizes: Sequence[int],
) -> dict[str, Any]:
    """Time local and Ray sweeps over the first `size` rows for each size; compare records."""
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    work = Path(tempfile.mkdtemp(prefix="evalgpu-bench-ray-"))
    t = time.perf_counter()
    engine = load_engine(model, backend=backend)
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    ray.init(num_cpus=replicas, include_dashboard=False, logging_level="WARNING")
    init_s = time.perf_counter() - t

    def both(size: int, name: str) -> dict[str, Any]:
        data = work / f"{name}.jsonl"
        data.write_text(
            "".join(
                json.dumps({"id": f"r{i}", "source": r["input"], "summary": r["output"]}) + "\n"
                for i, r in enumerate(rows[:size])
            ),
            encoding="utf-8",
        )
        walls = {}
        for side in ("local", "ray"):
            settings = RunSettings(
                data=(data,),
                scorers=("summarization",),
                out=work / f"{name}-{side}",
                model=model,
                backend=backend,
                max_questions=max_questions,
                chunk_size=chunk_size,
            )
            # The local engine's reply cache outlives a run: start each run without it, as
            # each Ray run's fresh replicas do.
            reply_cache(engine).clear()
            t = time.perf_counter()
            if side == "local":
                scorers = settings.build_scorers(engine)
                evaluate(settings.data, scorers, out=settings.out, chunk_size=chunk_size).run()
            else:
                run_ray(settings, replicas=replicas)
            walls[side] = time.perf_counter() - t
        local, remote = _records(work / f"{name}-local"), _records(work / f"{name}-ray")
        return {
            "rows": size,
            "chunks": -(-size // chunk_size),
            "local_s": round(walls["local"], 3),
            "ray_s": round(walls["ray"], 3),
            "records": len(local),
            "records_equal": local == remote,
            "records_equal_but_usage": _without_usage(local) == _without_usage(remote),
            "failed": sum(r["error"] is not None for r in remote.values()),
        }

    try:
        # The first Ray run starts worker processes and imports evalgpu in them; an untimed
        # warm-up on 2 rows pays for that, as a long-lived cluster would have.
        both(min(2, len(rows)), "warm-up")
        runs = [both(size, f"rows-{size}") for size in sizes]
    finally:
        ray.shutdown()
    result: dict[str, Any] = {
        "engine": engine.name,
        "model": model,
        "replicas": replicas,
        "chunk_size": chunk_size,
        "max_questions": max_questions,
        "engine_load_s": round(load_s, 3),
        "ray_init_s": round(init_s, 3),
        "runs": runs,
        "load_average": os.getloadavg(),
    }
    if len(runs) >= 2:
        small, big = runs[0], runs[-1]
        extra = (big["ray_s"] - big["local_s"]) - (small["ray_s"] - small["local_s"])
        per_row = extra / (big["rows"] - small["rows"])
        result["overhead_per_row_ms"] = round(1000 * per_row, 3)
        result["overhead_per_chunk_ms"] = round(1000 * per_row * chunk_size, 3)
        fixed = small["ray_s"] - small["local_s"] - per_row * small["rows"]
        result["fixed_overhead_s"] = round(fixed, 3)
    return result


def table(result: dict[str, Any]) -> str:
    """The markdown table of `compare`'s result, with its summary lines."""
    lines = [
        f"engine={result['engine']}, replicas={result['replicas']}, "
        f"chunk_size={result['chunk_size']}, engine load {result['engine_load_s']} s, "
        f"ray.init {result['ray_init_s']} s",
        "",
        "| rows | chunks | local s | ray s | records | failed | same records | same but usage |",
        "|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in result["runs"]:
        lines.append(
            f"| {r['rows']} | {r['chunks']} | {r['local_s']:.2f} | {r['ray_s']:.2f} | "
            f"{r['records']} | {r['failed']} | {r['records_equal']} | "
            f"{r['records_equal_but_usage']} |"
        )
    if "overhead_per_row_ms" in result:
        lines.append(
            f"\nRay overhead: {result['fixed_overhead_s']:.2f} s fixed, "
            f"{result['overhead_per_row_ms']:.2f} ms per row "
            f"({result['overhead_per_chunk_ms']:.1f} ms per chunk)"
        )
    return "\n".join(lines)
