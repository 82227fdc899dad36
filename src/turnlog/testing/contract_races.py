"""Deletes racing appends: no event outlives its session (issue 7, item 1)."""

from __future__ import annotations

from turnlog.testing._base import ContractBase

__all__ = ["RaceContract"]


class RaceContract(ContractBase):
    """Part of `StoreContract`; see the module docstring."""
