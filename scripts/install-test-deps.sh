#!/usr/bin/env bash
# Install the Debian packages idmint's test suite needs, if they are missing.
#
#   scripts/install-test-deps.sh
#   scripts/install-test-deps.sh coordinators   # only what scripts/coordinators runs
#
# - ZooKeeper server jars (libzookeeper-java) and a Java runtime when `java` is absent;
# - etcd (etcd-server, etcd-client);
# - wrk (HTTP load generator), chromium and chromium-driver (browser tests), procps;
# - gcc and libc6-dev (the fault tests build an LD_PRELOAD shim that steps the clock);
# - python3-dev: Python's headers, which Debian's python3 lacks, for the compiled generator
#   core the editable install builds (a venv of another Python brings its own headers);
# - systemd, for systemd-analyze (the example unit in deploy/ is verified);
# - openssl, which docs/server.md's TLS example makes its certificates with;
# - fish, which runs `idmint completion fish` in the completion tests (3 MB).
# - prometheus, for promtool, which checks and unit-tests the example alert rules in deploy/
#   (19 MB to download; its service is kept from starting, as below).
# - PostgreSQL (postgresql: server binaries in /usr/lib/postgresql/<version>/bin) for the
#   storage and postgresql:// claims tests, and util-linux's setpriv, which runs it as an
#   unprivileged user; redis-server for the redis:// claims tests; mariadb-server
#   (mariadbd, mariadb-install-db) for the mysql:// claims tests.
#
# Runs `apt-get update` once, and only when something has to be installed; prints
# nothing when everything is there already. Uses sudo when not run as root.
#
# Package scripts must not start system services (etcd-server ships one that would
# listen on the default ports 2379/2380, postgresql one on 5432): while installing,
# /usr/sbin/policy-rc.d answers 101 ("action forbidden"), and whatever was there before
# is put back on exit.
# The test harness starts its own servers on free ports (tests/servers/).
set -euo pipefail

# ZooKeeper's jars (with a Java runtime, below) and etcd: the coordinators.
readonly COORDINATOR_PACKAGES=(
    libzookeeper-java
    etcd-server
    etcd-client
    redis-server
    mariadb-server
)
readonly PACKAGES=(
    gcc
    libc6-dev
    python3-dev
    "${COORDINATOR_PACKAGES[@]}"
    wrk
    chromium
    chromium-driver
    procps
    systemd
    openssl
    fish
    prometheus
    postgresql
    util-linux
)
# scripts/coordinators starts PostgreSQL too: its server binaries, without the rest.
readonly JRE_PACKAGE=default-jre-headless
readonly POLICY=/usr/sbin/policy-rc.d

log() { printf 'install-test-deps: %s\n' "$*" >&2; }

is_installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

case "${1:-all}" in
    all) wanted=("${PACKAGES[@]}") ;;
    coordinators) wanted=("${COORDINATOR_PACKAGES[@]}" postgresql util-linux) ;;
    *)
        log "unknown argument '$1': give none (everything) or 'coordinators'"
        exit 2
        ;;
esac

missing=()
for package in "${wanted[@]}"; do
    is_installed "$package" || missing+=("$package")
done
if ! command -v java >/dev/null 2>&1 && ! is_installed "$JRE_PACKAGE"; then
    missing+=("$JRE_PACKAGE")
fi

if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
else
    log "need root or sudo to install: ${missing[*]}"
    exit 1
fi

policy_backup=""
restore_policy() {
    if [ -n "$policy_backup" ]; then
        "${SUDO[@]}" mv -f "$policy_backup" "$POLICY"
    else
        "${SUDO[@]}" rm -f "$POLICY"
    fi
}

# Forbid service starts for the duration of the installation.
if [ -e "$POLICY" ]; then
    policy_backup="$("${SUDO[@]}" mktemp /usr/sbin/.policy-rc.d.XXXXXX)"
    "${SUDO[@]}" cp -p "$POLICY" "$policy_backup"
fi
trap restore_policy EXIT
printf '#!/bin/sh\n# Installed by idmint scripts/install-test-deps.sh\nexit 101\n' |
    "${SUDO[@]}" tee "$POLICY.new" >/dev/null
"${SUDO[@]}" chmod 755 "$POLICY.new"
"${SUDO[@]}" mv -f "$POLICY.new" "$POLICY"

log "installing: ${missing[*]}"
apt=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -qq -o Dpkg::Use-Pty=0)
"${apt[@]}" update
# Slim images drop man pages; some JRE maintainer scripts still expect the directory.
"${SUDO[@]}" mkdir -p /usr/share/man/man1
"${apt[@]}" install -y --no-install-recommends "${missing[@]}" >/dev/null

# On a machine booted with systemd, keep the packaged etcd and PostgreSQL services from
# starting at boot too (the test servers run on their own ports, but 2379 and 5432
# should stay free).
if [ -d /run/systemd/system ]; then
    if [[ " ${missing[*]} " == *" etcd-server "* ]]; then
        "${SUDO[@]}" systemctl disable --now etcd.service >/dev/null 2>&1 || true
    fi
    if [[ " ${missing[*]} " == *" postgresql "* ]]; then
        "${SUDO[@]}" systemctl disable --now postgresql.service >/dev/null 2>&1 || true
    fi
    if [[ " ${missing[*]} " == *" redis-server "* ]]; then
        "${SUDO[@]}" systemctl disable --now redis-server.service >/dev/null 2>&1 || true
    fi
    if [[ " ${missing[*]} " == *" prometheus "* ]]; then
        "${SUDO[@]}" systemctl disable --now prometheus.service >/dev/null 2>&1 || true
    fi
    if [[ " ${missing[*]} " == *" mariadb-server "* ]]; then
        "${SUDO[@]}" systemctl disable --now mariadb.service >/dev/null 2>&1 || true
    fi
fi

# Check that what the test harness runs is now there.
problems=()
commands=(java etcd etcdctl redis-server mariadbd mariadb-install-db)
[ "${1:-all}" = coordinators ] || commands+=(wrk setpriv fish promtool)
for command in "${commands[@]}"; do
    command -v "$command" >/dev/null 2>&1 || problems+=("command $command")
done
# The harness (tests/servers/postgres.py) looks for the server where Debian puts it.
postgres_found=""
for bindir in /usr/lib/postgresql/*/bin; do
    found=yes
    for program in initdb postgres pg_isready psql; do
        [ -x "$bindir/$program" ] || found=""
    done
    [ -z "$found" ] || postgres_found="$bindir"
done
[ -n "$postgres_found" ] || problems+=("/usr/lib/postgresql/*/bin/{initdb,postgres,pg_isready,psql}")
for jar in zookeeper.jar zookeeper-jute.jar slf4j-api.jar slf4j-simple.jar metrics-core.jar; do
    [ -f "/usr/share/java/$jar" ] || problems+=("/usr/share/java/$jar")
done
if [ "${#problems[@]}" -ne 0 ]; then
    log "still missing after installation: ${problems[*]}"
    exit 1
fi
log "done"
