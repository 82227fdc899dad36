"""Durations given as arguments: a number of seconds or a `timedelta`, checked when given.

Every public argument of turnlog that is a span of time takes either form, and refuses
anything else with `InvalidInput` naming the argument: a session's `ttl`
(`SessionService.create`, `get_or_create`), the tool-search `TtlEvictionStrategy(ttl)`,
`SqliteStore(busy_timeout=...)`, `PostgresStore(connect_timeout=...)` and `migrate`,
`RedisStore(timeout=..., expiry_grace=...)` (and the cluster store's). A number is seconds
(`int` or `float`; `True` and `False` are not numbers here); it must be finite.
"""

from __future__ import annotations

import math
from datetime import timedelta

from turnlog.errors import InvalidInput

__all__ = ["Duration", "to_seconds", "to_timedelta"]

Duration = timedelta | int | float
"""A span of time: a `timedelta`, or a number of seconds."""


def to_seconds(value: object, name: str, *, zero: bool = False, most: float | None = None) -> float:
    """`value` as seconds.

    Args:
        value: a `timedelta`, or an `int` or `float` number of seconds.
        name: the argument's name, for the error message.
        zero: whether 0 is allowed (it never is when False: the duration must be positive).
        most: the largest number of seconds allowed, when there is a limit.

    Returns:
        The number of seconds, finite and positive (or zero, when `zero` is True).

    Raises:
        InvalidInput: `value` is not a duration (a string, None, a bool, ...), is NaN or
            infinite, negative, zero when that is not allowed, or above `most`.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an int too large for a float
            seconds = math.inf
    else:
        raise InvalidInput(
            f"{name} must be a number of seconds or a timedelta, got {type(value).__name__} "
            f"{value!r}"
        )
    bound = "0 or more" if zero else "more than 0"
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero):
        raise InvalidInput(f"{name} must be a finite number of seconds, {bound}; got {value!r}")
    if most is not None and seconds > most:
        raise InvalidInput(f"{name} must be at most {most:,.0f} seconds, got {value!r}")
    return seconds


def to_timedelta(value: object, name: str) -> timedelta:
    """`value` (a positive `timedelta` or number of seconds) as a `timedelta`.

    Raises:
        InvalidInput: as `to_seconds` (with `zero=False`); or more seconds than a `timedelta`
            holds.
    """
    seconds = to_seconds(value, name)
    if isinstance(value, timedelta):
        return value
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise InvalidInput(f"{name} is longer than a timedelta can hold: {value!r}") from None
