from evalgpu import extract_tool_results
from evalgpu.messages import first_user_text, is_agent_run, last_assistant_text, message_text


def test_message_text_shapes():
    assert message_text({"role": "user", "content": "plain"}) == "plain"
    parts = [
        {"type": "text", "text": "a"},
        {"type": "image", "url": "x"},
        {"type": "text", "text": "b"},
    ]
    assert message_text({"role": "user", "content": parts}) == "a\nb"
    assert message_text({"role": "user", "content": {"parts": parts}}) == "a\nb"
    assert message_text({"role": "user", "content": {"content": "inner"}}) == "inner"
    assert (
        message_text({"role": "user", "content": {"parts": [], "content": "fallback"}})
        == "fallback"
    )
    assert message_text({"role": "user", "content": None}) == ""
    assert message_text({"role": "user"}) == ""


def test_first_user_and_last_assistant():
    run_input = {
        "inputMessages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "the source"},
            {"role": "user", "content": "second"},
        ]
    }
    output = [
        {"role": "assistant", "content": "early"},
        {"role": "assistant", "content": {"parts": [{"type": "text", "text": "the summary"}]}},
        {"role": "assistant", "content": "   "},
        {"role": "tool", "content": "tool text"},
    ]
    assert first_user_text(run_input) == "the source"
    assert last_assistant_text(output) == "the summary"
    assert first_user_text("plain input") == "plain input"
    assert last_assistant_text("plain output") == "plain output"
    assert last_assistant_text([{"role": "user", "content": "x"}]) is None
    assert first_user_text({"inputMessages": []}) is None


def test_is_agent_run():
    assert is_agent_run({"inputMessages": []}, [{"role": "assistant", "content": "x"}])
    assert not is_agent_run("text", "text")
    assert not is_agent_run({"inputMessages": []}, "text")
    assert not is_agent_run({"messages": []}, [{"role": "assistant"}])


def test_extract_tool_results_parts_and_legacy_in_order():
    output = [
        {
            "role": "assistant",
            "content": {
                "parts": [
                    {"type": "text", "text": "looking"},
                    {
                        "type": "tool-invocation",
                        "toolInvocation": {
                            "state": "result",
                            "toolCallId": "c1",
                            "toolName": "fetchDocument",
                            "args": {"id": 1},
                            "result": "doc one",
                        },
                    },
                    {
                        "type": "tool-invocation",
                        "toolInvocation": {
                            "state": "call",
                            "toolCallId": "c2",
                            "toolName": "pending",
                        },
                    },
                ],
                # legacy mirror of c1 (same call) and a legacy-only call c3
                "toolInvocations": [
                    {
                        "state": "result",
                        "toolCallId": "c1",
                        "toolName": "fetchDocument",
                        "args": {"id": 1},
                        "result": "doc one",
                    },
                    {
                        "state": "result",
                        "toolCallId": "c3",
                        "toolName": "search",
                        "args": {"q": "x"},
                        "result": ["a", "b"],
                    },
                ],
            },
        },
        {"role": "assistant", "content": "done"},
    ]
    assert extract_tool_results(output) == [
        {
            "tool_name": "fetchDocument",
            "tool_call_id": "c1",
            "args": {"id": 1},
            "result": "doc one",
        },
        {"tool_name": "search", "tool_call_id": "c3", "args": {"q": "x"}, "result": ["a", "b"]},
    ]
    assert extract_tool_results("plain") == []
    assert extract_tool_results([{"role": "assistant", "content": "x"}]) == []
