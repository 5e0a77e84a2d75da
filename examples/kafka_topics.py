"""A group over Kafka topics from Python: the topics' partitions, read from the broker, shared by whoever runs this.

    python examples/kafka_topics.py sqlite:////tmp/topics.db 127.0.0.1:9092 orders payments

Each process prints the partitions it gains and gives up (``orders-3``: partition 3 of topic ``orders``); a
partition added to a topic (``kafka-topics --alter --partitions``) is dealt out within one heartbeat; Ctrl-C leaves.
"""

import os
import signal
import sys

from apportion import Group, connect
from apportion.kafka import KafkaConfig, TopicWatcher, topic_resources

store_url, bootstrap, *topics = sys.argv[1:]
kafka = KafkaConfig(bootstrap)
store = connect(store_url)
group = Group(store, "topic-readers", resources=topic_resources(kafka, topics), heartbeat_s=2)
watcher = TopicWatcher(kafka, topics, store, "topic-readers")
worker = group.join(
    f"reader-{os.getpid()}",
    on_assigned=lambda parts: print("gained", *parts, flush=True),
    on_revoked=lambda parts: print("gave up", *parts, flush=True),
)
watcher.start(worker)
signal.signal(signal.SIGTERM, lambda *_: worker.stop())
try:
    worker.wait()
except KeyboardInterrupt:
    worker.stop()
watcher.stop()
store.close()
sys.exit(1 if watcher.error else 0)
