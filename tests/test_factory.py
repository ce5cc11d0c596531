"""`call_factory`: a "package.module:factory" spec imported and called, what it makes checked,
and every failure named by the spec (the command line's `--backend` and `--scorer`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalgpu import Scorer
from evalgpu._factory import call_factory
from evalgpu.engines.base import Engine
from evalgpu.engines.scripted import ScriptedEngine

from cli_engines import LimitedEngine

HERE = __name__
"""This module, as a spec names it (tests/ is on the path)."""


class Made:
    """What `make` returns: the arguments it was called with."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args
        self.kwargs = kwargs


def make(*args: Any, **kwargs: Any) -> Made:
    return Made(*args, **kwargs)


def make_number(*args: Any) -> int:
    return 42


def make_broken(*args: Any) -> Any:
    raise AttributeError("the factory itself fell over")


def test_the_factory_is_called_with_the_arguments_given_and_its_product_returned() -> None:
    made = call_factory(f"{HERE}:make", "thing", Made, "a Made", "m", 2, flag=True)
    assert isinstance(made, Made)
    assert made.args == ("m", 2) and made.kwargs == {"flag": True}


def test_an_engine_factory_of_your_own_builds_the_engine_it_names() -> None:
    engine = call_factory("cli_engines:limited", "backend", Engine, "an Engine", None, true_p=0.7)
    assert isinstance(engine, LimitedEngine)
    assert engine.true_p == 0.7 and engine.max_model_len == 4096


def test_a_module_that_does_not_exist_cannot_be_imported_and_the_spec_is_named() -> None:
    with pytest.raises(ValueError) as caught:
        call_factory("no_such_module_here:build", "backend", Engine, "an Engine", None)
    assert str(caught.value) == (
        "backend 'no_such_module_here:build': cannot import 'build' from 'no_such_module_here' "
        "(No module named 'no_such_module_here')"
    )
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)


def test_a_factory_missing_from_its_module_cannot_be_imported() -> None:
    with pytest.raises(ValueError) as caught:
        call_factory("cli_engines:no_such_factory", "scorer", Scorer, "a Scorer", None)
    message = str(caught.value)
    assert message.startswith(
        "scorer 'cli_engines:no_such_factory': cannot import 'no_such_factory' from 'cli_engines' ("
    )
    assert "has no attribute 'no_such_factory'" in message
    assert isinstance(caught.value.__cause__, AttributeError)


def test_a_spec_without_a_factory_after_the_colon_cannot_be_imported() -> None:
    with pytest.raises(ValueError, match=r"^scorer 'cli_engines:': cannot import '' from"):
        call_factory("cli_engines:", "scorer", Scorer, "a Scorer", None)


def test_a_module_whose_own_imports_fail_is_named_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "judge_plugin_needs_more.py").write_text(
        "import a_dependency_not_installed\n\ndef build(model):\n    return None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = "judge_plugin_needs_more:build"
    with pytest.raises(ValueError) as caught:
        call_factory(spec, "backend", Engine, "an Engine", None)
    assert str(caught.value).startswith(f"backend {spec!r}: cannot import 'build' from")
    assert "No module named 'a_dependency_not_installed'" in str(caught.value)


def test_a_factory_that_returns_something_else_is_a_type_error_naming_the_spec() -> None:
    spec = f"{HERE}:make_number"
    with pytest.raises(TypeError) as caught:
        call_factory(spec, "scorer", Scorer, "a Scorer", ScriptedEngine())
    assert str(caught.value) == f"scorer {spec!r} returned int, not a Scorer"


def test_an_engine_is_recognised_by_its_shape_and_an_object_without_generate_is_not() -> None:
    # A ScriptedEngine is an Engine (name and generate); a Made is not.
    engine = call_factory("cli_engines:slow", "backend", Engine, "an Engine", None)
    assert isinstance(engine, ScriptedEngine)
    with pytest.raises(TypeError, match=r"backend '.*:make' returned Made, not an Engine$"):
        call_factory(f"{HERE}:make", "backend", Engine, "an Engine", None)


def test_an_error_inside_the_factory_is_its_own_and_not_an_import_error() -> None:
    with pytest.raises(AttributeError, match=r"^the factory itself fell over$"):
        call_factory(f"{HERE}:make_broken", "backend", Engine, "an Engine", None)
