"""ChatModelSummarizer, driven by turnlog.testing.ScriptedChatModel, through the service."""

import logging

import pytest

from service_modes import BlockingService
from turnlog import (
    CharCounter,
    ChatModelSummarizer,
    CompactionWindow,
    InvalidInput,
    Message,
    ToolCall,
    ToolResult,
    WindowCompactionStrategy,
)
from turnlog.compaction.summary import DEFAULT_SHADOW_PROMPT, DEFAULT_SUMMARY_SYSTEM_PROMPT
from turnlog.testing import ScriptedChatModel
from turnlog.testing.fakes import AsyncScriptedChatModel


def scripted(service, replies):
    """A scripted chat model for `service`: with `async def complete` for AsyncSessionService
    (so the async path, which awaits the model, is the one tested), blocking otherwise."""
    async_mode = isinstance(service, BlockingService)
    return (AsyncScriptedChatModel if async_mode else ScriptedChatModel)(replies)


def add(service, sid, *messages):
    return [service.append_message(sid, m) for m in messages]


def question(n):
    """The n-th question, of a realistic size: a summary turn is smaller than the turns it
    covers (a pass whose summary would not be smaller writes nothing)."""
    return (
        f"question {n}: why does the importer drop the rows after line {n} when the CSV file "
        "has a quoted field with a newline in it?"
    )


def answer(n):
    """The n-th answer (see `question`), longer than an extractive summary's entry (200
    characters), as a model's answers often are."""
    return (
        f"answer {n}: the reader splits the file on newlines before it parses the quotes, so a "
        "quoted field that holds a newline ends the record early and the rest of the file is "
        "read as garbage. Open the file with newline='' and let the csv module do the "
        f"splitting; the rows after line {n} then come through intact."
    )


def turns(*numbers):
    out = []
    for n in numbers:
        out += [Message.user(question(n)), Message.assistant(answer(n))]
    return out


def compact(service, sid, summarizer, window=None):
    window = window or CompactionWindow.last_turns(1)
    strategy = WindowCompactionStrategy(window, summarizer=summarizer, token_counter=CharCounter())
    return service.compact(sid, lambda r: True, strategy)


def prompt_of(model, call=-1):
    """The summarizing call's (system prompt, user prompt)."""
    messages = model.calls[call]
    assert [m.role for m in messages] == ["system", "user"]
    return messages[0].text, messages[1].text


def test_summary_turn_is_a_synthetic_shadow_prompt_and_the_reply(service):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    model = scripted(service, ["  The user asked question 1.  "])

    result = compact(service, sid, ChatModelSummarizer(model))

    assert result.summary == (
        Message.user(DEFAULT_SHADOW_PROMPT),
        Message.assistant("The user asked question 1."),
    )
    log = service.events(sid)
    shadow, summary = log[-2:]
    assert shadow.synthetic and summary.synthetic
    assert shadow.message == Message.user(DEFAULT_SHADOW_PROMPT)
    assert summary.message == Message.assistant("The user asked question 1.")
    assert not shadow.starts_turn
    view = service.view(sid)
    assert view[:2] == [shadow, summary]
    assert [e.message.text for e in view[2:]] == [question(2), answer(2)]
    assert len(model.calls) == 1


def test_custom_shadow_prompt_and_system_prompt(service):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    model = scripted(service, ["Zusammenfassung"])
    summarizer = ChatModelSummarizer(
        model, shadow_prompt="Fasse unser Gespräch zusammen.", system_prompt="Be brief."
    )

    compact(service, sid, summarizer)

    assert prompt_of(model)[0] == "Be brief."
    assert [e.message.text for e in service.view(sid)[:2]] == [
        "Fasse unser Gespräch zusammen.",
        "Zusammenfassung",
    ]


def test_prompt_renders_the_covered_events_with_event_text(service):
    sid = service.create().id
    call = ToolCall("c1", "weather", '{"city":"Oslo"}')
    add(
        service,
        sid,
        Message.user("question 1"),
        Message.assistant("let me look", [call]),
        Message.tool(ToolResult("c1", "weather", "-3C")),
        Message.assistant("answer 1"),
        *turns(2),
    )
    model = scripted(service, ["s"])

    compact(service, sid, ChatModelSummarizer(model))

    system, user = prompt_of(model)
    assert system == DEFAULT_SUMMARY_SYSTEM_PROMPT
    assert (
        "<conversation>\nUser: question 1\n"
        'Assistant: let me look [tool calls: weather({"city":"Oslo"})]\n'
        "Tool [responses: weather → -3C]\n"
        "Assistant: answer 1\n</conversation>"
    ) in user
    # no prior summary yet, and the prompt does not speak of one
    assert "<summary>" not in user
    assert "The conversation to summarize:\n<conversation>" in user
    assert user.endswith("Write the summary.")
    for word in ("summary so far", "updated", "add to it", "merging"):
        assert word not in user


def test_prompt_feeds_the_prior_summary_back(service):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    model = scripted(service, ["FIRST SUMMARY", "SECOND SUMMARY"])
    summarizer = ChatModelSummarizer(model)
    compact(service, sid, summarizer)
    add(service, sid, *turns(3))

    compact(service, sid, summarizer)

    _, user = prompt_of(model, 1)
    assert "<summary>\nFIRST SUMMARY\n</summary>" in user
    assert "The conversation to add to it:\n<conversation>" in user
    assert user.endswith("merging the summary so far with the new conversation.")
    # the prior shadow prompt is not quoted, and the summary is not repeated as conversation
    assert DEFAULT_SHADOW_PROMPT not in user
    conversation = user.split("<conversation>")[1].split("</conversation>")[0]
    assert "FIRST SUMMARY" not in conversation
    assert question(2) in conversation and question(1) not in conversation
    view = service.view(sid)
    assert [e.message.text for e in view] == [
        DEFAULT_SHADOW_PROMPT,
        "SECOND SUMMARY",
        question(3),
        answer(3),
    ]


@pytest.mark.parametrize(
    ("overlap", "quoted", "not_quoted"),
    [
        (0, [], [f"User: {question(3)}", f"Assistant: {answer(3)}"]),
        (1, [f"User: {question(3)}"], [f"Assistant: {answer(3)}"]),
        (2, [f"User: {question(3)}", f"Assistant: {answer(3)}"], [f"User: {question(4)}"]),
    ],
)
def test_prompt_quotes_the_first_overlap_size_preserved_events(
    service, overlap, quoted, not_quoted
):
    sid = service.create().id
    add(service, sid, *turns(1, 2, 3, 4))
    model = scripted(service, ["s"])

    compact(
        service,
        sid,
        ChatModelSummarizer(model, overlap_size=overlap),
        CompactionWindow.last_turns(2),
    )

    _, user = prompt_of(model)
    continues = user.split("<continues>\n")[1].split("\n</continues>")[0] if quoted else ""
    assert continues.split("\n") == (quoted or [""])
    if not quoted:
        assert "<continues>" not in user
    for text in not_quoted:
        assert text not in continues


def test_prompt_never_includes_stored_system_messages(service):
    sid = service.create().id
    add(
        service,
        sid,
        Message.system("OLD SYSTEM PROMPT"),
        Message.user(question(1)),
        Message.system("NEW SYSTEM PROMPT"),
        Message.assistant(answer(1)),
        *turns(2),
    )
    model = scripted(service, ["s"])

    result = compact(service, sid, ChatModelSummarizer(model, overlap_size=5))

    assert [e.message.text for e in result.covered_events] == [
        "OLD SYSTEM PROMPT",
        question(1),
        answer(1),
    ]
    for message in model.calls[0]:
        assert "SYSTEM PROMPT" not in message.text
    assert question(1) in prompt_of(model)[1]
    view = service.view(sid)
    assert view[0].message == Message.system("NEW SYSTEM PROMPT")
    assert [e.message.text for e in view[1:]] == [
        DEFAULT_SHADOW_PROMPT,
        "s",
        question(2),
        answer(2),
    ]


def test_a_custom_event_formatter_renders_the_prompt(service):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    model = scripted(service, ["s"])
    summarizer = ChatModelSummarizer(model, event_formatter=lambda e: f"<<{e.message.text}>>")

    compact(service, sid, summarizer)

    _, user = prompt_of(model)
    assert f"<<{question(1)}>>\n<<{answer(1)}>>" in user
    assert f"<<{question(2)}>>" in user.split("<continues>")[1]


@pytest.mark.parametrize("reply", ["", "   \n\t", Message.assistant(None, [ToolCall("c", "f")])])
def test_a_blank_reply_warns_calls_on_failure_and_writes_nothing(service, caplog, reply):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    version = service.version(sid)
    failures = []
    model = scripted(service, [reply])
    summarizer = ChatModelSummarizer(model, on_failure=failures.append)

    with caplog.at_level(logging.WARNING, logger="turnlog.compaction"):
        result = compact(service, sid, summarizer)

    assert result.unchanged and result.boundary is None
    assert service.version(sid) == version
    assert len(model.calls) == 1
    assert len(failures) == 1
    assert [e.message.text for e in failures[0].covered] == [question(1), answer(1)]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].name == "turnlog.compaction"
    assert sid in warnings[0].getMessage() and "blank" in warnings[0].getMessage()


def test_a_blank_reply_without_on_failure_still_writes_nothing(service, caplog):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    version = service.version(sid)
    with caplog.at_level(logging.WARNING, logger="turnlog.compaction"):
        result = compact(service, sid, ChatModelSummarizer(scripted(service, [" "])))
    assert result.unchanged and service.version(sid) == version
    assert any(r.levelno == logging.WARNING for r in caplog.records)


def test_an_exception_from_the_model_propagates_and_nothing_is_written(service):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    log = service.events(sid)
    failures = []
    model = scripted(service, [RuntimeError("model is down")])

    with pytest.raises(RuntimeError, match="model is down"):
        compact(service, sid, ChatModelSummarizer(model, on_failure=failures.append))

    assert service.events(sid) == log
    assert service.version(sid) == len(log)


@pytest.mark.parametrize("overlap", [-1, -10, True, 1.5, "2"])
def test_overlap_size_must_be_a_non_negative_integer(overlap):
    with pytest.raises(InvalidInput):
        ChatModelSummarizer(ScriptedChatModel(["s"]), overlap_size=overlap)


def test_a_blank_shadow_prompt_is_refused():
    with pytest.raises(InvalidInput):
        ChatModelSummarizer(ScriptedChatModel(["s"]), shadow_prompt="  ")


def test_overlap_size_defaults_to_two():
    assert ChatModelSummarizer(ScriptedChatModel(["s"])).overlap_size == 2


# -- arguments are checked when the summarizer is built (issue 7 item 10) ---------------------


def test_a_plain_function_is_a_chat_model(service):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    seen = []

    def model(messages):
        seen.append(list(messages))
        return Message.assistant("A summary from a function.")

    result = compact(service, sid, ChatModelSummarizer(model))

    assert result.summary[-1] == Message.assistant("A summary from a function.")
    assert [m.role for m in seen[0]] == ["system", "user"]
    assert service.events(sid)[-1].message.text == "A summary from a function."


def test_a_chat_model_object_is_asked_through_its_complete_method(service):
    # An object with both complete() and __call__ is a ChatModel: complete() is what is asked.
    class Both(ScriptedChatModel):
        def __call__(self, messages):  # pragma: no cover - must not be called
            raise AssertionError("__call__ was used instead of complete()")

    sid = service.create().id
    add(service, sid, *turns(1, 2))
    model = Both(["from complete"])
    compact(service, sid, ChatModelSummarizer(model))
    assert len(model.calls) == 1
    assert service.events(sid)[-1].message.text == "from complete"


def _two_args(a, b):  # pragma: no cover - refused before it is called
    return Message.assistant("x")


@pytest.mark.parametrize(
    "model",
    [..., None, "gpt-4o", 42, ScriptedChatModel, _two_args, lambda: Message.assistant("x")],
    ids=["ellipsis", "none", "string", "int", "class", "two-args", "no-args"],
)
def test_a_chat_model_that_cannot_be_asked_is_refused_when_built(model):
    with pytest.raises(InvalidInput, match="chat_model"):
        ChatModelSummarizer(model)


def test_a_complete_method_that_cannot_take_the_messages_is_refused():
    class Odd:
        def complete(self):  # pragma: no cover - refused before it is called
            return Message.assistant("x")

    with pytest.raises(InvalidInput, match=r"chat_model\.complete"):
        ChatModelSummarizer(Odd())


@pytest.mark.parametrize("formatter", [..., "{text}", str.join, ChatModelSummarizer])
def test_an_event_formatter_that_cannot_format_an_event_is_refused_when_built(formatter):
    with pytest.raises(InvalidInput, match="event_formatter"):
        ChatModelSummarizer(ScriptedChatModel(["s"]), event_formatter=formatter)


@pytest.mark.parametrize("callback", [..., "log", _two_args])
def test_an_on_failure_that_cannot_be_called_is_refused_when_built(callback):
    with pytest.raises(InvalidInput, match="on_failure"):
        ChatModelSummarizer(ScriptedChatModel(["s"]), on_failure=callback)


@pytest.mark.parametrize("name", ["system_prompt", "shadow_prompt"])
@pytest.mark.parametrize("prompt", [None, ..., 42, ["a prompt"]])
def test_prompts_must_be_strings(name, prompt):
    with pytest.raises(InvalidInput, match=name):
        ChatModelSummarizer(ScriptedChatModel(["s"]), **{name: prompt})


def test_a_reply_that_is_not_a_message_is_refused_and_nothing_is_written(service):
    sid = service.create().id
    add(service, sid, *turns(1, 2))
    log = service.events(sid)
    summarizer = ChatModelSummarizer(lambda messages: "a str, not a Message")
    with pytest.raises(InvalidInput, match=r"returned str .*Message\.assistant"):
        compact(service, sid, summarizer)
    assert service.events(sid) == log


@pytest.mark.parametrize("summarizer", [..., "summary", ChatModelSummarizer, _two_args])
def test_a_window_strategy_refuses_a_summarizer_it_could_not_call(summarizer):
    with pytest.raises(InvalidInput, match="summarizer"):
        WindowCompactionStrategy(CompactionWindow.last_turns(1), summarizer=summarizer)


def test_a_scripted_chat_model_without_replies_is_invalid_input():
    with pytest.raises(InvalidInput, match="at least one reply"):
        ScriptedChatModel([])
