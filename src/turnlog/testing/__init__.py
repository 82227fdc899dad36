"""Test support shipped in the wheel: the store contract suite and fakes.

`StoreContract` and `AsyncStoreContract` need pytest and hypothesis
(`pip install 'turnlog[testing]'`); they load when first asked for.
"""

from turnlog.testing.fakes import AsyncScriptedChatModel, FakeClock, ScriptedChatModel

__all__ = ["AsyncScriptedChatModel", "FakeClock", "ScriptedChatModel"]


def __getattr__(name: str) -> object:
    # StoreContract imports pytest and hypothesis; load it only when asked for.
    if name == "StoreContract":
        from turnlog.testing.contract import StoreContract

        return StoreContract
    if name == "AttachmentContract":
        from turnlog.testing.contract_attachments import AttachmentContract

        return AttachmentContract
    if name == "AsyncStoreContract":
        from turnlog.testing.contract_async import AsyncStoreContract

        return AsyncStoreContract
    raise AttributeError(f"module 'turnlog.testing' has no attribute {name!r}")
