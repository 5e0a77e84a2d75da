"""The main job on embedded defaults (`make demo` / `apportion demo`): the whole of apportion, end to end.

SQLite store, partitioned Parquet log, local Spark; real worker processes and real faults. Steps::

    produce   N keyed records routed by partition_for into P partitions (the Python producer)
    start     W `apportion pipeline run` workers (sticky, stateful: per-key aggregates per partition in local
              stores backed by a fenced changelog) — each its own Spark session
    join      one more worker; the group rebalances with the minimum of moves
    kill -9   one worker: its lease lapses, its partitions are claimed again (failover time measured)
    freeze    one worker with SIGSTOP until its partitions are owned by others, then SIGCONT: its late commit is
              fenced (epochs) and it reports on_lost, then rejoins
    drain     wait until every record is committed
    stop      SIGTERM everyone: graceful leave (revoke, commit, release)
    verify    exactly once (counts + checksum of committed output vs input, no duplicate, none missing, per-key
              order), state exactly once (every partition's state rebuilt from its committed changelog equals a
              one-pass aggregate of the input: the killed worker's and the zombie's appends never count), zero
              ownership overlaps in the history, moves vs the lower bound, failover time
    report    Spark analytics of the history → HTML with plots

Every wait is on a state (store records, the workers' event lines) and fails with what it waited for; its time
limit is not tuned to an idle machine but derived from what the demo observes (``_Pace``): the protocol's own times
(ttl + settle + min interval), the slowest micro-batch seen so far in any worker's log, how long the Spark workers
took to start, and the machine's load average. Long waits (start-up, draining) fail only after that long *without
progress*, and a wait fails at once, with the tail of its log, when a worker it needs has exited. The freeze is
checked too: if SIGSTOP missed the zombie's window between writing and committing, it is resumed and frozen again
at its next batch. The job exits non-zero when any check fails. Child processes are always stopped (SIGCONT +
SIGKILL) when the demo ends, whatever happens.

On Kafka (``apportion demo --source kafka``): the same steps and checks, the records in a new topic of a local
single-node KRaft broker the demo starts and always stops (``apportion.kafka.KafkaCluster``: Java 17+ and Maven; or
``--bootstrap`` a running one), the workers reading it with ``pipeline run --kafka/--topic`` (the shared Connect
server gets Spark's Kafka connector: ``$APPORTION_KAFKA_JARS``, else Spark's package resolution), exactly once
verified against the topic (``verify_kafka``). The pipeline on Kafka is not stateful, so the state check is
skipped, in one line of the output.

The package: ``_config`` (sizes, timings, time limits), ``_source`` (the record sources: the log, a Kafka topic),
``_scenario`` (the steps), ``_checks`` (exactly once, the results table), ``_report`` (Spark analytics → HTML).
"""

from apportion.demo._checks import DemoResult, summary_json
from apportion.demo._config import SOURCES, DemoConfig
from apportion.demo._scenario import run_demo
from apportion.demo._source import kafka_config

__all__ = ["SOURCES", "DemoConfig", "DemoResult", "kafka_config", "run_demo", "summary_json"]
