"""One constrained greedy step for transformers' `generate()`: a logits processor per batch.

`Constrained` is a transformers `LogitsProcessor` over a batch of rows, each with its own
schema (`Slot`: its constraint, its tokens, why it stopped). At every step it advances each
row's constraint by the token the row chose last, masks the scores to the tokens the row's
schema allows next (llguidance, `evalgpu.engines._constraint`), and where a row is choosing a
boolean verdict it records the judge's probability of `true`. A row that has stopped (an end
token, its own `max_tokens`, a constraint that failed) is given only an end token, so that
`generate()` counts it finished. Requests of any schema share a batch.

Soft verdicts. At a step where the constraint allows only tokens that start `true`, tokens
that start `false`, and tokens of mere JSON punctuation or whitespace, and the row chooses a
literal's token, the row is choosing a boolean verdict. There the processor records
`p = P(true) / (P(true) + P(false))`, each side the softmax mass of every allowed token that
starts that literal (" true", "true", "t", ...), from the logits in float32. Mass over all the
first tokens, not one token each: a tokenizer may spell the same choice several ways.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from evalgpu.engines._parse import literal_class

if TYPE_CHECKING:
    from evalgpu.engines._constraint import Constraint, Grammars

__all__ = ["Constrained", "Slot", "literal_masks", "true_probability"]


@dataclass
class Slot:
    """One request being decoded: its constraint, its tokens so far, why it stopped."""

    max_tokens: int
    constraint: Constraint
    """The request's schema, as a constraint: the tokens allowed next."""
    prompt_tokens: int
    tokens: list[int] = field(default_factory=list)
    """Generated ids, the end token included (it counts as output, as in vLLM)."""
    finish: str | None = None
    """None while decoding, then "stop" (an end token), "length" (`max_tokens` reached) or
    "error" (the constraint failed: `error`)."""
    error: str | None = None
    """Why the constraint refused the chosen token (a grammar limit): only this row fails."""
    true_probs: list[float] = field(default_factory=list)
    """p(true) at each boolean verdict chosen so far, in order (see the module docstring)."""

    def take(self, token: int, eos_ids: set[int]) -> None:
        """Record the token chosen for this row and advance its constraint."""
        self.tokens.append(token)
        if token in eos_ids:
            self.finish = "stop"
            return
        try:
            self.constraint.advance(token)
        except ValueError as exc:  # only when no token was allowed: the mask was all zeros
            self.finish, self.error = "error", str(exc)
            return
        if len(self.tokens) >= self.max_tokens:
            self.finish = "length"

    @property
    def text_tokens(self) -> list[int]:
        """The reply's ids without the end token."""
        return self.tokens[:-1] if self.finish == "stop" else self.tokens


def literal_masks(tokenizer: Any, size: int) -> Any:
    """Boolean masks over token ids `[0, size)`: which start `true`, `false`, or neither.

    Returns a (3, size) tensor: tokens of class "true", of class "false", and "other" (see
    `evalgpu.engines._parse.literal_class`); ids past the tokenizer (padding rows of the
    output layer) are "other". Built once per engine (about 0.3 s for 49k tokens).
    """
    import torch

    masks = torch.zeros((3, size), dtype=torch.bool)
    masks[2] = True
    n = min(size, len(tokenizer))
    texts = tokenizer.batch_decode([[i] for i in range(n)])
    for i, text in enumerate(texts):
        kind = literal_class(text)
        if kind != "other":
            masks[2, i] = False
            if kind != "lead":
                masks[0 if kind == "true" else 1, i] = True
    return masks


def true_probability(logits: Any, true_tokens: Any, false_tokens: Any) -> float:
    """P(true) / (P(true) + P(false)) from one row's logits, computed in float32.

    `true_tokens` / `false_tokens` are boolean masks of the allowed tokens that start each
    literal. The softmax normaliser cancels, so this is the sigmoid of the difference of the
    two sides' log-sum-exp: exact in float32 even when the model computes in bfloat16, which
    resolves probabilities near 1 to about 3 significant digits and ties them.
    """
    import torch

    row = logits.float()
    gap = torch.logsumexp(row[true_tokens], 0) - torch.logsumexp(row[false_tokens], 0)
    return float(torch.sigmoid(gap))


class Constrained:
    """A transformers logits processor: greedy constrained decoding of `slots`, one per row.

    Args:
        slots: the batch's rows, in the order of `generate()`'s input.
        grammars: the compiled grammars (their bitmask covers the output layer).
        eos_ids: token ids that end a reply; a stopped row is given the first of them.
        prompt_length: the batch's padded prompt length (tokens past it are generated).
        literals: `literal_masks` of the vocabulary, to read soft verdicts; None: no `p`.
    """

    def __init__(
        self,
        slots: list[Slot],
        grammars: Grammars,
        eos_ids: set[int],
        prompt_length: int,
        literals: Any = None,
    ) -> None:
        self.slots = slots
        self.grammars = grammars
        self.eos_ids = eos_ids
        self.end = min(eos_ids)
        self.prompt_length = prompt_length
        self.literals = literals

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if input_ids.shape[1] > self.prompt_length:  # the token each row chose last step
            for slot, token in zip(self.slots, input_ids[:, -1].tolist(), strict=True):
                if slot.finish is None:
                    slot.take(int(token), self.eos_ids)
        words = self.grammars.bitmask(len(self.slots))
        live = [row for row, slot in enumerate(self.slots) if slot.finish is None]
        for row in live:
            self.slots[row].constraint.allowed(words, row)
        shifts = torch.arange(32, dtype=torch.int32)
        allowed = ((words.unsqueeze(-1) >> shifts) & 1).bool().view(len(self.slots), -1)
        allowed = allowed[:, : scores.shape[-1]].to(scores.device)
        for row, slot in enumerate(self.slots):
            if slot.finish is not None:
                allowed[row, self.end] = True
        scores = scores.float().masked_fill(~allowed, float("-inf"))
        if self.literals is not None and live:
            self._read_p(scores, allowed, live)
        return scores

    def _read_p(self, scores: Any, allowed: Any, live: list[int]) -> None:
        """Record p(true) for the rows that are choosing between `true` and `false` now.

        Such a row's constraint allows tokens of both literals and nothing else but
        punctuation or whitespace (`literal_masks`), and its chosen (greedy) token starts a
        literal (when it chose a space, the choice comes at the next step).
        """
        masks = self.literals.to(scores.device)
        if masks.shape[1] != scores.shape[-1]:  # an output layer padded past the tokenizer
            masks = _fit(masks, scores.shape[-1])
        is_true, is_false, is_other = masks
        chosen = scores.argmax(dim=-1)
        choosing = (
            (allowed & is_true).any(-1)
            & (allowed & is_false).any(-1)
            & ~(allowed & is_other).any(-1)
            & (is_true[chosen] | is_false[chosen])
        )
        for row in live:
            if bool(choosing[row]):
                self.slots[row].true_probs.append(
                    true_probability(scores[row], allowed[row] & is_true, allowed[row] & is_false)
                )


def _fit(masks: Any, size: int) -> Any:
    """`literal_masks` cut or extended (extra ids are "other") to `size` token ids."""
    import torch

    if masks.shape[1] >= size:
        return masks[:, :size]
    extra = torch.zeros((3, size - masks.shape[1]), dtype=torch.bool, device=masks.device)
    extra[2] = True
    return torch.cat([masks, extra], dim=1)
