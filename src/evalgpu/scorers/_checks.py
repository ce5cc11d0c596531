"""The two judge calls both scorers are built from.

- `claims_request`: the atomic claims of one text (a summary, a ground truth), from a prompt that
  holds that text alone. The judge cannot list another text's sentences as this one's claims:
  it never sees another text.
- `check_request`: one claim or question checked against one text (the source, the passages,
  the summary). The reply is a single boolean verdict, the first thing the judge writes, so the
  engine reads its probability `p` at that token; the call costs the claim and one verdict
  token. The evidence comes first and the task text after it, the same for every check against
  that text, so that one text's checks share their prompt up to the claim: an engine with
  prefix caching computes the text once for all of them (docs/SEMANTICS.md §3).

Why this shape: a small judge asked to list and judge claims in one call that sees both texts
copies the source into the claims and then finds them supported (the default judge scored every
summary 1.00 so), while the same judge asked one closed question per claim ranks faithful
summaries above unfaithful ones (docs/BENCHMARKS.md, "Judge designs").
"""

from __future__ import annotations

from pydantic import BaseModel

from evalgpu.engines.base import JudgeRequest
from evalgpu.prompting import fence, judge_chat
from evalgpu.verdicts import CLAIM_CHARS, MAX_CLAIMS, Claims, budget

__all__ = ["CHECK_TASK", "CHECK_TOKENS", "check_request", "claims_request"]

CLAIMS_TASK = f"""\
Task: break the {{name}} into its atomic claims, at most {MAX_CLAIMS}, in the order they appear. \
Each claim is one self-contained fact that can be checked on its own (replace pronouns by the \
names they stand for), in the words and the language of the {{name}}. Keep numbers, dates and \
names exactly as written, and add nothing that the {{name}} does not say."""

CHECK_TASK = """\
Task: check one claim or one question against the {name} above, and nothing else.
- A claim is supported only when the {name} states it or directly implies it. Numbers, dates, \
names and quantities must match exactly: an approximation of a precise fact ("about 500" for \
"512", "the 1990s" for "1995") is not support. A detail that the {name} does not give is not \
supported, even if it is true in the world.
- A question is answered "yes" only when the {name} itself says yes to it: not when the {name} \
does not mention the fact, and not when it says something else.
Reply with the verdict alone."""

CHECK_TOKENS = 24
"""`max_tokens` of a check: the JSON envelope, the key and one literal (and, for attribution, a
few passage numbers: see `check_request`)."""


def claims_request(tag: str, name: str, text: str) -> JudgeRequest:
    """The atomic claims of `text` (fenced as `<name>`); nothing else is in the prompt."""
    user = f"{fence(name, text)}\n\n{CLAIMS_TASK.format(name=name)}"
    return JudgeRequest(
        tag=tag,
        messages=judge_chat(user),
        schema=Claims,
        max_tokens=budget(MAX_CLAIMS, CLAIM_CHARS),
    )


def check_request(
    tag: str,
    evidence: str,
    name: str,
    item: tuple[str, str],
    ask: str,
    schema: type[BaseModel],
    max_tokens: int = CHECK_TOKENS,
) -> JudgeRequest:
    """One claim or question checked against one text.

    Args:
        tag: the step.
        evidence: the text judged against, already fenced (`fence("source", ...)`, or the
            numbered passages).
        name: what the evidence is called in the task ("source", "passages", "summary").
        item: `(fence tag, text)` of the claim or question.
        ask: the closed question put to the judge, last in the prompt.
        schema: a verdict whose boolean is its first field (`evalgpu.verdicts`).
        max_tokens: the reply's budget.
    """
    user = f"{evidence}\n\n{CHECK_TASK.format(name=name)}\n\n{fence(*item)}\n{ask}"
    return JudgeRequest(tag=tag, messages=judge_chat(user), schema=schema, max_tokens=max_tokens)
