#!/usr/bin/env bash
# The Kafka broker of the tests, from Maven Central: resolve scripts/kafka/pom.xml's artifacts into Maven's cache
# (~/.m2, reused by later runs) and write their classpath to $APPORTION_KAFKA_CACHE (default
# ~/.cache/apportion/kafka) /classpath-<pom hash>.txt; print that file's path. Java 17+ and Maven are required (the
# broker of Kafka 4.x runs on Java 17): a clear line and exit 1 when either is missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
pom="$here/kafka/pom.xml"
cache="${APPORTION_KAFKA_CACHE:-$HOME/.cache/apportion/kafka}"
command -v java >/dev/null 2>&1 || { echo "apportion: Java 17+ is needed for the Kafka broker of the tests (apt-get install -y openjdk-17-jre-headless)" >&2; exit 1; }
command -v mvn >/dev/null 2>&1 || { echo "apportion: Maven is needed to fetch the Kafka broker of the tests (apt-get install -y maven)" >&2; exit 1; }
major="$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p' | cut -d. -f1)"
if [ -n "$major" ] && [ "$major" -lt 17 ]; then
    echo "apportion: the Kafka broker of the tests needs Java 17+, found Java $major" >&2; exit 1
fi
hash="$(sha256sum "$pom" | cut -c1-16)"
out="$cache/classpath-$hash.txt"
if [ ! -s "$out" ] || ! tr ':' '\n' < "$out" | while read -r jar; do [ -f "$jar" ] || exit 1; done; then
    mkdir -p "$cache"
    echo "apportion: resolving Apache Kafka's broker from Maven Central (once; cached in ~/.m2)..." >&2
    if ! mvn -q -B -f "$pom" dependency:build-classpath -Dmdep.outputFile="$out.tmp" >"$cache/mvn.log" 2>&1; then
        echo "apportion: mvn could not resolve the Kafka broker (see $cache/mvn.log):" >&2
        tail -5 "$cache/mvn.log" >&2
        exit 1
    fi
    mv "$out.tmp" "$out"
fi
echo "$out"
