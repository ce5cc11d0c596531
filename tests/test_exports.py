import subprocess
import sys

import evalgpu


def test_public_api_is_pinned():
    assert evalgpu.__all__ == sorted(evalgpu.__all__)
    assert evalgpu.__all__ == [
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


def test_import_needs_no_heavy_backend():
    code = (
        "import sys, evalgpu, evalgpu.engines.base; "
        "heavy = [m for m in ('torch', 'transformers', 'outlines', 'vllm') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
