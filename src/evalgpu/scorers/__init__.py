"""The two scorers. Each factory returns a `Scorer` with `run` and `run_batch`."""

from evalgpu.scorers._scorer import Scorer
from evalgpu.scorers.context_recall import create_context_recall_scorer
from evalgpu.scorers.summarization import create_summarization_scorer

__all__ = ["Scorer", "create_context_recall_scorer", "create_summarization_scorer"]
