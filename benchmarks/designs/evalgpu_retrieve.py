"""`evalgpu-retrieve`: the product's pipeline, each claim checked against the source sentences
that share its words rather than against the whole source.

A trial of one change to how the judge is asked (issue 19): the claims, questions, check prompt,
schema and axes are the product's, and an alignment check's evidence is the `K` sentences of
the source whose words overlap the claim's most (each word weighted by how rare it is among the
source's sentences), kept in the source's order. This is the retrieve-then-verify of FActScore
(Min et al. 2023) and the sentence granularity of SummaC (Laban et al. 2022) and MiniCheck
(Tang et al. 2024): a small verifier judges a claim against a short passage more reliably than
against a whole article, where it must find the one sentence that matters among thirty.

Why: with the product's prompt the default judge's `p` ranks the faithful summary of a FRANK
pair first in 0.65 of the 60 reported pairs (docs/BENCHMARKS.md); FRANK sources are about 570
words. `K = 3` and the weighting were fixed before any row was scored; nothing was tuned.

One run records both: each alignment check is asked as the product asks it and against the
retrieved sentences. The design's axes are the retrieved checks' (so `--compare` pairs it with a
product run), and `alignment_product` / `alignment_soft_product` are the product's axes from the
same run, the same claims: `alignment_soft - alignment_soft_product` is the effect of the
retrieval alone. Attribution checks are the product's.

Cost: one more check per claim, whose prompt is a few sentences (no shared prefix).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

from benchmarks.designs._common import ALIGNMENT, alignment_trial
from evalgpu.engines.base import JudgeRequest
from evalgpu.prompting import fenced
from evalgpu.scorers.summarization import alignment_request

NAME = "evalgpu-retrieve"

TAG = ALIGNMENT

K = 3
"""Sentences of the source an alignment check is shown."""

_WORD = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"([.!?][\"”’]?)(?:\s+|(?=[\"“]?[A-Z]))")
"""A sentence ends at `.`, `!` or `?` (and a closing quote after it), before white space or,
where the text lost its spaces ("...on Wednesday.Latham emerged", as FRANK's BBC sources have
it), before a capital letter or an opening quote."""


def sentences(text: str) -> list[str]:
    """`text` cut into sentences at `_SENTENCE_END`, each kept with its end. Unlike
    `measure.datasets.sentences` (a cut before white space only), it also cuts where the spaces
    were lost: there a whole BBC article would be one "sentence" and nothing left to retrieve."""
    parts = _SENTENCE_END.split(text.strip())
    cut = ["".join(parts[i : i + 2]).strip() for i in range(0, len(parts), 2)]
    return [s for s in cut if s]


def words(text: str) -> set[str]:
    """The lower-cased words of `text` (runs of letters and digits)."""
    return {w.lower() for w in _WORD.findall(text)}


def retrieve(source: str, claim: str, k: int = K) -> str:
    """The `k` sentences of `source` that share the most of `claim`'s words, each word weighted
    by its inverse sentence frequency in the source (a word in every sentence counts nothing),
    in the source's order; ties go to the earlier sentence. A source of `k` sentences or fewer
    is returned whole."""
    cut = sentences(source)
    if len(cut) <= k:
        return source
    bags = [words(s) for s in cut]
    df = Counter(w for bag in bags for w in bag)
    n = len(cut)
    wanted = words(claim)
    weight = {w: math.log(n / df[w]) for w in wanted if df[w]}
    ranked = sorted(range(n), key=lambda i: (-sum(weight.get(w, 0.0) for w in bags[i]), i))
    return " ".join(cut[i] for i in sorted(ranked[:k]))


def design(kind: str, engine: Any, scale: float, max_questions: int) -> Any:
    """The product's scorer, its alignment checks asked against retrieved sentences."""
    from benchmarks.designs import evalgpu_design  # here: designs imports this module

    product = evalgpu_design(kind, engine, scale, max_questions)
    return alignment_trial(product, retrieved)


def retrieved(request: JudgeRequest) -> JudgeRequest:
    """`request` (an alignment check) asked against the source sentences its claim retrieves."""
    prompt = request.messages[-1]["content"]
    (source,), (claim,) = fenced(prompt, "source"), fenced(prompt, "claim")
    return alignment_request(retrieve(source, claim), claim)
