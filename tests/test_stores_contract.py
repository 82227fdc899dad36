"""Every store of ours runs the shipped contract suite unchanged."""

import sqlite3

from turnlog import MemoryStore, SqliteStore
from turnlog.stores.memory_async import AsyncMemoryStore
from turnlog.stores.sqlite_async import AsyncSqliteStore
from turnlog.testing import AsyncStoreContract, StoreContract


def _memory(store):
    """The `MemoryStore` behind a contract's store handle (sync or async)."""
    inner = getattr(getattr(store, "async_store", store), "_store", store)
    assert isinstance(inner, MemoryStore)
    return inner


class _MemoryHooks:
    def count_attachments(self, store):
        return len(_memory(store)._blobs)

    def damage_attachment(self, store, ref):
        blobs = _memory(store)._blobs
        data = bytearray(blobs[ref])
        data[len(data) // 2] ^= 1
        blobs[ref] = bytes(data)


class _SqliteHooks:
    def _sql(self, store):
        return sqlite3.connect(self.db_path)

    def count_attachments(self, store):
        with self._sql(store) as conn:
            return conn.execute("SELECT count(*) FROM turnlog_attachments").fetchone()[0]

    def damage_attachment(self, store, ref):
        with self._sql(store) as conn:
            (data,) = conn.execute(
                "SELECT data FROM turnlog_attachments WHERE ref = ?", (ref,)
            ).fetchone()
            data = bytearray(data)
            data[len(data) // 2] ^= 1
            conn.execute(
                "UPDATE turnlog_attachments SET data = ? WHERE ref = ?", (bytes(data), ref)
            )


class TestMemoryStore(_MemoryHooks, StoreContract):
    def make_store(self, tmp_path):
        return MemoryStore()


class TestSqliteStore(_SqliteHooks, StoreContract):
    def make_store(self, tmp_path):
        self.db_path = tmp_path / "contract.db"
        return SqliteStore(self.db_path)

    def open_again(self, store, tmp_path):
        return SqliteStore(tmp_path / "contract.db")


class TestAsyncMemoryStore(_MemoryHooks, AsyncStoreContract):
    async def make_async_store(self, tmp_path):
        return AsyncMemoryStore()


class TestAsyncSqliteStore(_SqliteHooks, AsyncStoreContract):
    async def make_async_store(self, tmp_path):
        self.db_path = tmp_path / "contract.db"
        return await AsyncSqliteStore(self.db_path).open()

    async def open_again_async(self, store, tmp_path):
        return await AsyncSqliteStore(tmp_path / "contract.db").open()
