"""The two scorers. Each factory returns a `Scorer` with `run` and `run_batch`.

Also here, for users who build their own scorer or measure another prompt: `Scorer` itself,
and the two judge calls both scorers are built from (`claims_request`, `check_request`, and
`CHECK_TASK`, the task text every check carries between its evidence and its item).
"""

from evalgpu.scorers._checks import CHECK_TASK, check_request, claims_request
from evalgpu.scorers._scorer import Scorer
from evalgpu.scorers.context_recall import create_context_recall_scorer
from evalgpu.scorers.summarization import create_summarization_scorer

__all__ = [
    "CHECK_TASK",
    "Scorer",
    "check_request",
    "claims_request",
    "create_context_recall_scorer",
    "create_summarization_scorer",
]
