"""An oracle for the prompt rules, written apart from `turnlog.rules` (the code under test).

`breaks` states R1-R4 (and "no empty assistant message") directly over the messages a provider
would receive, position by position, where `turnlog.rules` folds the log into a running state.
"""


def breaks(messages):
    """Every way `messages` (what a provider receives) breaks the view rules; [] when none."""
    found = []
    systems = [i for i, m in enumerate(messages) if m.role == "system"]
    if len(systems) > 1 or (systems and systems[0] != 0):
        found.append("R4: one system message, first")
    rest = [m for m in messages if m.role != "system"]
    if rest and rest[0].role != "user":
        found.append("R3: the first non-system message is a user message")
    for i, m in enumerate(rest):
        if m.role == "assistant" and not m.tool_calls and not (m.text or "").strip():
            found.append(f"empty assistant message at {i}")
        if m.role == "assistant" and len({c.id for c in m.tool_calls}) < len(m.tool_calls):
            found.append(f"a call id twice at {i}")
        if m.role == "tool":
            # R1: the nearest non-tool message before it is the assistant message making the
            # call, and no result between them (or earlier in this message) answered it
            j = i - 1
            while j >= 0 and rest[j].role == "tool":
                j -= 1
            made = set() if j < 0 or rest[j].role != "assistant" else rest[j].tool_calls
            made = {c.id for c in made}
            answered = [r.call_id for k in range(j + 1, i) for r in rest[k].tool_results]
            for r in m.tool_results:
                if r.call_id not in made or r.call_id in answered:
                    found.append(f"R1: result {r.call_id} at {i} answers no open call")
                answered.append(r.call_id)
        if m.role == "assistant" and m.tool_calls:
            # R2: answered before the next non-tool message, unless none follows (in progress)
            k = i + 1
            while k < len(rest) and rest[k].role == "tool":
                k += 1
            if k < len(rest):
                answered = {r.call_id for t in rest[i + 1 : k] for r in t.tool_results}
                if {c.id for c in m.tool_calls} - answered:
                    found.append(f"R2: calls of {i} unanswered before {k}")
    return found
