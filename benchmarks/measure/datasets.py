"""The data sets of benchmarks/data/ (their README describes the fields), as the scripts read
them: whole files, FRANK pairs, and rows grouped by their source document."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

__all__ = ["by_source", "documents", "read_jsonl", "sample_pairs", "sentences"]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every record of a JSON Lines file, blank lines skipped."""
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def by_source(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The records of each source document, documents in order of first appearance."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(r["source"], []).append(r)
    return groups


def sample_pairs(
    records: list[dict[str, Any]], n: int | None, seed: int = 1234
) -> list[dict[str, Any]]:
    """`n` (None: all) articles with a faithful and an unfaithful summary, one of each.

    Returns the rows as [faithful, unfaithful, faithful, unfaithful, ...]. Articles are taken
    in a shuffled order of first appearance, and each side drawn at random, both from `seed`.
    """
    eligible = []
    for rows in by_source(records).values():
        sides = {k: [r for r in rows if int(r["label_faithful"]) == k] for k in (0, 1)}
        if sides[0] and sides[1]:
            eligible.append(sides)
    rng = random.Random(seed)
    rng.shuffle(eligible)
    pairs: list[dict[str, Any]] = []
    for sides in eligible[:n]:
        pairs += [rng.choice(sides[1]), rng.choice(sides[0])]
    return pairs


def documents(path: Path, n: int, docs: int | None, first_doc: int = 0) -> list[dict[str, Any]]:
    """The first `n` summarization runs (`{"input": source, "output": summary}`) of a FRANK-like
    file, taken document by document (FRANK has 4-5 summaries a document).

    Documents are ordered by their text; `first_doc` skips that many, `docs` keeps that many.
    """
    rows = sorted(read_jsonl(path), key=lambda r: (r["source"], r["id"]))
    kept = list(by_source(rows).values())[first_doc : None if docs is None else first_doc + docs]
    return [{"input": r["source"], "output": r["summary"]} for group in kept for r in group][:n]


def sentences(text: str) -> list[str]:
    """`text` cut after each `.`, `!` or `?` that white space follows."""
    return [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]
