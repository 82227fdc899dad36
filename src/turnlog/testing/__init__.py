"""Test support shipped in the wheel: the store contract suite and fakes.

`StoreContract` needs pytest; import it from `turnlog.testing.contract`.
"""

from turnlog.testing.fakes import FakeClock, ScriptedChatModel

__all__ = ["FakeClock", "ScriptedChatModel"]
