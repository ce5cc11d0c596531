"""Measurement of evalgpu, beside its data (`benchmarks/data/`): how well the judge agrees with
people, how fast and in how much memory it scores, and how other judge designs compare.

It uses evalgpu's public API only, and evalgpu never imports it. The commands are the thin
entry points in scripts/ (`python scripts/agreement.py ...`), or `python -m benchmarks.NAME`
from the checkout's root; the figures they measured are in docs/measured/.

- `agreement`: agreement with human labels (FRANK, RoSE, AttributionBench), paired comparisons
  of two runs, merges of slices;
- `bench`: throughput, batched against per-row sequential and the engine's ceiling (`--ray`:
  `bench_ray`, local against Ray sweeps);
- `bench_cpu`, `bench_memory`, `bench_memory_engine`: the transformers engine's speed on a CPU
  by compute and threads, the memory of a sweep as the file grows, the memory of one wave;
- `compare_engines`, `engine_trial`: vLLM against the transformers engine, on verdicts and on
  agreement;
- `injection`: how far instructions written inside the texts judged move a score;
- `measure_constraint`, `measure_schemas`: the transformers engine's constraints, the schemas'
  compile times on vLLM's structured-output backends;
- `designs`: the same judge in other designs, side by side with the product's;
- `measure`: the checkout's paths, JSON, memory, the data sets and the statistics.
"""
