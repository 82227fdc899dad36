"""Test support shipped in the wheel: the store contract suite and fakes.

`StoreContract` needs pytest; import it from `turnlog.testing.contract`.
"""

from turnlog.testing.fakes import FakeClock, ScriptedChatModel

__all__ = ["FakeClock", "ScriptedChatModel"]


def __getattr__(name: str) -> object:
    # StoreContract imports pytest; load it only when asked for.
    if name == "StoreContract":
        from turnlog.testing.contract import StoreContract

        return StoreContract
    raise AttributeError(f"module 'turnlog.testing' has no attribute {name!r}")
