# Shared settings for the scripts in this folder; sourced, not run.
# Everything lives outside the clone so repeated runs reuse the build cache.
export PG_CONFIG="${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}"
export PG_BIN="$("$PG_CONFIG" --bindir)"
export PGXS_DIR="$("$PG_CONFIG" --pkglibdir)/pgxs"
export MMV_STATE="${MMV_STATE:-/var/tmp/micromegas_views}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$MMV_STATE/target}"
export MMV_PORT="${MMV_PORT:-28815}"
export MMV_SOCKET="$MMV_STATE/socket"
export PGHOST="$MMV_SOCKET" PGPORT="$MMV_PORT" PGUSER=postgres
# Tools installed by setup.sh.
export PATH="$HOME/.cargo/bin:$PATH"

# Runs a command as the postgres OS user when we are root (initdb refuses root).
as_postgres() {
  if [ "$(id -u)" = 0 ]; then sudo -u postgres -E env PATH="$PATH" "$@"; else "$@"; fi
}
