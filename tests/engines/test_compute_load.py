"""Loading a model in a compute (`evalgpu.engines._compute.load_model`): parameters read from
the safetensors file into their new dtype must equal transformers' own cast, for a tiny random
Qwen2 stored in bfloat16 (tied and untied heads)."""

from __future__ import annotations

import pytest
import torch

from evalgpu.engines._compute import Checkpoint, load_model


def _tiny_qwen2(folder, tie: bool):
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=tie,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def stored_bf16(request, tmp_path_factory):
    return _tiny_qwen2(tmp_path_factory.mktemp("qwen2"), tie=request.param), request.param


def _reference(folder, dtype):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).eval()


IDS = torch.tensor([[1, 5, 9, 33, 70, 2]])


def test_float32_from_a_bfloat16_file_is_transformers_own_cast(stored_bf16):
    folder, tie = stored_bf16
    model, reference = (
        load_model(str(folder), "float32", "cpu", torch.float32),
        _reference(folder, torch.float32),
    )
    ours, theirs = dict(model.named_parameters()), dict(reference.named_parameters())
    assert ours.keys() == theirs.keys()
    assert model.config.dtype == reference.config.dtype == torch.float32
    for name, param in ours.items():
        assert param.dtype == torch.float32 and torch.equal(param, theirs[name]), name
    # In float32 a tied head stays tied: no second copy of the embeddings.
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    assert (head.weight is embed.weight) == tie
    with torch.inference_mode():
        assert torch.equal(model(IDS).logits, reference(IDS).logits)


def test_bfloat16_keeps_the_body_and_computes_the_head_in_float32(stored_bf16):
    folder, _ = stored_bf16
    model = load_model(str(folder), "bfloat16", "cpu", torch.bfloat16)
    reference = _reference(folder, torch.bfloat16)
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    assert embed.weight.dtype == torch.bfloat16 and head.weight.dtype == torch.float32
    assert head.weight is not embed.weight
    assert torch.equal(head.weight, reference.get_output_embeddings().weight.float())
    assert model.model.norm.weight.dtype == torch.float32
    with torch.inference_mode():
        assert model(IDS).logits.dtype == torch.float32


def test_a_checkpoint_reads_a_tensor_into_a_dtype_and_falls_back_to_the_model_where_absent(
    tmp_path,
):
    from safetensors.torch import save_file

    stored = {"a.weight": torch.randn(3, 4).to(torch.bfloat16), "b": torch.arange(5)}
    save_file(stored, tmp_path / "model.safetensors")
    checkpoint = Checkpoint(tmp_path)

    read = checkpoint.read("a.weight", torch.zeros(3, 4, dtype=torch.bfloat16), torch.float32)
    assert read.dtype == torch.float32 and torch.equal(read, stored["a.weight"].float())
    # Not in the files, stored under another shape, or in a dtype it does not read: the
    # model's own tensor, cast.
    mine = torch.ones(2, 2, dtype=torch.bfloat16)
    for name in ("missing", "a.weight", "b"):
        like = mine if name != "b" else torch.ones(5, dtype=torch.int64)
        assert torch.equal(checkpoint.read(name, like, torch.float32), like.float())
