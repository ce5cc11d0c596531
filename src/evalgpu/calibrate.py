"""`python -m evalgpu calibrate`: fit a judge's calibration on labelled rows, and report it on
rows it was not fitted on.

Labelled files are JSON Lines in the formats of `benchmarks/data` (benchmarks/data/README.md);
the label field says what a file calibrates:

- `label_faithful` (0 or 1; `source`, `summary`): the summarization scorer, fitting
  `summarization.alignment`. A summary is faithful when every claim is supported, so a row's
  weakest claim p is what its label is read against;
- `label_attributed` (0 or 1; `ground_truth`, `context`): context recall, fitting
  `context_recall.attribution` the same way (attributable: every claim attributed);
- `human_coverage` (0 to 1; `source`, `summary`): the summarization scorer, fitting
  `summarization.coverage` against the graded label.

`summarization.question_check` (does the source say "yes" to a question) has no label in these
formats: it keeps the judge's verdict.

How, in order:

1. **Split, written first.** Rows are grouped by the text they are judged against (the source,
   or the passages), so that the summaries of one article fall on one side; the groups are
   shuffled with `seed` and the first `fit_share` of them are fitted on. `split.json` in the
   output folder lists the rows held out before anything is scored; a rerun checks it.
2. **Score**, uncalibrated and with soft verdicts (every check's p is needed), each file into
   `OUT/<file stem>/`, an output folder like `run`'s (a rerun resumes it). A faithfulness file
   is scored with one coverage question per source: its label fits the alignment checks, which
   the questions do not change, and the questions are most of a summary's judge calls.
3. **Fit** on the fit rows, per kind: the threshold `t` on p that maximises balanced accuracy
   of "the weakest p is above `t`" against the label (graded coverage: Spearman's rho of the
   hard coverage, the share above `t`, against the label), the middle one of equal ones;
   then the slope `a` of `p_cal = sigmoid(a * (logit p - logit t))` that maximises the
   likelihood of the labels under the weakest claim's `p_cal` (coverage: rho of the mean
   `p_cal`), searched on a grid. This is Platt scaling with its centre held at `t`: the hard
   verdict and the calibrated p agree (`p_cal > 0.5` exactly when `p > t`), and one slope per
   kind is all that a few hundred row labels can fit without overfitting.
4. **Report** on the held-out rows, uncalibrated against calibrated on the same rows, with a
   95 % interval of the difference from the held-out groups resampled (1,000 draws): the hard
   and soft axes (balanced accuracy, ROC-AUC, pair win of faithful over unfaithful summaries of
   one article, Spearman's rho) and the log loss of the weakest p. Written to `report.json`
   beside `calibration.json`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalgpu.calibration import Calibration, CheckCalibration
from evalgpu.engines.base import Engine
from evalgpu.evaluation import Progress, evaluate
from evalgpu.scorers import create_summarization_scorer
from evalgpu.scorers.context_recall import row_context_scorer
from evalgpu.scorers.summarization import MAX_QUESTIONS

__all__ = [
    "FIT_SHARE",
    "KINDS",
    "SEED",
    "LabelledRow",
    "calibrate",
    "fit_check",
    "held_out_report",
    "read_labelled",
    "split_rows",
]

KINDS: dict[str, tuple[str, str, str]] = {
    "label_faithful": ("faithfulness", "summarization", "summarization.alignment"),
    "label_attributed": ("attribution", "context-recall", "context_recall.attribution"),
    "human_coverage": ("coverage", "summarization", "summarization.coverage"),
}
"""label field -> (what it labels, the scorer that is run, the check it fits)."""

SLOPES = [math.exp(math.log(0.2) + i * (math.log(5.0) - math.log(0.2)) / 64) for i in range(65)]
"""The slopes searched: 0.2 to 5, evenly on a log scale (1 is among them)."""
DRAWS = 1000
FIT_SHARE = 0.5
"""The share of the row groups fitted on by default; the rest are held out and reported on."""
SEED = 1234
"""The default seed of the split's shuffle, of `--sample`'s draw and of the bootstrap."""


@dataclass
class LabelledRow:
    """One labelled row: where it is, its group (the judged-against text), and its label."""

    file: str
    row: int
    id: str | None
    group: str
    label: float
    fit: bool = False
    ps: dict[str, list[float]] = field(default_factory=dict)
    """The judge's raw p of each check of the row, by kind (filled from its record)."""


def read_labelled(path: Path) -> tuple[str, list[LabelledRow], list[str]]:
    """The label field of a labelled file, its rows, and a message for each row left out.

    Raises:
        ValueError: the file cannot be read, or no row holds a known label field.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc})") from exc
    label_field: str | None = None
    rows: list[LabelledRow] = []
    problems: list[str] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{path} row {number}: not JSON ({exc.msg})")
            continue
        if not isinstance(record, dict):
            problems.append(f"{path} row {number}: not an object")
            continue
        if label_field is None:
            label_field = next((k for k in KINDS if k in record), None)
            if label_field is None:
                raise ValueError(
                    f"{path} row {number}: no label field ({', '.join(KINDS)}): "
                    "which check would it calibrate?"
                )
        value = record.get(label_field)
        binary = label_field != "human_coverage"
        if isinstance(value, bool) or not isinstance(value, int | float):
            problems.append(f"{path} row {number}: {label_field}: not a number ({value!r})")
            continue
        if (binary and value not in (0, 1)) or not 0 <= value <= 1:
            problems.append(f"{path} row {number}: {label_field}: {value!r} is out of range")
            continue
        judged = record.get("source") if "source" in record else record.get("context")
        group = hashlib.sha256(json.dumps(judged, sort_keys=True).encode()).hexdigest()[:16]
        ident = record.get("id")
        rows.append(
            LabelledRow(str(path), number, ident if isinstance(ident, str) else None, group, value)
        )
    if label_field is None:
        raise ValueError(f"{path}: no rows")
    return label_field, rows, problems


def split_rows(rows: Sequence[LabelledRow], fit_share: float, seed: int) -> None:
    """Mark the rows to fit on: the first `fit_share` of the groups, shuffled with `seed`."""
    groups = sorted({r.group for r in rows})
    random.Random(seed).shuffle(groups)
    fitted = set(groups[: round(len(groups) * fit_share)])
    for r in rows:
        r.fit = r.group in fitted


# Statistics (nan where undefined: one class only, a constant column).


def balanced_accuracy(predicted: Sequence[bool], labels: Sequence[float]) -> float:
    recalls = []
    for c in (0, 1):
        mine = [p for p, y in zip(predicted, labels, strict=True) if y == c]
        if mine:
            recalls.append(sum(bool(p) == bool(c) for p in mine) / len(mine))
    return sum(recalls) / len(recalls) if recalls else math.nan


def ranks(values: Sequence[float]) -> list[float]:
    """Average ranks, from 1 (ties share their mean rank)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def roc_auc(scores: Sequence[float], labels: Sequence[float]) -> float:
    """P(a positive scores above a negative), ties counted half."""
    positives = sum(1 for y in labels if y == 1)
    negatives = len(labels) - positives
    if not positives or not negatives:
        return math.nan
    rank_sum = sum(r for r, y in zip(ranks(scores), labels, strict=True) if y == 1)
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: Pearson's r of the average ranks."""
    a, b = ranks(x), ranks(y)
    n = len(a)
    ma, mb = sum(a) / n, sum(b) / n
    cov = sum((u - ma) * (v - mb) for u, v in zip(a, b, strict=True))
    va, vb = sum((u - ma) ** 2 for u in a), sum((v - mb) ** 2 for v in b)
    return cov / math.sqrt(va * vb) if va > 0 and vb > 0 else math.nan


def pair_win(scores: Sequence[float], labels: Sequence[float], groups: Sequence[str]) -> float:
    """The share of (faithful, unfaithful) pairs of one group whose faithful row scores higher
    (a tie counts half)."""
    wins = pairs = 0.0
    by_group: dict[str, list[tuple[float, float]]] = {}
    for s, y, g in zip(scores, labels, groups, strict=True):
        by_group.setdefault(g, []).append((s, y))
    for members in by_group.values():
        for s1, y1 in members:
            for s0, y0 in members:
                if y1 == 1 and y0 == 0:
                    pairs += 1
                    wins += 1.0 if s1 > s0 else 0.5 if s1 == s0 else 0.0
    return wins / pairs if pairs else math.nan


def log_loss(probabilities: Sequence[float], labels: Sequence[float]) -> float:
    eps = 1e-6
    return -sum(
        math.log(min(max(p if y == 1 else 1 - p, eps), 1.0))
        for p, y in zip(probabilities, labels, strict=True)
    ) / len(labels)


# Fitting.


def fit_check(kind: str, rows: Sequence[LabelledRow], check: str) -> CheckCalibration:
    """Threshold and slope of one check, fitted on `rows` (their `ps[check]`, their labels)."""
    usable = _usable(kind, rows, check)
    if len(usable) < 2:
        raise ValueError(f"{check}: {len(usable)} rows with checks to fit on (need at least 2)")
    labels = [r.label for r in usable]
    if kind == "coverage":
        candidates = _quantiles([p for r in usable for p in r.ps[check]] or [0.5])

        def hard(t: float) -> float:
            return spearman([_share(r.ps[check], t) for r in usable], labels)

        t, best = _best(candidates, hard)

        def soft(a: float) -> float:
            c = CheckCalibration(threshold=t, slope=a)
            return spearman([_mean([c.apply(p) for p in r.ps[check]]) for r in usable], labels)

        a, soft_best = _best(SLOPES, soft, near=1.0)
        fitted = {"spearman(hard)": best, "spearman(soft)": soft_best}
    else:
        weakest = [min(r.ps[check]) for r in usable]
        values = sorted(set(weakest))
        candidates = [(u + v) / 2 for u, v in itertools.pairwise(values)] or values
        candidates = [c for c in candidates if 0 < c < 1] or [0.5]

        def accuracy(t: float) -> float:
            return balanced_accuracy([w > t for w in weakest], labels)

        t, best = _best(candidates, accuracy)

        def likelihood(a: float) -> float:
            c = CheckCalibration(threshold=t, slope=a)
            return -log_loss([c.apply(w) for w in weakest], labels)

        a, _ = _best(SLOPES, likelihood, near=1.0)
        fitted = {"balanced_accuracy(hard)": best}
    return CheckCalibration(threshold=t, slope=a, rows=len(usable), fit=fitted)


def _usable(kind: str, rows: Sequence[LabelledRow], check: str) -> list[LabelledRow]:
    """The scored rows (a row without checks counts for coverage: its axis is 0)."""
    return [r for r in rows if check in r.ps and (r.ps[check] or kind == "coverage")]


def _best(
    candidates: Sequence[float], metric: Callable[[float], float], near: float | None = None
) -> tuple[float, float]:
    """The candidate with the highest metric, and that metric. Of equal ones, the nearest to
    `near`; without `near`, the middle one (a threshold in the middle of the gap between the
    classes, not at its edge)."""
    scored = [(metric(c), c) for c in candidates]
    scored = [s for s in scored if not math.isnan(s[0])]
    if not scored:
        return (0.5 if near is None else near), math.nan
    top = max(value for value, _ in scored)
    best = sorted(c for value, c in scored if value == top)
    if near is None:
        return best[(len(best) - 1) // 2], top
    return min(best, key=lambda c: abs(c - near)), top


def _quantiles(values: Sequence[float], steps: int = 100) -> list[float]:
    ordered = sorted(values)
    picked = {ordered[min(len(ordered) - 1, i * len(ordered) // steps)] for i in range(steps)}
    return sorted(p for p in picked if 0 < p < 1) or [0.5]


def _share(ps: Sequence[float], t: float) -> float:
    return sum(p > t for p in ps) / len(ps) if ps else 0.0  # no checks: 0, as the axes are


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


# Reporting.


def held_out_report(
    kind: str, rows: Sequence[LabelledRow], check: str, calibration: Calibration, seed: int
) -> dict[str, Any]:
    """Uncalibrated against calibrated on `rows` (the held-out ones): each metric's two values
    and their difference, with a 95 % interval over the rows' groups resampled."""
    usable = _usable(kind, rows, check)
    mapped = calibration.check(check)
    if not usable or mapped is None:
        return {"rows": len(usable)}
    identity = CheckCalibration(threshold=0.5, slope=1.0)
    # The judge's hard verdict is p > 0.5 (its greedy choice of the two literals).

    def metrics(sample: Sequence[LabelledRow], c: CheckCalibration) -> dict[str, float]:
        labels = [r.label for r in sample]
        hard = [_share(r.ps[check], c.threshold) for r in sample]
        soft = [_mean([c.apply(p) for p in r.ps[check]]) for r in sample]
        if kind == "coverage":
            return {
                "spearman(hard)": spearman(hard, labels),
                "spearman(soft)": spearman(soft, labels),
            }
        weakest = [c.apply(min(r.ps[check])) for r in sample]
        out = {
            "balanced_accuracy(hard)": balanced_accuracy([h == 1 for h in hard], labels),
            "roc_auc(soft)": roc_auc(soft, labels),
            "log_loss(weakest)": log_loss(weakest, labels),
        }
        if kind == "faithfulness":
            groups = [r.group for r in sample]
            out["pair_win(hard)"] = pair_win(hard, labels, groups)
            out["pair_win(soft)"] = pair_win(soft, labels, groups)
        return out

    raw, cal = metrics(usable, identity), metrics(usable, mapped)
    by_group: dict[str, list[LabelledRow]] = {}
    for r in usable:
        by_group.setdefault(r.group, []).append(r)
    names = list(by_group)
    rng = random.Random(seed)
    draws: dict[str, list[float]] = {m: [] for m in raw}
    for _ in range(DRAWS):
        sample = [r for _ in names for r in by_group[names[rng.randrange(len(names))]]]
        a, b = metrics(sample, mapped), metrics(sample, identity)
        for m in raw:
            d = a[m] - b[m]
            if not math.isnan(d):
                draws[m].append(d)
    report: dict[str, Any] = {"rows": len(usable), "groups": len(names)}
    for m in raw:
        ds = sorted(draws[m])
        ci = [ds[int(0.025 * len(ds))], ds[min(len(ds) - 1, int(0.975 * len(ds)))]] if ds else []
        report[m] = {
            "uncalibrated": raw[m],
            "calibrated": cal[m],
            "difference": cal[m] - raw[m],
            "ci95": ci,
        }
    return report


# The command.


def calibrate(
    files: Sequence[Path],
    out: Path,
    engine: Engine,
    *,
    name: str | None = None,
    fit_share: float = FIT_SHARE,
    seed: int = SEED,
    max_questions: int = MAX_QUESTIONS,
    limit: int | None = None,
    sample: int | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    on_error: Callable[[str], None] | None = None,
    on_notice: Callable[[str], None] | None = None,
) -> tuple[Calibration, dict[str, Any]]:
    """Split, score, fit and report (the module's steps); writes `split.json`, one output
    folder per file, `calibration.json` and `report.json` into `out`.

    Returns:
        The calibration, and the report (what `report.json` holds).

    Raises:
        ValueError: a file cannot be read or holds no labels, `fit_share` is not in (0, 1),
            `out` holds another split, or a kind has too few scored rows to fit.
        RuntimeError: rows failed in the engine (nothing is fitted; a rerun resumes). Rows
            that fail for what they are (too long for the judge, a bad field) are left out
            and counted in `fitted_on["failed_rows"]`.
    """
    if not 0 < fit_share < 1:
        raise ValueError(f"fit_share must be in (0, 1), got {fit_share!r}")
    notice = on_notice or (lambda message: None)
    if sample is not None and sample < 1:
        raise ValueError(f"sample must be >= 1, got {sample!r}")
    labelled: list[tuple[Path, str, list[LabelledRow]]] = []
    for given in files:
        path = given if sample is None else _sample(given, out, sample, seed)
        label_field, rows, problems = read_labelled(path)
        for problem in problems:
            (on_error or notice)(f"{problem} (left out of the fit)")
        labelled.append((path, label_field, rows[:limit] if limit is not None else rows))
    everything = [r for _, _, rows in labelled for r in rows]
    split_rows(everything, fit_share, seed)
    _write_split(out, labelled, fit_share, seed)

    folders: dict[str, str] = {}
    left_out: dict[str, dict[str, int]] = {}
    for path, label_field, rows in labelled:
        _, scorer_name, check = KINDS[label_field]
        folder = out / _folder_name(path, folders)
        folders[str(path)] = folder.name
        if scorer_name == "summarization":
            # Faithfulness labels fit the alignment checks alone, which no question changes:
            # one question a source keeps the coverage calls (most of a row's work) few.
            questions = 1 if label_field == "label_faithful" else max_questions
            scorer = create_summarization_scorer(
                engine, max_questions=questions, verdicts="soft", calibration=False
            )
        else:
            scorer = row_context_scorer(engine, verdicts="soft", calibration=False)
        notice(f"scoring {path} ({len(rows)} rows) into {folder}")
        evaluate(
            path,
            [scorer],
            out=folder,
            limit=limit,
            on_progress=on_progress,
            on_error=on_error,
            on_notice=on_notice,
        ).run()
        failed = _read_checks(folder, rows)
        if failed.get("engine"):
            raise RuntimeError(
                f"{path}: {failed['engine']} rows failed in the engine (see {folder}/"
                "results.jsonl); nothing was fitted: run the same command again to resume"
            )
        left_out[str(path)] = failed

    checks: dict[str, CheckCalibration] = {}
    kinds: dict[str, str] = {}
    for _, label_field, _ in labelled:
        kind, _, check = KINDS[label_field]
        kinds[check] = kind
    for check, kind in kinds.items():
        fit_on = [r for path, lf, rows in labelled if KINDS[lf][2] == check for r in rows if r.fit]
        checks[check] = fit_check(kind, fit_on, check)
    judge = getattr(engine, "model_path", None)
    calibration = Calibration(
        name=name or out.name,
        judge=Path(judge).name if judge else None,
        method="threshold by balanced accuracy (coverage: Spearman) of the weakest p of a row, "
        "then the slope of sigmoid(a * (logit p - logit t)) by likelihood (coverage: "
        "Spearman), on the rows fitted on (evalgpu.calibrate)",
        checks=checks,
        fitted_on={
            "files": [str(path) for path, _, _ in labelled],
            "seed": seed,
            "fit_share": fit_share,
            "split": "split.json: rows grouped by the text they are judged against",
            "fit_rows": sum(r.fit for r in everything),
            "held_out_rows": sum(not r.fit for r in everything),
            "failed_rows": left_out,
        },
    )
    calibration.save(out / "calibration.json")
    report: dict[str, Any] = {"calibration": calibration.name, "checks": {}}
    for check, kind in kinds.items():
        held = [r for _, lf, rows in labelled if KINDS[lf][2] == check for r in rows if not r.fit]
        report["checks"][check] = held_out_report(kind, held, check, calibration, seed)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return calibration, report


def _sample(path: Path, out: Path, n: int, seed: int) -> Path:
    """`OUT/<stem>.sample.jsonl`: `n` lines of `path` drawn with `seed`, in the file's order
    (what is scored, so that the folder says which rows; a rerun draws the same)."""
    try:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc})") from exc
    picked = sorted(random.Random(seed).sample(range(len(lines)), min(n, len(lines))))
    target = out / f"{path.stem}.sample.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(lines[i] + "\n" for i in picked), encoding="utf-8")
    return target


def _folder_name(path: Path, taken: dict[str, str]) -> str:
    name = path.stem
    while name in taken.values():
        name += "-2"
    return name


def _write_split(
    out: Path, labelled: Sequence[tuple[Path, str, Sequence[LabelledRow]]], share: float, seed: int
) -> None:
    """`split.json`: the rows held out, per file; a folder that holds another split is refused."""
    split = {
        "seed": seed,
        "fit_share": share,
        "held_out": {str(p): [r.row for r in rows if not r.fit] for p, _, rows in labelled},
    }
    path = out / "split.json"
    if path.is_file():
        if json.loads(path.read_text(encoding="utf-8")) != split:
            raise ValueError(
                f"{path}: this folder holds another split (other files, rows, seed or share); "
                "use another --out"
            )
        return
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(split, indent=1) + "\n", encoding="utf-8")


PS_OF_CHECK: dict[str, tuple[str, str]] = {
    "summarization.alignment": ("preprocessStepResult", "alignment"),
    "summarization.coverage": ("analyzeStepResult", "coverage"),
    "context_recall.attribution": ("analyzeStepResult", "verdicts"),
}
"""Where a record keeps the verdicts of each check kind (their `p`: the judge's, uncalibrated)."""


def _read_checks(folder: Path, rows: Sequence[LabelledRow]) -> dict[str, int]:
    """Fill each row's `ps` from its record in `folder`; returns how many rows failed, by
    error kind (a row that failed has no `ps`: it is left out of the fit and the report)."""
    by_row = {r.row: r for r in rows}
    records: dict[int, dict[str, Any]] = {}
    with (folder / "results.jsonl").open(encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if record.get("row") in by_row and (
                record["row"] not in records or record.get("error") is None
            ):
                records[record["row"]] = record  # a success wins over a failure resumed
    failed: dict[str, int] = {}
    for number, record in records.items():
        row = by_row[number]
        if record.get("error") is not None:
            kind = record.get("errorKind") or "input"
            failed[kind] = failed.get(kind, 0) + 1
            continue
        for check, (step, key) in PS_OF_CHECK.items():
            entries = (record.get(step) or {}).get(key)
            if entries is not None:
                ps = [e.get("p") for e in entries]
                if all(p is not None for p in ps):
                    row.ps[check] = [float(p) for p in ps]
    return failed
