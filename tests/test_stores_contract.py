"""Every store of ours runs the shipped contract suite unchanged."""

from turnlog import MemoryStore, SqliteStore
from turnlog.testing import StoreContract


class TestMemoryStore(StoreContract):
    def make_store(self, tmp_path):
        return MemoryStore()


class TestSqliteStore(StoreContract):
    def make_store(self, tmp_path):
        return SqliteStore(tmp_path / "contract.db")

    def open_again(self, store, tmp_path):
        return SqliteStore(tmp_path / "contract.db")
