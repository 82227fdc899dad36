"""Checks of the functions handed to compaction, made when they are handed over.

A trigger, a summarizer, a chat model given as a function, an event formatter, a callback:
each is called later, inside `SessionService.compact`. These checks refuse what could never
be called that way (`...`, a string, a class instead of an instance, a function of two
arguments) when the object that keeps it is built, with `InvalidInput` naming the argument.
"""

from __future__ import annotations

import inspect
from typing import Any

from turnlog.errors import InvalidInput

__all__ = ["check_function", "describe"]


def describe(value: object) -> str:
    """A short description of `value` for an error message: its type and repr."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def check_function(value: object, name: str, shape: str) -> Any:
    """`value`, when it can be called with one positional argument.

    Args:
        value: a function, or an object with `__call__`.
        name: the argument's name, for the error message.
        shape: what `value` should be, for the error message (e.g. "(SummaryRequest) ->
            list[Message]").

    Returns:
        `value`, unchanged.

    Raises:
        InvalidInput: `value` is not callable, is a class (an instance was meant), or its
            signature cannot take exactly one positional argument.
    """
    if isinstance(value, type):
        raise InvalidInput(
            f"{name} must be a function {shape} or an instance; got the class "
            f"{value.__name__}: call it first ({value.__name__}(...))"
        )
    if not callable(value):
        raise InvalidInput(f"{name} must be a function {shape}; got {describe(value)}")
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):  # some builtins have no signature: trust them
        return value
    try:
        signature.bind(None)
    except TypeError:
        raise InvalidInput(
            f"{name} must be a function {shape}, called with one argument; "
            f"{describe(value)} takes {signature}"
        ) from None
    return value
