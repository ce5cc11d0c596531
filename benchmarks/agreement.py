"""Do our scores agree with people? Scores a human-labelled file and compares.

The file's fields say which comparison applies (benchmarks/data/README.md describes them):

  label_faithful, human_score   (FRANK)   summarization: balanced accuracy of score == scale and
                                          of alignment == 1 against label_faithful, ROC-AUC of the
                                          alignment axis, Spearman of alignment and score with
                                          human_score, and the pair win rate (below)
  human_coverage                (RoSE)    summarization: Spearman and Kendall of the coverage
                                          axis and of the score against human_coverage
  label_attributed, context     (AttributionBench) context recall: balanced accuracy of
                                          score == scale and ROC-AUC of the score against
                                          label_attributed

Soft verdicts: each axis is also reported from its soft twin (`alignment_soft`,
`coverage_soft`, `recall_soft`: the mean probability of true) and `soft score` is the score
`verdicts="soft"` gives (summarization: the lower soft axis times the scale); one run gives
both, the scorers run with hard verdicts. Ranking metrics (ROC-AUC, Spearman, Kendall, pair
win), and for attribution one balanced accuracy of the soft score at 0.5 × scale: a threshold
fixed before any row was seen (even odds), never one fitted to the reported rows.

FRANK is sampled in pairs (`--pairs N`, seed 1234): N articles that have both a faithful
(`label_faithful == 1`) and an unfaithful summary, one of each drawn at random. Sampled by row,
the shortest rows are biased (prompt length alone separates faithful from unfaithful there), a
pair holds the article fixed. The pair win rate is the share of pairs whose faithful summary
scores above the unfaithful one (a tie counts 0.5), with its interval over pairs resampled.
`--limit` applies to the other files.

Every metric comes with a bootstrap 95 % interval (rows resampled, 1,000 draws, seed 1234).
Rows whose scoring failed are left out of the metrics and counted by their `error_kind`:
`too_long` when the row's prompt does not fit the judge model's context (the engine refused it
before generating; a longer-context judge scores it), `invalid` for every other failure (a
reply that does not match its schema, or is still cut after the retry). `invalid` must be 0:
the exit status is 1 otherwise.

The JSON keeps every scored row (`scored`): its id, label, score, axes and each check's `p` in
order (`p.alignment`, `p.coverage`, `p.verdicts`: claims, questions answered from the summary,
ground-truth claims), so that another reading of a run (the weakest claim's `p`, say) is
computed from the file, not from a second run. One such reading is reported beside the soft
axes: the weakest claim's `p` (`alignment_weakest`, `recall_weakest`: ROC-AUC, FRANK pair win,
`--compare`), since a faithful summary is one whose every claim holds, and paired with the
soft axis on the same rows (`alignment_weakest - alignment_soft` by FRANK pair win,
`recall_weakest - recall_soft` by ROC-AUC: the difference with its interval). A trial design
that also records the product's verdicts on the same checks (`alignment_soft_product`) is
paired with them the same way (`alignment_soft - alignment_soft_product`).

Two runs on the same rows (a prompt change, another compute or model) are compared row by
row: `--compare A.json B.json` gives, for each value both hold, A's metric minus B's with an
interval over the same rows (FRANK: pairs) resampled for both. That interval is narrower than
the two runs' own intervals side by side, since what the rows share cancels out.

Other judge designs run on the same rows and model with `--design NAME` (benchmarks/designs/:
`evalgpu`, the package's scorers, the default; `mastra-1call`, the judge as it was at d4e0157;
`deepeval`, DeepEval's SummarizationMetric and ContextualRecall designs; `direct`, one yes/no
question per summary and axis). The JSON records the design; `--compare` of two designs on
the same rows is what they are for, while `--merge` takes slices of one design only.

A file too slow to score in one process is scored in `--offset` slices side by side (a process
per core, or per machine), and `--merge RUN...` reports the slices' JSON as one run: every
metric and interval computed over all their rows. Slices must come from the same file, design,
engine, compute, scale and question count (`--max-questions`, recorded from 2026-12-04 on),
and no row may be in two of them.

    .venv/bin/python scripts/agreement.py --pairs 30          # benchmarks/data/frank_dev.jsonl
    .venv/bin/python scripts/agreement.py benchmarks/data/attribution_dev.jsonl --limit 40 \
        --json docs/agreement-attribution.json
    .venv/bin/python scripts/agreement.py --compare out/new-prompt.json out/shipped.json
    .venv/bin/python scripts/agreement.py --pairs 30 --design deepeval --json out/deepeval.json
    .venv/bin/python scripts/agreement.py --compare out/deepeval.json out/evalgpu.json
    .venv/bin/python scripts/agreement.py --merge out/rose-0.json out/rose-60.json
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.designs import DEFAULT, DESIGNS
from benchmarks.measure import FRANK as DATA
from benchmarks.measure import rel, write_json
from benchmarks.measure.datasets import read_jsonl, sample_pairs
from benchmarks.measure.stats import (
    balanced_accuracy,
    interval,
    kendall_tau_b,
    pair_win,
    paired_difference,
    roc_auc,
    spearman,
)
from evalgpu import load_engine

# -- scoring -------------------------------------------------------------------------------------


LABELS = {
    "attribution": "label_attributed",
    "coverage": "human_coverage",
    "faithfulness": "label_faithful",
}
"""Each kind of file and the field of its human label (a file is of the first kind it has)."""


def kind_of(record: dict[str, Any]) -> str:
    for kind, label in LABELS.items():
        if label in record:
            return kind
    raise SystemExit(
        "agreement: the file has none of label_faithful, human_coverage, label_attributed"
    )


def score(
    records: list[dict[str, Any]],
    kind: str,
    engine: Any,
    scale: float,
    max_questions: int,
    design: str = DEFAULT,
):
    """Every record scored by `design` (benchmarks/designs/), results in order."""
    scorer = DESIGNS[design](kind, engine, scale, max_questions)
    if kind == "attribution":
        runs = [
            {
                "input": r.get("question", ""),
                "ground_truth": r["ground_truth"],
                "context": r["context"],
            }
            for r in records
        ]
    else:
        runs = [{"input": r["source"], "output": r["summary"]} for r in records]
    return scorer.run_batch(runs)


def too_long(result: Any) -> bool:
    """Whether a row failed because its prompt does not fit the judge model's context."""
    return result.error is not None and result.error_kind == "too_long"


def soft_score(result: Any, kind: str, scale: float) -> float | None:
    """The score `verdicts="soft"` gives, from a hard run's soft axes (None without them)."""
    axes = getattr(result, "axes", None) or {}
    if kind == "attribution":
        return axes["recall_soft"] * scale if "recall_soft" in axes else None
    if "alignment_soft" not in axes:
        return None
    return float(min(axes["alignment_soft"], axes["coverage_soft"]) * scale)


def scored_rows(records, results, kind: str, scale: float) -> list[dict[str, Any]]:
    """Each row's id, human labels and values, in scoring order (FRANK: faithful, unfaithful,
    pair by pair). The metrics are computed from these alone, so that two runs on the same
    rows can be compared row by row (`compare`) and runs on disjoint rows reported as one
    (`merge`)."""
    rows = []
    for record, result in zip(records, results, strict=True):
        axes = getattr(result, "axes", None) or {}
        row = {
            "id": record.get("id"),
            "label": record.get(LABELS[kind]),
            "score": result.score,
            "soft_score": soft_score(result, kind, scale) if result.error is None else None,
            "axes": {name: float(v) for name, v in axes.items() if v is not None},
            "error_kind": (result.error_kind or "invalid") if result.error is not None else None,
        }
        if kind == "faithfulness":
            row["human_score"] = record.get("human_score")
        if result.error is None:
            row["p"] = check_ps(result)
            steps = getattr(result, "preprocess_step_result", None) or {}
            listed = steps.get("alignment")  # a design without listed claims has none
            if kind != "attribution" and isinstance(listed, list):
                claims = [v["claim"] for v in listed]
                row["claims_in_summary"] = [
                    sum(in_text(c, record["summary"]) for c in claims),
                    len(claims),
                ]
        rows.append(row)
    return rows


CHECKS = ("alignment", "coverage", "verdicts")
"""The step results' lists of checks whose `p` a scored row keeps (claims, questions and
ground-truth claims), so that another reading of the same run (the weakest claim, say) needs no
second run."""


def check_ps(result: Any) -> dict[str, list[float | None]]:
    """Each list of checks of a row's step results, as its verdicts' `p` in order (None where a
    verdict has none); a design without such lists gives {}."""
    out: dict[str, list[float | None]] = {}
    for steps in (
        getattr(result, "preprocess_step_result", None),
        getattr(result, "analyze_step_result", None),
    ):
        for name in CHECKS:
            listed = (steps or {}).get(name)
            if isinstance(listed, list) and all(isinstance(v, dict) for v in listed):
                out[name] = [None if v.get("p") is None else float(v["p"]) for v in listed]
    return out


def in_text(claim: str, text: str) -> bool:
    """Whether most of a claim's words (over half, case folded) occur in `text`: a claim listed
    from a summary should be in the summary's words, not the source's."""
    words = re.findall(r"\w+", claim.casefold())
    present = set(re.findall(r"\w+", text.casefold()))
    return bool(words) and sum(w in present for w in words) > len(words) / 2


WEAKEST = {
    "alignment_weakest": ("alignment", "alignment_soft"),
    "recall_weakest": ("verdicts", "recall_soft"),
}
"""Readings of a run that are not the product's score: the lowest `p` of a row's claims (of
its checks `p.alignment`, `p.verdicts`), beside the mean `p` that the soft axis is. A
summary is faithful only when all its claims are, and one wrong claim among four moves a mean
by a quarter, the weakest claim by all of it; which ranks better is measured, not assumed.
A row without checks reads as its soft axis (0, as SEMANTICS §1.5 scores none)."""

DECISIONS: dict[str, tuple[str, Callable[[float, float], bool]]] = {
    "score==scale": ("score", lambda v, scale: v == scale),
    # A threshold fixed before any row was seen (a judge's even odds), not fitted.
    "soft score>=0.5*scale": ("soft score", lambda v, scale: v >= 0.5 * scale),
}
"""Attribution's verdicts read from a row's value and the run's scale, each reported as
`balanced_accuracy(<rule>)` against `label_attributed`, by `metrics` and paired by `compare`."""


def value(row: dict[str, Any], name: str) -> float | None:
    """A scored row's value: `score`, `soft_score` (or `soft score`), an axis, or a reading
    of its checks' `p` (`WEAKEST`; None for a run that kept no `p`)."""
    if name in ("score", "soft_score", "soft score"):
        return row["score" if name == "score" else "soft_score"]
    if name in WEAKEST:
        checks, axis = WEAKEST[name]
        ps = row.get("p", {}).get(checks)
        if ps is None or None in ps:
            return None
        return min(ps) if ps else row["axes"].get(axis)
    return row["axes"].get(name)


def metrics(rows: list[dict[str, Any]], kind: str, scale: float, pairs: bool = False):
    """The agreement metrics of `scored_rows`, each with its bootstrap interval; rows whose
    scoring failed are counted by kind and left out."""
    ok = [r for r in rows if r["error_kind"] is None]
    long = sum(r["error_kind"] == "too_long" for r in rows)
    out: dict[str, Any] = {
        "rows": len(rows),
        "invalid": len(rows) - len(ok) - long,
        "too_long": long,
    }
    counted = [r["claims_in_summary"] for r in ok if "claims_in_summary" in r]
    if counted:
        inside, claims = (sum(c[i] for c in counted) for i in (0, 1))
        out["claims_in_summary"] = {"claims": claims, "share": inside / claims if claims else None}
    if len(ok) < 2:
        return out

    def report(name: str, metric: Callable[..., float], *cols: Sequence[float]) -> None:
        out[name] = interval(metric, *cols)

    def column(name: str) -> list[Any]:
        return [value(r, name) for r in ok]

    def soft(names: Sequence[str]) -> bool:
        """Whether every scored row has these soft values (not when the engine gives no p)."""
        return all(v is not None for n in names for v in column(n))

    labels = [r["label"] for r in ok]
    if kind == "faithfulness":
        human = [r["human_score"] for r in ok]
        align = column("alignment")
        report(
            "balanced_accuracy(score==scale)",
            balanced_accuracy,
            [int(v == scale) for v in column("score")],
            labels,
        )
        report(
            "balanced_accuracy(alignment==1)",
            balanced_accuracy,
            [int(a == 1.0) for a in align],
            labels,
        )
        report("roc_auc(alignment)", roc_auc, align, labels)
        report("spearman(alignment, human_score)", spearman, align, human)
        report("spearman(score, human_score)", spearman, column("score"), human)
        if soft(["alignment_soft", "soft score"]):
            report("roc_auc(alignment_soft)", roc_auc, column("alignment_soft"), labels)
            report(
                "spearman(alignment_soft, human_score)", spearman, column("alignment_soft"), human
            )
            report("spearman(soft score, human_score)", spearman, column("soft score"), human)
        if soft(["alignment_weakest"]):
            report("roc_auc(alignment_weakest)", roc_auc, column("alignment_weakest"), labels)
        if pairs:
            out.update(pair_metrics(rows))
    elif kind == "coverage":
        names = ["coverage", "score"]
        if soft(["coverage_soft", "soft score"]):
            names += ["coverage_soft", "soft score"]
        for name in names:
            report(f"spearman({name}, human_coverage)", spearman, column(name), labels)
            report(f"kendall({name}, human_coverage)", kendall_tau_b, column(name), labels)
    else:
        for rule, (name, holds) in DECISIONS.items():
            if soft([name]):
                decided = [int(holds(v, scale)) for v in column(name)]
                report(f"balanced_accuracy({rule})", balanced_accuracy, decided, labels)
        report("roc_auc(score)", roc_auc, column("score"), labels)
        if soft(["recall_weakest"]):
            report("roc_auc(recall_weakest)", roc_auc, column("recall_weakest"), labels)
        if soft(["soft score"]):
            report("roc_auc(soft score)", roc_auc, column("soft score"), labels)
    if kind != "faithfulness" or pairs:  # FRANK's readings are paired by pair
        out.update(readings(rows, kind))
    return out


def readings(rows: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """Each `WEAKEST` reading against its soft axis on the same rows (FRANK: pairs), by the
    kind's ranking metric, as `"<reading> - <axis>"`: the paired difference that says whether
    the weakest claim ranks better than the mean, which two intervals side by side cannot.
    Likewise each axis a trial design recorded the product's reading of (`<axis>_product`), as
    `"<axis> - <axis>_product"`."""
    out = {}
    for name, (_, axis) in WEAKEST.items():
        got = paired(kind, rows, name, rows, axis)
        if got is not None:
            out[f"{name} - {axis}"] = got
    for axis in sorted(
        {a[: -len(PRODUCT)] for r in rows for a in r["axes"] if a.endswith(PRODUCT)}
    ):
        got = paired(kind, rows, axis, rows, axis + PRODUCT)
        if got is not None:
            out[f"{axis} - {axis}{PRODUCT}"] = got
    return out


PRODUCT = "_product"
"""The suffix of an axis that a trial design (`benchmarks.designs.evalgpu_fewshot`) records as the
product's own reading of the same checks in the same run: `readings` pairs the design's axis
with it, which isolates the trial's change from every other difference between two runs."""


def pair_metrics(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Pair win rates of `sample_pairs` rows ([faithful, unfaithful] * n), over the pairs
    whose both rows were scored, with a bootstrap interval over pairs."""
    both = [
        (rows[i], rows[i + 1])
        for i in range(0, len(rows) - 1, 2)
        if rows[i]["error_kind"] is None and rows[i + 1]["error_kind"] is None
    ]
    out: dict[str, Any] = {"pairs": len(rows) // 2, "pairs_scored": len(both)}
    if not both:
        return out
    for name in ("alignment", "alignment_soft", "alignment_weakest", "score", "soft score"):
        faithful, unfaithful = [value(f, name) for f, _ in both], [value(u, name) for _, u in both]
        if any(v is None for v in faithful + unfaithful):
            continue
        out[f"pair_win({name})"] = interval(pair_win, faithful, unfaithful)
    return out


RANKING: dict[str, tuple[str, Callable[..., float]]] = {
    "faithfulness": ("pair win", pair_win),
    "coverage": ("Spearman", spearman),
    "attribution": ("ROC-AUC", roc_auc),
}
"""Each kind's ranking metric against its human label, as `compare` computes it."""


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two runs' JSON on the same rows, compared row by row: for each value both hold (score,
    soft score, each axis), run a's metric minus run b's, with a bootstrap interval over the
    same rows (FRANK: pairs) resampled for both, so that what the rows share cancels out.

    The metric is the file's ranking metric: the pair win rate (FRANK), Spearman with
    `human_coverage` (RoSE), ROC-AUC against `label_attributed` (AttributionBench).

    Attribution runs are also compared on their verdicts: `balanced_accuracy` holds, for each
    `DECISIONS` rule, the balanced accuracy of a minus that of b, paired the same way.

    The runs may differ in anything but their rows: a prompt, a compute, a model, or a whole
    design (`--design`), which is what comparing designs on the same rows is for. The result
    names both runs' designs (`design`: [a's, b's]).

    Raises:
        ValueError: the runs are of different files or rows, or without row values.
    """
    if "scored" not in a or "scored" not in b:
        raise ValueError("both runs need their rows ('scored'): run agreement.py --json again")
    rows_a, rows_b = a["scored"], b["scored"]
    if a["kind"] != b["kind"] or [r["id"] for r in rows_a] != [r["id"] for r in rows_b]:
        raise ValueError("the runs did not score the same rows in the same order")
    kind = a["kind"]

    # A reading that a run kept no p for has no rows below, and is left out as any value is.
    names = ["score", "soft_score", *sorted({n for r in rows_a + rows_b for n in r["axes"]})]
    names += list(WEAKEST)
    out: dict[str, Any] = {
        "kind": kind,
        "rows": len(rows_a),
        "design": [recorded(a, "design"), recorded(b, "design")],
    }
    for name in names:
        got = paired(kind, rows_a, name, rows_b, name)
        if got is not None:
            out[name] = got
    if kind == "attribution":
        scales = [recorded(run, "scale") or 1.0 for run in (a, b)]
        decided = {rule: paired_decisions(rows_a, rows_b, rule, scales) for rule in DECISIONS}
        out["balanced_accuracy"] = {rule: m for rule, m in decided.items() if m is not None}
    return out


def paired_decisions(
    rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]], rule: str, scales: list[float]
) -> dict[str, Any] | None:
    """The balanced accuracy of a `DECISIONS` rule, run a's minus run b's (each read at its own
    scale), paired as `paired` pairs attribution rows; None with fewer than 2 such rows."""
    name, holds = DECISIONS[rule]
    va, vb = (
        [None if v is None else float(holds(v, scale)) for v in (value(r, name) for r in rows)]
        for rows, scale in zip((rows_a, rows_b), scales, strict=True)
    )
    return paired_values("attribution", rows_a, va, vb, balanced_accuracy)


def paired(
    kind: str, rows_a: list[dict[str, Any]], name_a: str, rows_b: list[dict[str, Any]], name_b: str
) -> dict[str, Any] | None:
    """The kind's ranking metric (`RANKING`) of value `name_a` of `rows_a` minus that of
    `name_b` of `rows_b`, the same rows in the same order (`paired_values`). Two runs' same
    value (`compare`), or two readings of one run (`metrics`: the weakest claim against the
    mean)."""
    va, vb = [value(r, name_a) for r in rows_a], [value(r, name_b) for r in rows_b]
    return paired_values(kind, rows_a, va, vb, RANKING[kind][1])


def paired_values(
    kind: str,
    rows: list[dict[str, Any]],
    va: list[float | None],
    vb: list[float | None],
    metric: Callable[..., float],
) -> dict[str, Any] | None:
    """`metric` of values `va` minus that of `vb` (one per row of `rows`, which give the
    labels), with a bootstrap interval over the units (FRANK: pairs, faithful at i and
    unfaithful at i + 1; else rows) that hold all four or two values, resampled for both; None
    with fewer than 2 such units."""
    if kind == "faithfulness":
        units = [
            i for i in range(0, len(va) - 1, 2) if None not in (va[i], va[i + 1], vb[i], vb[i + 1])
        ]
        columns = [[v[i + k] for i in units] for v in (va, vb) for k in (0, 1)]
    else:
        units = [i for i in range(len(va)) if va[i] is not None and vb[i] is not None]
        labels = [float(rows[i]["label"]) for i in units]
        columns = [[va[i] for i in units], labels, [vb[i] for i in units], labels]
    if len(units) < 2:
        return None
    return paired_difference(metric, columns[:2], columns[2:]) | {"units": len(units)}


MERGED_ALIKE = ("file", "kind", "design", "engine", "compute", "scale", "max_questions")
"""What runs reported as one must share: the rows differ, the judging may not."""


def recorded(run: dict[str, Any], key: str) -> Any:
    """A run's recorded `key`; runs recorded before `--design` existed are of the default."""
    return run.get(key, DEFAULT) if key == "design" else run.get(key)


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs on disjoint rows of one file (`--offset` slices scored side by side, by several
    processes or machines) reported as one: their rows in the order given, every metric and
    interval computed again over all of them, as one run on those rows would give.

    Raises:
        ValueError: a run without row values, runs that differ in file, kind, design, engine,
            compute or scale, or a row in more than one run.
    """
    if any("scored" not in run for run in runs):
        raise ValueError("every run needs its rows ('scored'): run agreement.py --json again")
    for key in MERGED_ALIKE:
        seen = {json.dumps(recorded(run, key)) for run in runs}
        if len(seen) > 1:
            raise ValueError(f"the runs differ in {key}: {', '.join(sorted(seen))}")
    rows = [row for run in runs for row in run["scored"]]
    ids = [row["id"] for row in rows]
    if None in ids:
        raise ValueError("rows without an id cannot be told apart: give the file's rows ids")
    twice = sorted(i for i, n in Counter(ids).items() if n > 1)
    if twice:
        raise ValueError(f"{len(twice)} rows are in more than one run, first: {twice[0]}")
    first = runs[0]
    kind, scale = first["kind"], first.get("scale") or 1.0
    out = metrics(rows, kind, scale, pairs=kind == "faithfulness")
    out.update({key: recorded(first, key) for key in MERGED_ALIKE})
    out.update(
        {
            "offset": [run.get("offset") for run in runs],
            "seconds": round(sum(run.get("seconds", 0.0) for run in runs), 1),  # of all slices
            "scored": rows,
        }
    )
    return out


def paired_line(name: str, m: dict[str, Any]) -> str:
    """A `compare` table's row: a's and b's metric, a - b and its paired interval."""
    lo, hi = m["ci95"]
    values = f"{m['a']:.3f} | {m['b']:.3f} | {m['difference']:+.3f}"
    return f"| {name} | {values} | [{lo:+.3f}, {hi:+.3f}] |"


def print_table(out: dict[str, Any], name: str, design: str = DEFAULT) -> None:
    if design != DEFAULT:
        name = f"{name}, design {design}"
    print(
        f"| {name} ({out['kind']}, {out['rows']} rows, {out['invalid']} invalid, "
        f"{out['too_long']} too long) | value | 95 % CI |"
    )
    print("|---|---:|---|")
    if "pairs" in out:
        print(f"| pairs scored | {out['pairs_scored']} of {out['pairs']} | |")
    inside = out.get("claims_in_summary")
    if inside and inside["share"] is not None:
        print(
            f"| claims with most words in the summary | {inside['share']:.3f} "
            f"| of {inside['claims']} |"
        )
    for metric, m in out.items():
        if isinstance(m, dict) and "value" in m:
            lo, hi = m["ci95"]
            print(f"| {metric} | {m['value']:.3f} | [{lo:.3f}, {hi:.3f}] |")
    for metric, m in out.items():
        if isinstance(m, dict) and "difference" in m:  # `readings`: one run read two ways
            lo, hi = m["ci95"]
            ranking = RANKING[out["kind"]][0]
            print(
                f"| {metric} ({ranking}, paired over {m['units']}) | {m['difference']:+.3f} "
                f"| [{lo:+.3f}, {hi:+.3f}] |"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "data",
        type=Path,
        nargs="?",
        default=DATA,
        help="a labelled JSONL file (default: benchmarks/data/frank_dev.jsonl)",
    )
    parser.add_argument(
        "--limit", type=int, default=None, help="score the first N rows (after --seed shuffle)"
    )
    parser.add_argument(
        "--offset",
        type=int,
        default=0,
        help="skip the first K rows (after --seed shuffle; FRANK: the first K pairs of the same "
        "draw): with --limit (--pairs), a slice held out from the rows a figure is reported on, "
        "or one of the slices a run is split into (--merge)",
    )
    parser.add_argument(
        "--seed", type=int, default=1234, help="shuffle seed for --limit (-1: file order)"
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=None,
        metavar="N",
        help="FRANK: score N articles, a faithful and an unfaithful summary of each "
        "(default: every such article; --seed draws them)",
    )
    parser.add_argument("--model", default=None)
    parser.add_argument("--backend", default="auto")
    parser.add_argument(
        "--compute",
        default=None,
        help="the transformers engine's compute (auto, bfloat16, float32; default: auto)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="the transformers engine's rows decoded together (default 16); lower it where "
        "long contexts decoded together run out of memory",
    )
    parser.add_argument(
        "--design",
        choices=list(DESIGNS),
        default=DEFAULT,
        help="the judge design (benchmarks/designs/): evalgpu (the package's scorers, default), "
        "mastra-1call, deepeval, direct",
    )
    parser.add_argument("--max-questions", type=int, default=5)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("A", "B"),
        help="compare two runs' --json on the same rows (A minus B, paired intervals); scores "
        "nothing",
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="report runs' --json on disjoint rows of one file (--offset slices scored side "
        "by side) as one run; scores nothing",
    )
    args = parser.parse_args(argv)
    if (args.compare or args.merge) and args.design != DEFAULT:
        parser.error("--design scores rows; --compare and --merge read each run's own design")
    if args.compare:
        try:
            a, b = (json.loads(path.read_text()) for path in args.compare)
            compared = compare(a, b)
        except (OSError, ValueError, KeyError) as exc:
            parser.error(f"--compare: {exc}")
        metric = RANKING[compared["kind"]][0]
        design_a, design_b = compared["design"]
        print(
            f"A: {args.compare[0].name} (design {design_a}), B: {args.compare[1].name} "
            f"(design {design_b}), {compared['rows']} rows\n"
        )
        print(f"| value | {metric}, A | {metric}, B | A - B | 95 % CI (paired) |")
        print("|---|---:|---:|---:|---|")
        decided = compared.pop("balanced_accuracy", {})
        for name, m in compared.items():
            if isinstance(m, dict):
                print(paired_line(name, m))
        if decided:
            print(
                "\n| verdict | balanced accuracy, A | balanced accuracy, B | A - B "
                "| 95 % CI (paired) |"
            )
            print("|---|---:|---:|---:|---|")
        for rule, m in decided.items():
            print(paired_line(rule, m))
        return 0
    if args.merge:
        try:
            out = merge([json.loads(path.read_text()) for path in args.merge])
        except (OSError, ValueError, KeyError) as exc:
            parser.error(f"--merge: {exc}")
        print_table(out, f"{Path(out['file']).name}, {len(args.merge)} runs", out["design"])
        if args.json:
            write_json(args.json, out)
        return 0 if out["invalid"] == 0 else 1

    records = read_jsonl(args.data)
    kind = kind_of(records[0])
    pairs = kind == "faithfulness"
    if pairs:
        if args.limit is not None:
            parser.error("FRANK rows are sampled in pairs: use --pairs N, not --limit")
        # --offset K skips the first K pairs of the same draw: slices of one sample, scored
        # side by side and merged (--merge), are that sample.
        drawn = sample_pairs(records, None, seed=max(args.seed, 0))
        end = None if args.pairs is None else 2 * (args.offset + args.pairs)
        records = drawn[2 * args.offset : end]
    elif args.pairs is not None:
        parser.error("--pairs applies to FRANK (label_faithful) files; use --limit")
    elif args.limit is not None or args.offset:
        if args.seed >= 0:
            random.Random(args.seed).shuffle(records)
        end = None if args.limit is None else args.offset + args.limit
        records = records[args.offset : end]
    # With --backend auto, either option loads the transformers engine (load_engine's rule).
    options = {"compute": args.compute, "batch_size": args.batch_size}
    engine = load_engine(
        args.model, backend=args.backend, **{k: v for k, v in options.items() if v is not None}
    )
    t = time.perf_counter()
    results = score(records, kind, engine, args.scale, args.max_questions, args.design)
    seconds = time.perf_counter() - t
    rows = scored_rows(records, results, kind, args.scale)
    out = metrics(rows, kind, args.scale, pairs=pairs)
    out.update(
        {
            "file": rel(args.data),
            "kind": kind,
            "design": args.design,
            "engine": engine.name,
            "compute": getattr(engine, "compute", None),
            "batch_size": getattr(engine, "batch_size", None),
            "threads": getattr(engine, "threads", None),
            "scale": args.scale,
            "max_questions": args.max_questions if kind != "attribution" else None,
            "offset": args.offset,
            "seconds": round(seconds, 1),
            "scored": rows,
        }
    )
    for label, errors in (
        ("too long for the judge", [r.error for r in results if too_long(r)]),
        ("invalid", [r.error for r in results if r.error and not too_long(r)]),
    ):
        if errors:
            print(f"{len(errors)} rows {label}, first: {errors[0]}", file=sys.stderr)

    print_table(out, args.data.name, args.design)
    if args.json:
        write_json(args.json, out)
    return 0 if out["invalid"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
