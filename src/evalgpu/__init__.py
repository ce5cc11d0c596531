"""evalgpu: LLM-as-judge scoring of summaries and retrieval on a local model.

`import evalgpu` needs neither torch, transformers, outlines nor vLLM: engines import them when
they are built.
"""

from evalgpu.engines import load_engine
from evalgpu.engines.base import Engine, JudgeReply, JudgeRequest
from evalgpu.evaluation import Evaluation, evaluate, run_evals
from evalgpu.messages import extract_tool_results
from evalgpu.results import ScoreResult, Usage
from evalgpu.scorers import Scorer, create_context_recall_scorer, create_summarization_scorer

__all__ = [
    "Engine",
    "Evaluation",
    "JudgeReply",
    "JudgeRequest",
    "ScoreResult",
    "Scorer",
    "Usage",
    "create_context_recall_scorer",
    "create_summarization_scorer",
    "evaluate",
    "extract_tool_results",
    "load_engine",
    "run_evals",
]

__version__ = "0.1.0"
