"""The lakehouse suite's oracle: DuckDB computes each view straight from the
source Parquet files of the lake, and the rows must equal, exactly, what
`micromegas-views-daemon query` answers from the materialized partitions.
DuckDB shares no code with the daemon (no DataFusion, no Arrow Rust).

usage: oracle.py DAEMON LAKE_URL LOCAL_DIR DSN BEGIN END VIEW...
(LAKE_URL is what the daemon reads; LOCAL_DIR holds the same source files
for DuckDB; VIEW may be NAME:ORACLE to check NAME against another query.)
"""
import subprocess, sys
import duckdb, pyarrow as pa, pyarrow.ipc as ipc

daemon, lake_url, lake, dsn, begin, end = sys.argv[1:7]
views = sys.argv[7:]
src = lambda name: f"read_parquet('{lake}/sources/{name}/**/*.parquet')"
window = f"insert_time >= TIMESTAMPTZ '{begin}' AND insert_time < TIMESTAMPTZ '{end}'"

ORACLE = {
    "log_stats": f"""
        SELECT time_bucket(INTERVAL 1 minute, time, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS time_bin,
               process_id, level, target, count(*) AS count, max(audience) AS audience
          FROM {src('log_entries')} WHERE {window} GROUP BY ALL""",
    "measures_hourly": f"""
        SELECT time_bucket(INTERVAL 1 hour, time, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS hour, process_id, name, unit,
               count(*) AS n, min(value) AS lo, max(value) AS hi
          FROM {src('measures')} WHERE {window} GROUP BY ALL""",
    "measures_hourly_v2": f"""
        SELECT time_bucket(INTERVAL 1 hour, time, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS hour, process_id, name, unit,
               count(*) AS n, min(value) AS lo, max(value) AS hi, max(time) AS last_time
          FROM {src('measures')} WHERE {window} GROUP BY ALL""",
    "blocks_per_process": f"""
        SELECT process_id, time_bucket(INTERVAL 1 hour, insert_time, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS hour,
               count(*) AS blocks, sum(nb_objects) AS objects
          FROM {src('blocks')} WHERE {window} GROUP BY ALL""",
    "processes_seen": f"""
        SELECT process_id, exe, computer, count(*) AS n, max(insert_time) AS last_insert
          FROM {src('processes')} WHERE {window} GROUP BY ALL""",
    "streams_by_format": f"""
        SELECT format, process_id, count(*) AS streams, max(insert_time) AS last_insert
          FROM {src('streams')} WHERE {window} GROUP BY ALL""",
    "log_levels_daily": f"""
        SELECT time_bucket(INTERVAL 1 day, time, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS day, level, audience, count(*) AS count
          FROM {src('log_entries')} WHERE {window} GROUP BY ALL""",
}


def normalize(table):
    """Rows as tuples of plain values: timestamps as UTC epoch nanoseconds,
    dictionaries decoded, integers as int; sorted."""
    cols = []
    for col in table.columns:
        t = col.type
        if pa.types.is_dictionary(t):
            col = col.cast(t.value_type)
            t = col.type
        if pa.types.is_timestamp(t):
            col = col.cast(pa.timestamp("ns", tz="UTC")).cast(pa.int64())
        cols.append(col.to_pylist())
    rows = list(zip(*cols)) if cols else []
    return sorted(rows, key=lambda r: tuple((v is None, str(v)) for v in r))


failed = 0
con = duckdb.connect()
con.execute("SET TimeZone = 'UTC'")
for view in views:
    name = view.split(":")[0]
    oracle = ORACLE[view.split(":")[-1]]
    out = subprocess.run([daemon, "query", "--lake", lake_url, "--dsn", dsn, "--format", "arrow",
                          f"SELECT * FROM {name}"], capture_output=True, check=True)
    got = ipc.open_stream(out.stdout).read_all() if out.stdout else pa.table({})
    want = con.sql(oracle).to_arrow_table()
    g, w = normalize(got), normalize(want)
    if got.num_columns and got.column_names != want.column_names:
        print(f"lakehouse: {name}: columns {got.column_names}, the oracle's {want.column_names}")
        failed += 1
    elif g != w:
        missing = [r for r in w if r not in set(g)][:3]
        extra = [r for r in g if r not in set(w)][:3]
        print(f"lakehouse: {name}: {len(g)} rows, the oracle {len(w)}; missing {missing}; unexpected {extra}")
        failed += 1
    elif not g:
        print(f"lakehouse: {name}: no rows (the oracle has none either): the sample reaches nothing")
        failed += 1
    else:
        print(f"lakehouse: {name}: {len(g)} rows, equal to DuckDB's over the source files")
sys.exit(1 if failed else 0)
