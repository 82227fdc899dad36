"""Test support shipped in the wheel: the store contract suite and fakes.

`StoreContract` needs pytest and hypothesis (`pip install 'turnlog[testing]'`); import it
from `turnlog.testing.contract`.
"""

from turnlog.testing.fakes import FakeClock, ScriptedChatModel

__all__ = ["FakeClock", "ScriptedChatModel"]


def __getattr__(name: str) -> object:
    # StoreContract imports pytest and hypothesis; load it only when asked for.
    if name == "StoreContract":
        from turnlog.testing.contract import StoreContract

        return StoreContract
    raise AttributeError(f"module 'turnlog.testing' has no attribute {name!r}")
