"""Appends that would break the view rules are refused."""

from __future__ import annotations

from turnlog.testing._base import ContractBase

__all__ = ["ViewRuleContract"]


class ViewRuleContract(ContractBase):
    """Part of `StoreContract`; see the module docstring."""
