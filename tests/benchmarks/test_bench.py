"""benchmarks/bench.py on the scripted engine."""

import json
from pathlib import Path

from benchmarks import bench

ROOT = Path(__file__).resolve().parents[2]


def test_bench_dry_run_counts_generate_calls(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    data = tmp_path / "frank.jsonl"
    rows = [
        {"id": str(i), "source": "Cats purr. Dogs bark.", "summary": s}
        for i, s in enumerate(["Cats purr.", "Dogs bark.", "Cats purr. Dogs bark."])
    ]
    data.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "bench.json"
    bench.main(
        [
            "--data",
            str(data),
            "--rows",
            "3",
            "--backend",
            "scripted",
            "--json",
            str(out),
        ]
    )
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("speedup batched/sequential: ")
    modes = {m["mode"][:3]: m for m in json.loads(out.read_text())["modes"]}
    # (a) and (c): three waves, (claims, questions), (alignment, question checks), (coverage)
    assert modes["(a)"]["generate_calls"] == 3
    assert modes["(c)"]["generate_calls"] == 3
    # (b): one call per request. Per row: claims, questions, one check per claim, the source's
    # two questions checked, then answered from the summary (the last summary has two claims)
    assert modes["(b)"]["generate_calls"] == (2 + 1 + 2 + 2) * 2 + (2 + 2 + 2 + 2)
