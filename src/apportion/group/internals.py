"""What apportion's own packages use of the group's internals: ``apportion.sim``, the CLI (``status``, ``rebalance``,
``scale``, ...), ``apportion.web``, ``apportion.spark``, the Kafka and RabbitMQ consumers, the worker and the
benchmarks in bench/. **Not a stable API**: these names change with the protocol; a program uses ``apportion.group``.

One module, so that what the rest of the house leans on is visible in one place: the key space and its record codec
(``Keys``, ``encode``/``decode``, the former layout's owner records), partition-id helpers, the definition's limits
and validators, the simulator's delay hook, the partition table (seed 1: its records and reads) and the status
helpers the CLI and the dashboard format with. What no other package uses stays in the private modules (tests reach
into what they test there).
"""

from apportion.group._config import MAX_SECONDS, STRATEGIES
from apportion.group._coordinator import FAILED_RETENTION_S
from apportion.group._keys import (
    LEGACY_LAYOUT,
    Keys,
    decode,
    decode_owner,
    encode,
    pid_of_text,
    pid_order,
    subscribed,
    validate_group,
)
from apportion.group._mode import (
    MODES,
    NO_STATIC_SUBSCRIPTIONS,
    POLICIES,
    mode_named,
    validate_ordinal,
    validate_replicas,
)
from apportion.group._ownership import DelayHook
from apportion.group._static import ordinal_from_hostname
from apportion.group._status import not_at_rest, tags_text
from apportion.group._table import Entry, TableState, in_flight, planned_moves, read_table

__all__ = [
    "FAILED_RETENTION_S",
    "LEGACY_LAYOUT",
    "MAX_SECONDS",
    "MODES",
    "NO_STATIC_SUBSCRIPTIONS",
    "POLICIES",
    "STRATEGIES",
    "DelayHook",
    "Entry",
    "Keys",
    "TableState",
    "decode",
    "decode_owner",
    "encode",
    "in_flight",
    "mode_named",
    "not_at_rest",
    "ordinal_from_hostname",
    "pid_of_text",
    "pid_order",
    "planned_moves",
    "read_table",
    "subscribed",
    "tags_text",
    "validate_group",
    "validate_ordinal",
    "validate_replicas",
]
