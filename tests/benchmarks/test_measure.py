"""benchmarks/measure/: the measurements' statistics, data sets and paths."""

import json
import math

import pytest

from benchmarks import measure
from benchmarks.measure import datasets, stats

# -- statistics, against values worked out by hand ------------------------------------------


def test_spearman_is_pearson_of_average_ranks_with_ties():
    # y's ranks: 1, 2, 3.5, 5, 3.5 (the two 7s share 3 and 4); x's: 1..5. Centred on 3:
    # dx = -2 -1 0 1 2, dy = -2 -1 .5 2 .5; sum dx*dy = 8, sum dx^2 = 10, sum dy^2 = 9.5.
    assert stats.spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))
    assert stats.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1)


def test_kendall_tau_b_corrects_for_ties():
    # Pairs (1,2), (1,3), (2,3): x ties the first, y none; 2 concordant, 0 discordant.
    # tau-b = 2 / sqrt(2 untied in x * 3 untied in y).
    assert stats.kendall_tau_b([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / math.sqrt(6))
    # y = 5 6 7 8 7 against x = 1..5: of the ten pairs 8 concordant, 1 discordant, and one
    # tied in y, so (8 - 1) / sqrt(10 untied in x * 9 untied in y).
    assert stats.kendall_tau_b([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(7 / math.sqrt(90))


def test_roc_auc_counts_ties_half():
    # Positives 0.9, 0.8 against negatives 0.1, 0.8: three wins and one tie of four pairs.
    assert stats.roc_auc([0.9, 0.8, 0.1, 0.8], [1, 1, 0, 0]) == pytest.approx(3.5 / 4)
    assert stats.roc_auc([0.5, 0.5, 0.5], [1, 0, 1]) == pytest.approx(0.5)
    assert math.isnan(stats.roc_auc([0.2, 0.3], [1, 1]))  # one class: undefined


def test_balanced_accuracy_and_pair_win():
    assert stats.balanced_accuracy([1, 0, 0, 0], [1, 1, 0, 0]) == pytest.approx(0.75)
    assert stats.pair_win([0.9, 0.5, 0.2, 0.7], [0.1, 0.5, 0.6, 0.7]) == pytest.approx(0.5)
    assert math.isnan(stats.pair_win([], []))


def test_a_constant_column_gives_nan_and_no_warning():
    # pytest turns warnings into errors: scipy's ConstantInputWarning would fail here.
    assert math.isnan(stats.spearman([1, 1, 1], [1, 2, 3]))
    assert math.isnan(stats.kendall_tau_b([1, 2, 3], [4, 4, 4]))


def test_the_bootstrap_draws_the_rows_that_recorded_intervals_were_drawn_with():
    # Values of the numpy-only statistics that agreement.py had before scipy: the same
    # random.Random(1234) draws give the same intervals, so that old runs merge unchanged.
    x = [0.1, 0.4, 0.4, 0.9, 0.3, 0.8, 0.2, 0.7]
    got = stats.bootstrap(stats.roc_auc, [x, [0, 1, 0, 1, 0, 1, 1, 1]], draws=200)
    assert got == pytest.approx((0.8333333333333334, 0.46875, 1.0))
    got = stats.bootstrap(stats.spearman, [x, [1, 3, 2, 5, 2, 4, 1, 5]], draws=200)
    assert got == pytest.approx((0.9329962099123679, 0.6324555320336759, 1.0))
    assert stats.interval(stats.spearman, range(30), range(30)) == {
        "value": pytest.approx(1.0),
        "ci95": [pytest.approx(1.0), pytest.approx(1.0)],
    }


def test_paired_difference_of_a_run_with_itself_is_zero():
    columns = [[0.1, 0.9, 0.4, 0.6], [0, 1, 0, 1]]
    got = stats.paired_difference(stats.roc_auc, columns, columns)
    assert got == {"a": 1.0, "b": 1.0, "difference": 0.0, "ci95": [0.0, 0.0]}


# -- data sets and paths --------------------------------------------------------------------


def test_the_frank_pairs_are_the_draw_of_every_recorded_run():
    drawn = datasets.sample_pairs(datasets.read_jsonl(measure.FRANK), None)
    assert len(drawn) == 168  # 84 articles with both a faithful and an unfaithful summary
    assert [r["id"] for r in drawn[:4]] == [
        "frank-valid-bbc-39587051-TranS2S",
        "frank-valid-bbc-39587051-PtGen",
        "frank-valid-bbc-35039462-BERTS2S",
        "frank-valid-bbc-35039462-TranS2S",
    ]


def test_documents_are_taken_whole_in_order_of_their_text(tmp_path):
    path = tmp_path / "rows.jsonl"
    rows = [
        {"id": f"{source}{k}", "source": source, "summary": f"{source} {k}."}
        for source in ("c", "a", "b")
        for k in range(2)
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")  # a blank line is skipped
    assert [r["output"] for r in datasets.documents(path, 3, None)] == ["a 0.", "a 1.", "b 0."]
    assert [r["input"] for r in datasets.documents(path, 9, 1, first_doc=2)] == ["c", "c"]


def test_sentences_and_paths(tmp_path):
    assert datasets.sentences(" Cats purr. Dogs bark!  Why? ") == [
        "Cats purr.",
        "Dogs bark!",
        "Why?",
    ]
    assert measure.rel(measure.FRANK) == "benchmarks/data/frank_dev.jsonl"
    assert measure.rel(tmp_path / "x.json") == str(tmp_path / "x.json")
    measure.write_json(tmp_path / "new" / "x.json", {"a": 1})
    assert json.loads((tmp_path / "new" / "x.json").read_text()) == {"a": 1}
    assert measure.vmrss_kib() > 0
