#!/usr/bin/env bash
# Apache Kafka's broker (KRaft) from Maven Central, for the tests and `apportion demo --source kafka`: resolve its
# artifacts into Maven's cache (~/.m2, reused by later runs) and write their classpath to $APPORTION_KAFKA_CACHE
# (default ~/.cache/apportion/kafka) /classpath-<pom hash>.txt; print that file's path. The pom and the mvn call are
# apportion.kafka._broker's (one place: an installed wheel resolves the broker the same way, without this script);
# Java 17+ and Maven are required: a clear line and exit 1 when either is missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-$root/.venv/bin/python}"
[ -x "$python" ] || python=python3
exec "$python" -c "from apportion.kafka._broker import main; raise SystemExit(main())"
