"""Context windows and output limits of the models turnlog can name: a table, and its lookup.

Pure data: no provider package, no I/O. Each entry says where its figures were read and when
(`ModelWindow.source`, `ModelWindow.seen`); providers change them, so a figure you know better
wins: pass `ModelLimits(...)` to the turn runner (`SessionChat(..., limits=...)`).

How a name is matched (`context_window`), so that the names the providers' APIs use and echo
back find their family's entry:

1. case is ignored and surrounding blanks dropped;
2. a routing prefix up to the last ``/`` is dropped (``openai/gpt-4o``,
   ``anthropic/claude-sonnet-4-5``, Gemini's ``models/gemini-2.5-pro``); in a Claude name a dot
   is read as a dash (OpenRouter's ``claude-sonnet-4.5``);
3. a snapshot suffix is dropped, repeatedly: a date (``-2024-08-06``, ``-20250929``,
   ``@20251001`` on Vertex AI), ``-latest``, a three-digit version (``-001``);
4. what is left must equal an entry's name or one of its aliases. Nothing else matches: no
   prefix matching, so ``gpt-4o-audio-preview``, ``gpt-5-chat-latest`` (another window) or
   ``gpt-4o-custom`` find nothing, and `context_window` returns None rather than a guess.

So ``gpt-4o-2024-08-06`` is ``gpt-4o``, ``claude-sonnet-4-5-20250929`` is
``claude-sonnet-4-5``, ``claude-3-7-sonnet-latest`` is ``claude-3-7-sonnet``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from turnlog.errors import InvalidInput

__all__ = ["MODEL_WINDOWS", "ModelLimits", "ModelWindow", "context_window", "model_family"]


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{what} must be a positive integer (tokens), got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class ModelLimits:
    """How many tokens a model takes and gives in one request.

    Raises:
        InvalidInput: a figure that is not a positive integer, or an input limit above the
            context window.
    """

    context: int
    """The context window as the provider states it: the prompt and the reply together for
    OpenAI and Anthropic, the input limit for Gemini."""
    output: int | None = None
    """The most tokens one reply may have (the largest `max_tokens` the API accepts); None
    when unknown."""
    input: int | None = None
    """The most prompt tokens, when the provider states a limit below the window (GPT-5:
    272,000 of its 400,000); None when only the window is stated."""

    def __post_init__(self) -> None:
        _count(self.context, "ModelLimits.context")
        if self.output is not None:
            _count(self.output, "ModelLimits.output")
        if self.input is not None:
            _count(self.input, "ModelLimits.input")
            if self.input > self.context:
                raise InvalidInput(
                    f"ModelLimits.input ({self.input:,}) cannot exceed the context window "
                    f"({self.context:,})"
                )

    @property
    def prompt_window(self) -> int:
        """The most tokens a prompt can hold: `input` when stated, else `context`. What a
        fractional trigger and `context_usage` take their share of."""
        return self.context if self.input is None else self.input


@dataclass(frozen=True, slots=True)
class ModelWindow:
    """One entry of the table: a model family, its limits, and where they were read."""

    name: str
    """The family's name as the provider's API takes it (lower case, no snapshot date)."""
    limits: ModelLimits
    """Its context window and output limit."""
    source: str
    """The page the figures were read from."""
    seen: str
    """The date they were read there (ISO 8601)."""
    aliases: tuple[str, ...] = ()
    """Other names of the same model (Anthropic's ``claude-sonnet-4-0`` for
    ``claude-sonnet-4``)."""


_SEEN: Final = "2026-12-03"


def _entry(
    name: str,
    context: int,
    output: int,
    source: str,
    *,
    input: int | None = None,
    aliases: tuple[str, ...] = (),
) -> ModelWindow:
    return ModelWindow(name, ModelLimits(context, output, input), source, _SEEN, aliases)


_VERCEL: Final = "https://vercel.com/ai-gateway/models/"
_CLAUDE: Final = "https://platform.claude.com/docs/"
_AIHUBMIX: Final = "https://docs.aihubmix.com/en/api/Claude-Native"

MODEL_WINDOWS: Final[tuple[ModelWindow, ...]] = (
    # OpenAI: the window counts the prompt, the reply and the reasoning together. The GPT-5
    # models take at most 272,000 input tokens of their 400,000 (the model page of gpt-5-nano
    # states it; OpenAI's own error for gpt-5 reads "Input tokens exceed the configured limit of
    # 272,000 tokens").
    _entry("gpt-4o", 128_000, 16_384, _VERCEL + "gpt-4o-fast.md"),
    _entry("gpt-4o-mini", 128_000, 16_384, _VERCEL + "gpt-4o-mini-fast.md"),
    _entry("gpt-4.1", 1_047_576, 32_768, _VERCEL + "gpt-4.1-fast.md"),
    _entry("gpt-4.1-mini", 1_047_576, 32_768, _VERCEL + "gpt-4.1-mini-fast.md"),
    _entry("gpt-4.1-nano", 1_047_576, 32_768, _VERCEL + "gpt-4.1-nano-fast.md"),
    _entry("o3", 200_000, 100_000, _VERCEL + "o3-fast.md"),
    _entry("o4-mini", 200_000, 100_000, _VERCEL + "o4-mini.md"),
    _entry("gpt-5", 400_000, 128_000, _VERCEL + "gpt-5-fast.md", input=272_000),
    _entry("gpt-5-mini", 400_000, 128_000, _VERCEL + "gpt-5-mini-fast.md", input=272_000),
    _entry(
        "gpt-5-nano",
        400_000,
        128_000,
        "https://developers.openai.com/api/docs/models/gpt-5-nano.md",
        input=272_000,
    ),
    _entry("gpt-5.1", 400_000, 128_000, "https://developers.openai.com/api/docs/models/gpt-5.1"),
    # Anthropic: the window holds the prompt and `max_tokens` together.
    _entry("claude-opus-4-8", 1_000_000, 128_000, _CLAUDE + "de/models/opus-4-8/overview.md"),
    _entry(
        "claude-opus-4-7",
        1_000_000,
        128_000,
        "https://docs.aws.amazon.com/bedrock/latest/userguide/"
        "model-card-anthropic-claude-opus-4-7.md",
    ),
    _entry("claude-opus-4-6", 1_000_000, 128_000, _CLAUDE + "en/models/opus-4-6/overview.md"),
    _entry(
        "claude-sonnet-4-6", 1_000_000, 128_000, _CLAUDE + "zh-CN/models/sonnet-4-6/overview.md"
    ),
    _entry("claude-opus-4-5", 200_000, 64_000, _CLAUDE + "pt-BR/models/opus-4-5/overview.md"),
    _entry("claude-sonnet-4-5", 200_000, 64_000, _CLAUDE + "zh-TW/models/sonnet-4-5/overview.md"),
    _entry("claude-haiku-4-5", 200_000, 64_000, _CLAUDE + "zh-CN/models/haiku-4-5/overview.md"),
    _entry(
        "claude-opus-4-1",
        200_000,
        32_000,
        "https://docs.rs/mixtape-core/latest/src/mixtape_core/models/claude.rs.html",
    ),
    _entry("claude-opus-4", 200_000, 32_000, _AIHUBMIX, aliases=("claude-opus-4-0",)),
    _entry("claude-sonnet-4", 200_000, 64_000, _AIHUBMIX, aliases=("claude-sonnet-4-0",)),
    _entry("claude-3-7-sonnet", 200_000, 64_000, _AIHUBMIX),
    _entry("claude-3-5-sonnet", 200_000, 8_192, _AIHUBMIX),
    _entry("claude-3-5-haiku", 200_000, 8_192, _AIHUBMIX),
    # Google Gemini: the window is the input limit; the output limit is apart.
    _entry(
        "gemini-2.5-pro",
        1_048_576,
        65_535,
        "https://docs.cloud.google.com/gemini-enterprise-agent-platform/models/gemini/2-5-pro",
    ),
    _entry(
        "gemini-2.5-flash",
        1_048_576,
        65_536,
        "https://docs.oracle.com/en-us/iaas/Content/generative-ai/google-gemini-2-5-flash.htm",
    ),
)
"""The table: one entry per model family, with the page each figure was read from on `seen`.

Figures on the providers' own pages (developers.openai.com, platform.claude.com, Google Cloud)
where those pages were found; the others from pages that list the provider's figures (an AI
gateway's model page that links the provider's, a provider table of a compatible API, a cloud
that serves the model), all of which agree with the provider's published figures as far as
they were cross-checked."""


def _index(windows: tuple[ModelWindow, ...]) -> Mapping[str, ModelWindow]:
    found: dict[str, ModelWindow] = {}
    for window in windows:
        for name in (window.name, *window.aliases):
            if name in found:
                raise AssertionError(f"{name!r} is in the table twice")
            found[name] = window
    return found


_BY_NAME: Final = _index(MODEL_WINDOWS)

_SNAPSHOT: Final = re.compile(r"(?:-\d{4}-\d{2}-\d{2}|-\d{8}|@\d{8}|-latest|-\d{3})$")


def model_family(model_name: str) -> str:
    """`model_name` as the table names it: lower case, without a routing prefix or a
    snapshot suffix (see the module's docstring). Not checked against the table."""
    name = model_name.strip().lower().rpartition("/")[2]
    if name.startswith("claude"):
        name = name.replace(".", "-")
    while True:
        shorter = _SNAPSHOT.sub("", name)
        if shorter == name or not shorter:
            return name
        name = shorter


def context_window(model_name: str) -> ModelLimits | None:
    """The limits of `model_name`, from the table; None for a model it does not hold.

    A dated or routed name finds its family (``gpt-4o-2024-08-06``, ``openai/gpt-4o``,
    ``claude-sonnet-4-5-20250929``); see the module's docstring for the rules.
    """
    if not isinstance(model_name, str):
        return None
    window = _BY_NAME.get(model_family(model_name))
    return None if window is None else window.limits
