"""Every store of ours runs the shipped contract suite unchanged."""

from turnlog import MemoryStore, SqliteStore
from turnlog.stores.memory_async import AsyncMemoryStore
from turnlog.stores.sqlite_async import AsyncSqliteStore
from turnlog.testing import AsyncStoreContract, StoreContract


class TestMemoryStore(StoreContract):
    def make_store(self, tmp_path):
        return MemoryStore()


class TestSqliteStore(StoreContract):
    def make_store(self, tmp_path):
        return SqliteStore(tmp_path / "contract.db")

    def open_again(self, store, tmp_path):
        return SqliteStore(tmp_path / "contract.db")


class TestAsyncMemoryStore(AsyncStoreContract):
    async def make_async_store(self, tmp_path):
        return AsyncMemoryStore()


class TestAsyncSqliteStore(AsyncStoreContract):
    async def make_async_store(self, tmp_path):
        return await AsyncSqliteStore(tmp_path / "contract.db").open()

    async def open_again_async(self, store, tmp_path):
        return await AsyncSqliteStore(tmp_path / "contract.db").open()
