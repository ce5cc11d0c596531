from pathlib import Path

import pytest

from evalgpu import models


@pytest.fixture
def models_dir(tmp_path, monkeypatch):
    """An empty models dir; presets still come from the checkout's models/presets/."""
    monkeypatch.setenv("EVALGPU_MODELS_DIR", str(tmp_path))
    return tmp_path


def test_presets_are_listed_with_their_folders(models_dir):
    presets = {p.name: p for p in models.list_presets()}
    assert set(presets) >= {
        "qwen2.5-coder-1.5b-instruct",
        "smollm2-135m-instruct",
        "qwen2.5-7b-instruct",
        "qwen3-8b",
        "llama-3.1-8b-instruct",
        "mistral-7b-instruct",
        "prometheus-2-7b",
    }
    assert models.DEFAULT_MODEL == "qwen2.5-coder-1.5b-instruct"
    assert models.SMALL_MODEL == "smollm2-135m-instruct"
    assert presets[models.DEFAULT_MODEL].hf_id == "Qwen/Qwen2.5-Coder-1.5B-Instruct"
    for p in presets.values():
        assert p.folder == models_dir / p.name
        assert not p.present
        assert p.hf_id and p.max_model_len > 0


def test_preset_options_per_backend(models_dir):
    qwen3 = models.preset_for("qwen3-8b")
    assert qwen3 is not None and qwen3.hf_id == "Qwen/Qwen3-8B"
    assert qwen3.engine_options("vllm") == {
        "max_model_len": 32768,
        "dtype": "bfloat16",
        "chat_template_kwargs": {"enable_thinking": False},
    }
    default = models.preset_for(None)
    assert default is not None and default.name == models.DEFAULT_MODEL
    # "auto" leaves the dtype to the engine; [transformers] options reach only that backend.
    assert "dtype" not in default.engine_options("transformers")
    assert default.engine_options("transformers")["batch_size"] >= 1
    assert "batch_size" not in default.engine_options("vllm")


def test_preset_is_present_once_its_folder_has_a_config(models_dir):
    (models_dir / "qwen3-8b").mkdir()
    (models_dir / "qwen3-8b" / "config.json").write_text("{}")
    assert {p.name: p.present for p in models.list_presets()}["qwen3-8b"]
    assert models.resolve_model("qwen3-8b") == models_dir / "qwen3-8b"
    # A preset's folder given as a path still gets the preset's options.
    assert models.preset_for(str(models_dir / "qwen3-8b")).name == "qwen3-8b"


def test_a_preset_file_in_the_models_dir_is_read(models_dir):
    (models_dir / "presets").mkdir()
    (models_dir / "presets" / "tiny.toml").write_text(
        'hf_id = "org/tiny"\nmax_model_len = 512\n[options]\nseed = 3\n'
    )
    tiny = models.preset_for("tiny")
    assert tiny is not None and tiny.name == "tiny" and tiny.options == {"seed": 3}


def test_a_preset_without_a_required_key_is_an_error(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text('name = "broken"\nmax_model_len = 10\n')
    with pytest.raises(ValueError, match=r"broken\.toml: missing key 'hf_id'"):
        models.load_preset(path)


def test_a_folder_resolves_to_itself(tmp_path):
    assert models.resolve_model(str(tmp_path)) == tmp_path
    assert models.resolve_model(tmp_path) == tmp_path


def test_an_unknown_name_is_an_error_listing_the_presets(models_dir):
    with pytest.raises(
        ValueError,
        match=r"'nope' is neither a model folder nor a preset name "
        r"\(presets: .*qwen3-8b",
    ):
        models.resolve_model("nope")


def test_missing_weights_name_the_folder_to_fill(models_dir):
    with pytest.raises(FileNotFoundError) as info:
        models.resolve_model("llama-3.1-8b-instruct")
    message = str(info.value)
    assert f"no weights in {models_dir / 'llama-3.1-8b-instruct'}/" in message
    assert "meta-llama/Llama-3.1-8B-Instruct" in message


def test_models_dir_defaults_to_the_checkout(monkeypatch):
    monkeypatch.delenv("EVALGPU_MODELS_DIR", raising=False)
    assert models.models_dir() == Path(__file__).resolve().parents[1] / "models"


def test_a_preset_names_the_verdict_mode_measured_for_its_judge(models_dir):
    from types import SimpleNamespace

    from evalgpu import create_context_recall_scorer, create_summarization_scorer
    from evalgpu.engines.scripted import ScriptedEngine

    (models_dir / "presets").mkdir()
    (models_dir / "presets" / "judge.toml").write_text(
        'hf_id = "org/judge"\nmax_model_len = 512\nverdicts = "soft"\n'
    )
    folder = models_dir / "judge"
    folder.mkdir()
    judge = ScriptedEngine()
    judge.model_path = str(folder)  # what the real engines carry
    assert models.verdicts_for(judge) == ("soft", "the measured default of preset judge")
    # Named by the preset's name (a Ray run's planned judge), the same.
    assert models.verdicts_for(SimpleNamespace(model_path="judge"))[0] == "soft"
    # Both factories default to it; a mode that is asked for wins.
    summarization = create_summarization_scorer(judge)
    recall = create_context_recall_scorer(judge, context=["c"])
    assert summarization.options["verdicts"] == recall.options["verdicts"] == "soft"
    assert "verdicts" not in create_summarization_scorer(judge, verdicts="hard").options
    result = summarization.run(input="Cats purr.", output="Cats purr.")
    assert result.reason.startswith("Score 0.90 (soft verdicts")
    # Without a preset that says so, the reference's hard verdicts.
    assert models.verdicts_for(ScriptedEngine()) == ("hard", "the reference's default")
    assert "verdicts" not in create_summarization_scorer(ScriptedEngine()).options


def test_a_preset_names_the_calibration_fitted_for_its_judge(models_dir):
    from evalgpu import create_summarization_scorer
    from evalgpu.calibration import Calibration, CheckCalibration
    from evalgpu.engines.scripted import ScriptedEngine

    (models_dir / "presets").mkdir()
    (models_dir / "presets" / "judge.toml").write_text(
        'hf_id = "org/judge"\nmax_model_len = 512\ncalibration = "judge.calibration.json"\n'
    )
    strict = Calibration(
        name="judge-strict",
        checks={"summarization.alignment": CheckCalibration(threshold=0.95)},
    )
    strict.save(models_dir / "presets" / "judge.calibration.json")
    (models_dir / "judge").mkdir()
    judge = ScriptedEngine()
    judge.model_path = str(models_dir / "judge")
    assert models.calibration_for(judge) == models_dir / "presets" / "judge.calibration.json"
    scorer = create_summarization_scorer(judge, verdicts="hard")
    assert scorer.options["calibration"] == {"name": "judge-strict", "digest": strict.digest()}
    result = scorer.run(input="Cats purr.", output="Cats purr.")
    assert (result.calibration, result.axes["alignment"]) == ("judge-strict", 0.0)
    # False turns it off; a judge without a preset has none.
    plain = create_summarization_scorer(judge, verdicts="hard", calibration=False)
    assert "calibration" not in plain.options
    assert plain.run(input="Cats purr.", output="Cats purr.").axes["alignment"] == 1.0
    assert create_summarization_scorer(ScriptedEngine()).calibration is None


def test_a_preset_with_an_unknown_verdict_mode_is_an_error(tmp_path):
    path = tmp_path / "odd.toml"
    path.write_text('hf_id = "org/odd"\nmax_model_len = 10\nverdicts = "fuzzy"\n')
    with pytest.raises(ValueError, match=r"odd\.toml: verdicts must be 'hard' or 'soft'"):
        models.load_preset(path)
