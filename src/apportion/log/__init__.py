"""The partitioned log (embedded default source): ordered Parquet segments with contiguous offsets per partition.

Needs pyarrow (the ``[spark]`` extra). See ``apportion.log._log`` for the layout and the atomic append protocol.
"""

from apportion.log._log import SCHEMA, Appended, PartitionedLog, Segment, segment_name
from apportion.log._producer import Producer, Record, SeededRecords, synthetic_records

__all__ = [
    "SCHEMA",
    "Appended",
    "PartitionedLog",
    "Producer",
    "Record",
    "SeededRecords",
    "Segment",
    "segment_name",
    "synthetic_records",
]
