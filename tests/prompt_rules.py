"""An oracle for the four prompt rules, written apart from `turnlog.rules` (the code under test)."""


def violations(messages):
    """The rules a prompt (a list of `Message`) breaks, as short strings; [] when it keeps all.

    1. a tool result answers a call made earlier in the same prompt (and not answered yet);
    2. every call is answered before the next user or assistant message (calls left open at the
       very end of the prompt are the turn in progress);
    3. the first message after the system prompt is a user message;
    4. at most one system message, and only first.
    """
    found = []
    systems = [i for i, m in enumerate(messages) if m.role == "system"]
    if len(systems) > 1 or (systems and systems[0] != 0):
        found.append(f"system messages at {systems}")
    rest = [m for m in messages if m.role != "system"]
    if rest and rest[0].role != "user":
        found.append(f"the conversation starts with {rest[0].role}")
    open_calls = {}
    for i, m in enumerate(messages):
        if m.role == "tool":
            for r in m.tool_results:
                if r.call_id not in open_calls:
                    found.append(f"message {i}: result {r.call_id!r} answers no open call")
                open_calls.pop(r.call_id, None)
            continue
        if m.role in ("user", "assistant") and open_calls:
            found.append(f"message {i} ({m.role}) while calls {sorted(open_calls)} are open")
            open_calls = {}
        for c in m.tool_calls:
            open_calls[c.id] = i
    return found
