"""Kafka, the resource four of the five seeds are about (the ``kafka`` extra: confluent-kafka, kafka-python).

- :class:`KafkaConfig` — where the cluster is and how to log in; :func:`topic_partitions` reads topics' partition
  counts, with one clear error for an unreachable broker, refused credentials or an unknown topic (``_client.py``);
- :func:`topic_resources`, :func:`sync_definition`, :class:`TopicWatcher` — topics as a group's resources, a topic
  that grows on the broker a new round (``_topics.py``);
- :func:`partition_for_key` — Kafka's own default partitioner (murmur2), so apportion's producer and every other
  Kafka producer put a key in the same partition (``_partitioner.py``);
- :class:`Producer` — keyed, idempotent records into a topic (``_producer.py``); :func:`create_topic` makes one;
- :class:`KafkaCluster` — a local Apache Kafka (KRaft nodes from Kafka's Maven artifacts on free loopback ports,
  always stopped): ``apportion demo --source kafka``'s broker and the tests' (``_broker.py``);
- :class:`TopicConsumer`, :func:`run_consumer` — a group member that consumes exactly the partitions it owns, from
  the store's fenced checkpoints, committing per batch (``_consumer.py``, ``_run.py``: ``apportion kafka consume``);
- :class:`KafkaPythonStickyAssignor`, :class:`AiokafkaStickyAssignor` — seed 4's constrained sticky assignor inside
  Kafka's own consumer groups (``_assignor.py``; it imports neither client: importing this face stays cheap).
"""

from apportion.kafka._assignor import (
    ASSIGNOR_NAME,
    STALE_CLAIMS,
    AiokafkaStickyAssignor,
    Claim,
    GroupAssignment,
    KafkaPythonStickyAssignor,
    StaleClaims,
    Subscription,
    assign_group,
    decode_claim,
    encode_claim,
)
from apportion.kafka._broker import KafkaCluster, KafkaNode, kafka_classpath
from apportion.kafka._client import (
    DEFAULT_CONNECT_TIMEOUT_S,
    KafkaConfig,
    create_topic,
    topic_partitions,
    validate_topic,
)
from apportion.kafka._consumer import (
    DEFAULT_BATCH,
    DEFAULT_COMMIT_DELAY_S,
    STARTS,
    Emit,
    Handle,
    TopicConsumer,
)
from apportion.kafka._partitioner import MURMUR2_SEED, KafkaKey, key_bytes, murmur2, partition_for_key
from apportion.kafka._producer import DEFAULT_DELIVERY_TIMEOUT_S, Producer
from apportion.kafka._run import Requested, echo, load_handler, run_consumer
from apportion.kafka._topics import TopicWatcher, resources_text, sync_definition, topic_resources

__all__ = [
    "ASSIGNOR_NAME",
    "STALE_CLAIMS",
    "AiokafkaStickyAssignor",
    "Claim",
    "GroupAssignment",
    "KafkaPythonStickyAssignor",
    "StaleClaims",
    "Subscription",
    "assign_group",
    "create_topic",
    "decode_claim",
    "encode_claim",
    "kafka_classpath",
    "DEFAULT_BATCH",
    "DEFAULT_COMMIT_DELAY_S",
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_DELIVERY_TIMEOUT_S",
    "MURMUR2_SEED",
    "STARTS",
    "Emit",
    "Handle",
    "KafkaCluster",
    "KafkaConfig",
    "KafkaNode",
    "KafkaKey",
    "Producer",
    "Requested",
    "TopicConsumer",
    "TopicWatcher",
    "echo",
    "key_bytes",
    "load_handler",
    "murmur2",
    "partition_for_key",
    "resources_text",
    "run_consumer",
    "sync_definition",
    "topic_partitions",
    "topic_resources",
    "validate_topic",
]
