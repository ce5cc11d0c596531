"""benchmarks/agreement.py on the scripted engine (statistics: test_measure.py)."""

import json
from pathlib import Path

import pytest

from benchmarks import agreement

ROOT = Path(__file__).resolve().parents[2]


def test_agreement_dry_run_writes_json(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    data = tmp_path / "attr.jsonl"
    rows = [
        {"ground_truth": "Cats purr.", "context": ["Cats purr loudly."], "label_attributed": 1},
        {"ground_truth": "Dogs fly.", "context": ["Dogs bark."], "label_attributed": 0},
        {"ground_truth": "Birds sing.", "context": ["Birds sing songs."], "label_attributed": 1},
    ]
    data.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "out.json"
    code = agreement.main([str(data), "--backend", "scripted", "--json", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    assert result["invalid"] == 0 and result["kind"] == "attribution"
    assert result["roc_auc(score)"]["value"] == 1.0
    # Row by row, so that two runs on the same rows can be compared in pairs.
    assert [r["label"] for r in result["scored"]] == [1, 0, 1]
    assert [r["score"] for r in result["scored"]] == [1.0, 0.0, 1.0]
    assert all(r["error_kind"] is None and "recall" in r["axes"] for r in result["scored"])
    # Each ground-truth claim's p is kept, so another reading of the run needs no second run.
    for row in result["scored"]:
        ps = row["p"]["verdicts"]
        assert ps and all(0.0 <= p <= 1.0 for p in ps)
        assert row["axes"]["recall_soft"] == pytest.approx(sum(ps) / len(ps))


def test_agreement_counts_rows_too_long_for_the_judge_apart_from_invalid_replies():
    from types import SimpleNamespace

    records = [{"ground_truth": "g", "context": ["c"], "label_attributed": i % 2} for i in range(5)]
    results = [
        SimpleNamespace(error=None, error_kind=None, score=1.0),
        SimpleNamespace(error=None, error_kind=None, score=0.0),
        SimpleNamespace(error="context_recall.attribution: ...", error_kind="too_long", score=None),
        SimpleNamespace(error="context: ...", error_kind="too_long", score=None),
        # The kind decides, not the words: an invalid reply that mentions the context is invalid.
        SimpleNamespace(
            error="context_recall.claims: reply does not match the schema (maximum context length)",
            error_kind="invalid_reply",
            score=None,
        ),
    ]
    rows = agreement.scored_rows(records, results, "attribution", 1.0)
    out = agreement.metrics(rows, "attribution", 1.0)
    assert (out["rows"], out["too_long"], out["invalid"]) == (5, 2, 1)


# -- FRANK pairs and soft axes (synthetic rows) ---------------------------------------------


def frank_rows() -> list[dict]:
    """Five articles: three with both labels (one has two faithful summaries), one with only
    faithful summaries, one with only unfaithful ones."""
    rows = []
    for article, labels in enumerate([[1, 0], [1, 1, 0], [0, 1], [1, 1], [0]]):
        for k, label in enumerate(labels):
            rows.append(
                {
                    "id": f"a{article}-{k}",
                    "source": f"Article {article}.",
                    "summary": f"Summary {k} of article {article}.",
                    "label_faithful": label,
                    "human_score": float(label),
                }
            )
    return rows


def test_pairs_hold_one_faithful_and_one_unfaithful_summary_of_one_article():
    rows = agreement.sample_pairs(frank_rows(), None)
    assert len(rows) == 6  # articles 0, 1 and 2; 3 and 4 lack a side
    for faithful, unfaithful in zip(rows[::2], rows[1::2], strict=True):
        assert faithful["source"] == unfaithful["source"]
        assert (faithful["label_faithful"], unfaithful["label_faithful"]) == (1, 0)
    assert {r["source"] for r in rows} == {"Article 0.", "Article 1.", "Article 2."}
    assert agreement.sample_pairs(frank_rows(), 2) == rows[:4]  # the same draw, cut
    assert agreement.sample_pairs(frank_rows(), None) == rows  # seeded: repeatable


def test_a_claim_is_in_a_text_when_most_of_its_words_are():
    summary = "The bridge reopened on Saturday after a restoration."
    assert agreement.in_text("The bridge reopened on Saturday", summary)
    assert not agreement.in_text("The council paid 4.2 million euros for it", summary)
    assert not agreement.in_text("", summary)


def test_pair_metrics_use_hard_and_soft_axes_of_pairs_scored_on_both_sides():
    from types import SimpleNamespace

    def scored(alignment: float, soft: float, error: str | None = None):
        axes = {"alignment": alignment, "coverage": 1.0}
        axes |= {"alignment_soft": soft, "coverage_soft": 1.0}
        kind = None if error is None else "invalid_reply"
        return SimpleNamespace(error=error, error_kind=kind, score=alignment, axes=axes)

    records = [{"label_faithful": int(i % 2 == 0), "human_score": 0.5} for i in range(6)]
    results = [
        scored(1.0, 0.9),  # pair 1: hard tie, soft win
        scored(1.0, 0.6),
        scored(0.5, 0.3),  # pair 2: hard win, soft loss
        scored(0.0, 0.8),
        scored(1.0, 0.9, error="invalid"),  # pair 3: not scored on both sides
        scored(0.0, 0.1),
    ]
    out = agreement.pair_metrics(agreement.scored_rows(records, results, "faithfulness", 1.0))
    assert (out["pairs"], out["pairs_scored"]) == (3, 2)
    assert out["pair_win(alignment)"]["value"] == pytest.approx(0.75)
    assert out["pair_win(alignment_soft)"]["value"] == pytest.approx(0.5)
    assert out["pair_win(soft score)"]["value"] == pytest.approx(0.5)
    lo, hi = out["pair_win(alignment)"]["ci95"]
    assert 0.5 <= lo <= 0.75 <= hi <= 1.0


def test_the_weakest_claim_reading_takes_each_rows_lowest_p_and_ranks_pairs_by_it():
    def row(ps: list[float], label: int) -> dict:
        soft = sum(ps) / len(ps) if ps else 0.0
        axes = {"alignment": 1.0, "alignment_soft": soft, "coverage_soft": 1.0}
        return {
            "id": None,
            "label": label,
            "human_score": float(label),
            "score": 1.0,
            "soft_score": soft,
            "axes": axes,
            "error_kind": None,
            "p": {"alignment": ps},
        }

    # Pair 1: one wrong claim among four lowers the mean a little (the unfaithful summary's
    # mean is the higher), the weakest a lot.
    # Pair 2: the faithful summary has no claims, read as its soft axis (0): lost either way.
    rows = [row([0.7, 0.7, 0.7, 0.7], 1), row([0.95, 0.95, 0.95, 0.2], 0)]
    rows += [row([], 1), row([0.3], 0)]
    assert [agreement.value(r, "alignment_weakest") for r in rows] == [0.7, 0.2, 0.0, 0.3]
    out = agreement.pair_metrics(rows)
    assert out["pair_win(alignment_weakest)"]["value"] == pytest.approx(0.5)
    assert out["pair_win(alignment_soft)"]["value"] == pytest.approx(0.0)
    assert (
        agreement.metrics(rows, "faithfulness", 1.0)["roc_auc(alignment_weakest)"]["value"] == 0.5
    )
    # The two readings of the one run, paired over the same pairs: weakest minus mean.
    got = agreement.metrics(rows, "faithfulness", 1.0, pairs=True)
    diff = got["alignment_weakest - alignment_soft"]
    assert (diff["a"], diff["b"], diff["difference"], diff["units"]) == (0.5, 0.0, 0.5, 2)
    lo, hi = diff["ci95"]
    assert 0.0 <= lo <= 0.5 <= hi <= 1.0
    # A run that kept no p (recorded before) has no such reading, and reports none.
    for r in rows:
        del r["p"]
    assert agreement.value(rows[0], "alignment_weakest") is None
    assert "pair_win(alignment_weakest)" not in agreement.pair_metrics(rows)
    assert "alignment_weakest - alignment_soft" not in agreement.metrics(
        rows, "faithfulness", 1.0, pairs=True
    )


def test_a_trial_designs_axes_are_paired_with_the_products_reading_of_the_same_run():
    def row(trial: float, product: float, label: int) -> dict:
        axes = {
            "alignment": float(trial >= 0.5),
            "alignment_soft": trial,
            "alignment_soft_product": product,
            "coverage_soft": 1.0,
        }
        return {
            "id": None,
            "label": label,
            "human_score": float(label),
            "score": float(trial >= 0.5),
            "soft_score": trial,
            "axes": axes,
            "error_kind": None,
        }

    # The trial ranks both pairs right, the product one of them.
    rows = [row(0.9, 0.6, 1), row(0.4, 0.7, 0), row(0.8, 0.8, 1), row(0.3, 0.2, 0)]
    got = agreement.metrics(rows, "faithfulness", 1.0, pairs=True)
    diff = got["alignment_soft - alignment_soft_product"]
    assert (diff["a"], diff["b"], diff["difference"], diff["units"]) == (1.0, 0.5, 0.5, 2)
    assert "alignment - alignment_product" not in got  # only what the run recorded
    for r in rows:
        del r["axes"]["alignment_soft_product"]
    assert not any(
        k.endswith("_product") for k in agreement.metrics(rows, "faithfulness", 1.0, pairs=True)
    )


def test_the_weakest_reading_of_attribution_is_paired_with_the_soft_recall_by_roc_auc():
    def row(ps: list[float], label: int) -> dict:
        soft = sum(ps) / len(ps)
        axes = {"recall": float(min(ps) > 0.5), "recall_soft": soft}
        return {
            "id": None,
            "label": label,
            "score": axes["recall"],
            "soft_score": soft,
            "axes": axes,
            "error_kind": None,
            "p": {"verdicts": ps},
        }

    # The mean ranks one unattributed row (one claim found nowhere) above an attributed one;
    # the weakest claim ranks every attributed row first.
    rows = [row([0.8, 0.8], 1), row([0.9, 0.6], 1), row([0.99, 0.99, 0.99, 0.1], 0), row([0.3], 0)]
    out = agreement.metrics(rows, "attribution", 1.0)
    assert out["roc_auc(recall_weakest)"]["value"] == 1.0
    diff = out["recall_weakest - recall_soft"]
    assert (diff["a"], diff["b"], diff["units"]) == (1.0, 0.75, 4)
    assert diff["difference"] == pytest.approx(0.25)


def test_agreement_on_frank_pairs_reports_pair_wins_and_soft_axes(tmp_path):
    data = tmp_path / "frank.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in frank_rows()))
    out = tmp_path / "out.json"
    assert (
        agreement.main([str(data), "--backend", "scripted", "--pairs", "3", "--json", str(out)])
        == 0
    )
    result = json.loads(out.read_text())
    assert (result["rows"], result["pairs"], result["pairs_scored"]) == (6, 3, 3)
    # Faithful, then unfaithful, pair by pair; each row with its own soft score.
    assert [r["label"] for r in result["scored"]] == [1, 0] * 3
    assert all(
        r["soft_score"] == min(r["axes"]["alignment_soft"], r["axes"]["coverage_soft"])
        for r in result["scored"]
    )
    for name in ("pair_win(alignment)", "pair_win(alignment_soft)", "roc_auc(alignment_soft)"):
        assert 0.0 <= result[name]["value"] <= 1.0
    # The scripted judge lists the summary's sentences as its claims: all are in the summary.
    claims = result["claims_in_summary"]
    assert claims["claims"] == sum(r["claims_in_summary"][1] for r in result["scored"]) > 0
    assert claims["share"] == 1.0
    # One p per claim and per question answered, in the order of the step results.
    for row in result["scored"]:
        assert len(row["p"]["alignment"]) == row["claims_in_summary"][1]
        for name, axis in (("alignment", "alignment_soft"), ("coverage", "coverage_soft")):
            ps = row["p"][name]
            assert row["axes"][axis] == pytest.approx(sum(ps) / len(ps))
    with pytest.raises(SystemExit):
        agreement.main([str(data), "--backend", "scripted", "--limit", "4"])
    # --offset slices the same draw of pairs: two slices are the whole sample.
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    base = [str(data), "--backend", "scripted"]
    agreement.main([*base, "--pairs", "2", "--json", str(first)])
    agreement.main([*base, "--pairs", "1", "--offset", "2", "--json", str(second)])
    ids = [r["id"] for f in (first, second) for r in json.loads(f.read_text())["scored"]]
    assert ids == [r["id"] for r in result["scored"]]


def test_agreement_offset_holds_out_the_rows_a_figure_is_reported_on(tmp_path, monkeypatch):
    # --offset K --limit N scores rows K..K+N of the same shuffle as --limit: a development
    # slice disjoint from the first rows, which stay held out.
    data = tmp_path / "attr.jsonl"
    rows = [
        {
            "id": f"r{i}",
            "ground_truth": f"Fact {i}.",
            "context": ["Fact."],
            "label_attributed": i % 2,
        }
        for i in range(10)
    ]
    data.write_text("\n".join(json.dumps(r) for r in rows))
    seen: list[list[str]] = []
    real = agreement.score

    def spy(records, *args):
        seen.append([r["id"] for r in records])
        return real(records, *args)

    monkeypatch.setattr(agreement, "score", spy)
    out = tmp_path / "out.json"
    base = [str(data), "--backend", "scripted", "--json", str(out)]
    agreement.main([*base, "--limit", "4"])
    agreement.main([*base, "--offset", "4", "--limit", "4"])
    agreement.main([*base, "--offset", "8"])
    held, dev, rest = seen
    assert len(held) == len(dev) == 4 and len(rest) == 2
    assert set(held) | set(dev) | set(rest) == {r["id"] for r in rows}  # disjoint, all rows
    assert json.loads(out.read_text())["offset"] == 8


def _run(kind: str, labels: list[float], scores: list[float]) -> dict:
    """An agreement.py JSON holding only what `compare` reads."""
    rows = [
        {"id": f"r{i}", "label": y, "score": s, "soft_score": s, "axes": {"x": s}}
        for i, (y, s) in enumerate(zip(labels, scores, strict=True))
    ]
    return {"kind": kind, "scored": rows}


def test_compare_gives_a_minus_b_with_an_interval_over_the_same_rows():
    # Attribution: run a ranks every attributed row first, run b every one last.
    labels = [1, 0] * 10
    a = _run("attribution", labels, [0.9 if y else 0.1 for y in labels])
    b = _run("attribution", labels, [0.1 if y else 0.9 for y in labels])
    got = agreement.compare(a, b)["score"]
    assert (got["a"], got["b"], got["difference"], got["ci95"]) == (1.0, 0.0, 1.0, [1.0, 1.0])
    # Its verdicts too, each run read at its own scale: at even odds a is always right, b never;
    # no score reaches the scale, so both runs say "not attributed" throughout (0.5 each).
    b = {
        **b,
        "scale": 10.0,
        "scored": [{**r, "soft_score": 10 * r["soft_score"]} for r in b["scored"]],
    }
    decided = agreement.compare(a, b)["balanced_accuracy"]
    got = decided["soft score>=0.5*scale"]
    assert (got["a"], got["b"], got["difference"], got["ci95"]) == (1.0, 0.0, 1.0, [1.0, 1.0])
    assert decided["score==scale"]["difference"] == 0.0
    assert decided["score==scale"]["a"] == 0.5
    # FRANK: a unit is a pair (faithful, unfaithful); b ties every pair, a wins half of them.
    a = _run("faithfulness", [1, 0] * 4, [1, 0, 0, 1, 1, 0, 0, 1])
    b = _run("faithfulness", [1, 0] * 4, [0.5] * 8)
    got = agreement.compare(a, b)["soft_score"]
    assert (got["a"], got["b"], got["difference"], got["units"]) == (0.5, 0.5, 0.0, 4)
    lo, hi = got["ci95"]
    assert -0.5 <= lo < 0 < hi <= 0.5  # pairs resampled: a's share of wins varies, b's does not


def test_compare_refuses_runs_of_other_rows(tmp_path):
    a = _run("coverage", [0.1, 0.5, 0.9], [0.2, 0.4, 0.8])
    b = _run("coverage", [0.1, 0.5], [0.2, 0.4])
    with pytest.raises(ValueError, match="did not score the same rows"):
        agreement.compare(a, b)
    with pytest.raises(ValueError, match="need their rows"):
        agreement.compare(a, {"kind": "coverage"})


def test_agreement_compare_prints_the_paired_table(tmp_path, capsys):
    data = tmp_path / "frank.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in frank_rows()))
    runs = [tmp_path / "a.json", tmp_path / "b.json"]
    for run in runs:
        argv = [str(data), "--backend", "scripted", "--pairs", "3", "--json", str(run)]
        assert agreement.main(argv) == 0
    capsys.readouterr()
    assert agreement.main(["--compare", *map(str, runs)]) == 0
    table = capsys.readouterr().out
    assert "| value | pair win, A | pair win, B | A - B | 95 % CI (paired) |" in table
    # The same engine on the same rows: every difference is 0, and so is its interval.
    assert "| alignment_soft |" in table and "+0.000 | [+0.000, +0.000] |" in table


def _slices(tmp_path, n: int, cut: int) -> tuple[Path, list[Path]]:
    """A RoSE-like file of n rows, scored by the scripted engine whole and in two slices."""
    data = tmp_path / "rose.jsonl"
    rows = [
        {
            "id": f"r{i}",
            "source": f"The bridge opened in {1900 + i}. It is {i} metres long.",
            "summary": f"The bridge opened in {1900 + i}." if i % 3 else "A bridge.",
            "human_coverage": (i % 5) / 4,
        }
        for i in range(n)
    ]
    data.write_text("\n".join(json.dumps(r) for r in rows))
    runs = [tmp_path / name for name in ("whole.json", "a.json", "b.json")]
    base = [str(data), "--backend", "scripted", "--limit"]
    for run, argv in zip(
        runs, ([str(n)], [str(cut)], [str(n - cut), "--offset", str(cut)]), strict=True
    ):
        assert agreement.main([*base, *argv, "--json", str(run)]) == 0
    return data, runs


def test_merge_of_slices_reports_what_one_run_on_all_their_rows_reports(tmp_path, capsys):
    _, (whole, a, b) = _slices(tmp_path, 12, 5)
    out = tmp_path / "merged.json"
    capsys.readouterr()
    assert agreement.main(["--merge", str(a), str(b), "--json", str(out)]) == 0
    assert "| rose.jsonl, 2 runs (coverage, 12 rows, 0 invalid, 0 too long) |" in (
        capsys.readouterr().out
    )
    merged, one = json.loads(out.read_text()), json.loads(whole.read_text())
    assert [r["id"] for r in merged["scored"]] == [r["id"] for r in one["scored"]]
    assert merged["offset"] == [0, 5]
    metrics = [k for k, v in one.items() if isinstance(v, dict) and "value" in v]
    assert "spearman(coverage, human_coverage)" in metrics
    # The same rows in the same order: every metric and interval as the single run's.
    assert {k: merged[k] for k in metrics} == {k: one[k] for k in metrics}


def test_merge_refuses_overlapping_or_unlike_runs(tmp_path):
    _, (whole, a, b) = _slices(tmp_path, 6, 3)
    runs = [json.loads(path.read_text()) for path in (whole, a, b)]
    with pytest.raises(ValueError, match="3 rows are in more than one run, first: r"):
        agreement.merge([runs[0], runs[1]])
    with pytest.raises(ValueError, match="differ in compute"):
        agreement.merge([runs[1], {**runs[2], "compute": "int8"}])
    # The questions a summary is given change its coverage: runs with other counts are two.
    assert runs[1]["max_questions"] == 5
    with pytest.raises(ValueError, match="differ in max_questions"):
        agreement.merge([runs[1], {**runs[2], "max_questions": 10}])
    with pytest.raises(ValueError, match="needs its rows"):
        agreement.merge([runs[1], {k: v for k, v in runs[2].items() if k != "scored"}])
    with pytest.raises(SystemExit):  # a usage error on the command line, not a traceback
        agreement.main(["--merge", str(whole), str(a)])
