"""Compile time of every schema the scorers send, for vLLM's structured-output backends.

For each backend, on a model's tokenizer (the default judge's unless `--model`), it compiles the
JSON schema of every reply the scorers ask for (`Claims`, `Questions` at 3 and 10, the four
verdicts, `Attribution` at 3 and 10 passages, `Reason`) the way vLLM's backend does:

- guidance: llguidance, with the options the engine sends (`json_schema(schema, "guidance")`),
  then a matcher and the first token mask (llguidance compiles lazily: the first mask is part of
  the cost);
- xgrammar: `GrammarCompiler.compile_json_schema` over the tokenizer's vocabulary, as vLLM's
  xgrammar backend does (any whitespace, its default);
- outlines: `outlines_core`'s regex and `Index` over the vocabulary, only with `--outlines`:
  minutes and gigabytes a schema on a 151k-token vocabulary (docs/VLLM.md).

It needs vLLM installed (`.venv` where scripts/setup put vLLM's CPU build: xgrammar and
outlines-core come with vLLM) and no model weights. It prints one line per backend and schema
and writes JSON (`--json`).

    .venv/bin/python scripts/measure_schemas.py --json docs/measured/schemas-compile.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from benchmarks.measure import write_json


def schemas() -> dict[str, Any]:
    """Every reply schema the scorers send, by a readable name."""
    from evalgpu import verdicts
    from evalgpu.scorers.summarization import ENGLISH_CLOSED

    return {
        "Claims": verdicts.Claims,
        "Questions3": verdicts.questions_schema(3, ENGLISH_CLOSED),
        "Questions10": verdicts.questions_schema(10, ENGLISH_CLOSED),
        "Supported": verdicts.Supported,
        "SaysYes": verdicts.SaysYes,
        "Answered": verdicts.Answered,
        "Attribution3": verdicts.attribution_schema(3),
        "Attribution10": verdicts.attribution_schema(10),
        "Reason": verdicts.Reason,
    }


def guidance(tokenizer: Any) -> Any:
    """A compile function for llguidance, as vLLM's guidance backend compiles."""
    import llguidance
    import llguidance.hf

    from evalgpu.engines.vllm import json_schema

    started = time.perf_counter()
    lltokenizer = llguidance.hf.from_tokenizer(tokenizer)
    print(f"guidance: tokenizer ready in {time.perf_counter() - started:.2f} s", flush=True)

    def compile_one(schema: Any) -> None:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(json_schema(schema, "guidance"))
        matcher = llguidance.LLMatcher(lltokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        matcher.compute_logit_bias()  # the first mask: where the lazy work happens

    return compile_one


def xgrammar(tokenizer: Any) -> Any:
    """A compile function for xgrammar, as vLLM's xgrammar backend compiles."""
    import xgrammar as xgr

    from evalgpu.engines.vllm import json_schema

    started = time.perf_counter()
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=len(tokenizer))
    compiler = xgr.GrammarCompiler(info, cache_enabled=False)
    print(f"xgrammar: tokenizer ready in {time.perf_counter() - started:.2f} s", flush=True)

    def compile_one(schema: Any) -> None:
        compiler.compile_json_schema(json_schema(schema, "xgrammar"), any_whitespace=True)

    return compile_one


def outlines(tokenizer: Any) -> Any:
    """A compile function for outlines-core, as vLLM's outlines backend compiles."""
    from outlines_core import Index, Vocabulary
    from outlines_core.json_schema import build_regex_from_schema

    from evalgpu.engines.vllm import json_schema

    vocabulary = Vocabulary.from_pretrained(tokenizer.name_or_path)

    def compile_one(schema: Any) -> None:
        Index(build_regex_from_schema(json_schema(schema, "outlines")), vocabulary)

    return compile_one


def measure(model: str, backends: list[str]) -> dict[str, Any]:
    """Seconds to compile each schema with each backend (one process, one after another)."""
    from transformers import AutoTokenizer

    from evalgpu.models import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(model)))
    makers = {"guidance": guidance, "xgrammar": xgrammar, "outlines": outlines}
    found: dict[str, Any] = {"model": model, "vocabulary": len(tokenizer), "seconds": {}}
    for backend in backends:
        compile_one = makers[backend](tokenizer)
        found["seconds"][backend] = {}
        for name, schema in schemas().items():
            started = time.perf_counter()
            compile_one(schema)
            seconds = time.perf_counter() - started
            found["seconds"][backend][name] = seconds
            print(f"{backend} {name}: {seconds:.4f} s", flush=True)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    parser.add_argument("--outlines", action="store_true", help="also outlines (minutes a schema)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    backends = ["guidance", "xgrammar"] + (["outlines"] if args.outlines else [])
    found = measure(args.model, backends)
    if args.json:
        write_json(args.json, found)
    else:
        print(json.dumps(found["seconds"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
