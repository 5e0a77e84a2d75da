#!/usr/bin/env bash
# Spark's Kafka connector for the pipeline on Kafka, from Maven Central: resolve scripts/spark-kafka/pom.xml's
# artifacts for the installed pyspark's version (or $1) into Maven's cache (~/.m2, reused by later runs) and write
# their jars, comma-separated as spark.jars takes them, to $APPORTION_KAFKA_CACHE (default ~/.cache/apportion/kafka)
# /spark-kafka-<version>-<pom hash>.txt; print that file's path. Export its content as APPORTION_KAFKA_JARS for
# `apportion pipeline run --kafka` and `apportion spark serve --kafka-jars`.
# Why Maven and not spark.jars.packages: Spark's Ivy resolution runs at every JVM start and asks every repository of
# its chain again, the unreachable ones too (62 s per start on a machine that reaches only Maven Central, with a warm
# cache); Maven resolves once, and the jars are local files every engine takes (own JVM, Connect server, a
# standalone cluster's executors fetch them from the driver).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
pom="$here/spark-kafka/pom.xml"
cache="${APPORTION_KAFKA_CACHE:-$HOME/.cache/apportion/kafka}"
python="${PYTHON:-$root/.venv/bin/python}"
[ -x "$python" ] || python=python3
version="${1:-$("$python" -c 'import pyspark; print(pyspark.__version__)')}"
command -v mvn >/dev/null 2>&1 || { echo "apportion: Maven is needed to fetch Spark's Kafka connector (apt-get install -y maven)" >&2; exit 1; }
hash="$(sha256sum "$pom" | cut -c1-16)"
out="$cache/spark-kafka-$version-$hash.txt"
if [ ! -s "$out" ] || ! tr ',' '\n' < "$out" | while read -r jar; do [ -f "$jar" ] || exit 1; done; then
    mkdir -p "$cache"
    echo "apportion: resolving spark-sql-kafka-0-10 $version from Maven Central (once; cached in ~/.m2)..." >&2
    if ! mvn -q -B -f "$pom" -Dspark.version="$version" dependency:build-classpath -Dmdep.pathSeparator=, \
            -Dmdep.outputFile="$out.tmp" >"$cache/spark-kafka-mvn.log" 2>&1; then
        echo "apportion: mvn could not resolve Spark's Kafka connector $version (see $cache/spark-kafka-mvn.log):" >&2
        tail -5 "$cache/spark-kafka-mvn.log" >&2
        exit 1
    fi
    mv "$out.tmp" "$out"
fi
echo "$out"
