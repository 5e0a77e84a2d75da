"""Kafka, the resource four of the five seeds are about (the ``kafka`` extra: confluent-kafka, kafka-python).

- :class:`KafkaConfig` — where the cluster is and how to log in; :func:`topic_partitions` reads topics' partition
  counts, with one clear error for an unreachable broker, refused credentials or an unknown topic (``_client.py``);
- :func:`topic_resources`, :func:`sync_definition`, :class:`TopicWatcher` — topics as a group's resources, a topic
  that grows on the broker a new round (``_topics.py``).
"""

from apportion.kafka._client import (
    DEFAULT_CONNECT_TIMEOUT_S,
    KafkaConfig,
    topic_partitions,
    validate_topic,
)
from apportion.kafka._topics import TopicWatcher, resources_text, sync_definition, topic_resources

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "KafkaConfig",
    "TopicWatcher",
    "resources_text",
    "sync_definition",
    "topic_partitions",
    "topic_resources",
    "validate_topic",
]
