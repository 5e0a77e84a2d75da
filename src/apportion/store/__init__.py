"""The consistent store: one etcd-v3-shaped contract, backends chosen by URL (memory, sqlite, etcd)."""

from apportion.errors import NoSuchStore
from apportion.store._base import Store, Watch, renew_interval_s
from apportion.store._connect import connect, default_ttl_s
from apportion.store._memory import MemoryStore
from apportion.store._redact import redact, redact_url, url_secrets
from apportion.store._types import (
    Compare,
    Delete,
    Event,
    EventType,
    Get,
    KeyValue,
    Lease,
    Op,
    Put,
    TxnResult,
    absent,
    exists,
    mod_revision_is,
    validate_key,
    value_is,
)

__all__ = [
    "Compare",
    "Delete",
    "Event",
    "EventType",
    "Get",
    "KeyValue",
    "Lease",
    "MemoryStore",
    "NoSuchStore",
    "Op",
    "Put",
    "Store",
    "TxnResult",
    "Watch",
    "absent",
    "connect",
    "default_ttl_s",
    "exists",
    "mod_revision_is",
    "renew_interval_s",
    "redact",
    "redact_url",
    "url_secrets",
    "validate_key",
    "value_is",
]
