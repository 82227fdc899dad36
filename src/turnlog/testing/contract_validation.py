"""Nothing accepted is unreadable; bad input is a typed error and nothing is written."""

from __future__ import annotations

from turnlog.testing._base import ContractBase

__all__ = ["ValidationContract"]


class ValidationContract(ContractBase):
    """Part of `StoreContract`; see the module docstring."""
