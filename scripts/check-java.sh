#!/usr/bin/env bash
# Spark needs Java 17 or newer. Say so clearly when it is missing instead of failing deep inside PySpark.
set -euo pipefail
if ! command -v java >/dev/null 2>&1; then
    echo "apportion: Java 17+ is required for Spark but 'java' is not on PATH." >&2
    echo "           Install it (Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless) and re-run." >&2
    exit 1
fi
version=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
if [ -z "$version" ] || [ "$version" -lt 17 ]; then
    echo "apportion: Java 17+ is required for Spark; found: $(java -version 2>&1 | head -1)" >&2
    exit 1
fi
