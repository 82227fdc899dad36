"""Cases that killed mutants the rest of the contract let live."""

from __future__ import annotations

from turnlog.testing._base import ContractBase

__all__ = ["RegressionContract"]


class RegressionContract(ContractBase):
    """Part of `StoreContract`; see the module docstring."""
