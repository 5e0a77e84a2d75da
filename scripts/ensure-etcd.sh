#!/usr/bin/env bash
# The etcd tests run a real etcd server. Install Debian's etcd-server when it is missing and we may (root).
set -uo pipefail
if command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ]; then
    exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "apportion: installing etcd-server for the etcd tests (apt-get)..."
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null) || {
        echo "apportion: could not install etcd-server; install it by hand: apt-get install -y etcd-server" >&2
        [ "${CI:-}" = "true" ] && exit 1
        exit 0
    }
    # The package starts a system service on the default ports; the tests run their own servers.
    (systemctl stop etcd 2>/dev/null || service etcd stop 2>/dev/null || pkill -x etcd) >/dev/null 2>&1 || true
    exit 0
fi
echo "apportion: etcd is not installed; etcd tests will be skipped (CI fails instead)." >&2
echo "           Install it with: sudo apt-get install -y etcd-server" >&2
[ "${CI:-}" = "true" ] && exit 1
exit 0
