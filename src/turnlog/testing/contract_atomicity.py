"""Every append is all or nothing, whatever the batch or boundary size."""

from __future__ import annotations

from turnlog.testing._base import ContractBase

__all__ = ["AtomicityContract"]


class AtomicityContract(ContractBase):
    """Part of `StoreContract`; see the module docstring."""
