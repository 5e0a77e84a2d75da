#!/usr/bin/env bash
# The tests run real tools: an etcd server (Debian's etcd-server), a RabbitMQ node (Debian's rabbitmq-server, for
# apportion.rabbitmq; the tests start their own node on free ports), a CPU hog for the nemesis (stress-ng), for the
# multi-host nemesis (tests/nemesis) iproute2's ip (network namespaces) and iptables (partial partitions), a
# PostgreSQL server (Debian's postgresql: the tests run initdb and postgres from /usr/lib/postgresql/*/bin in a temp
# dir, never the system cluster), and a headless browser for the dashboard's test (Debian's chromium, driven by
# playwright: playwright's own browser download does not work on a machine without a network), and Maven for Apache
# Kafka's broker (scripts/ensure-kafka.sh resolves it from Maven Central; the tests start private KRaft nodes).
# Install the missing ones when we may (root with apt-get); otherwise say so (CI fails instead of skipping tests).
set -uo pipefail
missing=()
{ command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ]; } || missing+=(etcd-server)
command -v stress-ng >/dev/null 2>&1 || missing+=(stress-ng)
{ command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } || missing+=(postgresql)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || missing+=(iptables)
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || command -v rabbitmq-server >/dev/null 2>&1 || missing+=(rabbitmq-server)
{ command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; } || missing+=(chromium)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
# Apache Kafka's broker (KRaft) comes from Maven Central, not Debian: resolved once into Maven's cache (after Maven
# itself is installed, below); a failure is CI's failure, a developer's skip of the Kafka tests
kafka() { bash "$(dirname "$0")/ensure-kafka.sh" >/dev/null || { [ "${CI:-}" = "true" ] && exit 1; }; }
[ ${#missing[@]} -eq 0 ] && { kafka; exit 0; }
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "apportion: installing ${missing[*]} for the tests (apt-get)..."
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null) || {
        echo "apportion: could not install ${missing[*]}; install by hand: apt-get install -y ${missing[*]}" >&2
        [ "${CI:-}" = "true" ] && exit 1
        exit 0
    }
    # etcd-server's package starts a system service on the default ports; the tests run their own servers.
    (systemctl stop etcd 2>/dev/null || service etcd stop 2>/dev/null || pkill -x etcd) >/dev/null 2>&1 || true
    # so does rabbitmq-server's (node rabbit@<host> on 5672, and its epmd on 4369); stopped by its service only
    (systemctl stop rabbitmq-server 2>/dev/null || service rabbitmq-server stop 2>/dev/null) >/dev/null 2>&1 || true
    # and postgresql's (the cluster "main" on 5432); the tests start their own on free ports
    (systemctl stop postgresql 2>/dev/null || service postgresql stop 2>/dev/null) >/dev/null 2>&1 || true
    kafka
    exit 0
fi
kafka
echo "apportion: ${missing[*]} not installed; the tests that need them will be skipped (CI fails instead)." >&2
echo "           Install with: sudo apt-get install -y ${missing[*]}" >&2
[ "${CI:-}" = "true" ] && exit 1
exit 0
