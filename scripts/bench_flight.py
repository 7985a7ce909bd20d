"""The FlightSQL service's benchmark (scripts/bench_flight.sh runs it).

1. Ratios in one run, over alternating rounds: a query over a day of
   materialized log_stats partitions through FlightSQL end to end (ADBC,
   the service's catalog read, planning, encoding) divided by DataFusion in
   process over the same files (flight/examples/in_process.rs), and by
   DuckDB over the same Parquet files. The three answers are compared.
2. A load run: N clients on loopback for S seconds, each its own ADBC
   connection, looping the query and a metadata call; every error counted,
   p50 and p99 latency of each.

usage: bench_flight.py IN_PROCESS LAKE_DIR DSN FLIGHT_URI KEY ROUNDS CLIENTS SECONDS
"""
import statistics, subprocess, sys, threading, time
import duckdb
import adbc_driver_flightsql.dbapi as flightsql
from adbc_driver_flightsql import DatabaseOptions

in_process, lake, dsn, uri, key = sys.argv[1:6]
rounds, clients, seconds = int(sys.argv[6]), int(sys.argv[7]), float(sys.argv[8])
QUERY = "SELECT level, target, sum(count) AS n FROM log_stats GROUP BY level, target ORDER BY level, target"
PER_ROUND = 10


def connect():
    return flightsql.connect(uri, db_kwargs={DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {key}"}, autocommit=True)


files = subprocess.check_output(
    ["psql", "-X", "-A", "-t", "-d", dsn, "-c",
     "SELECT file_path FROM micromegas.lakehouse_partitions p JOIN micromegas.list_view_sets() v "
     "ON v.view_set_name = p.view_set_name AND v.current_schema_hash = p.file_schema_hash "
     "WHERE p.view_set_name = 'log_stats' AND num_rows > 0"], text=True).split()
paths = "[" + ", ".join(f"'{lake}/{f}'" for f in files) + "]"
duck = duckdb.connect()
DUCK = f"SELECT level, target, sum(count) AS n FROM read_parquet({paths}) GROUP BY level, target ORDER BY level, target"

conn = connect()
baseline = subprocess.Popen([in_process, f"file://{lake}", dsn, "log_stats"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, bufsize=1)


def flight_once():
    t = time.perf_counter()
    with conn.cursor() as cur:
        cur.execute(QUERY)
        table = cur.fetch_arrow_table()
    return (time.perf_counter() - t) * 1000, table


def in_process_once():
    baseline.stdin.write(QUERY + "\n")
    baseline.stdin.flush()
    ms, rows = baseline.stdout.readline().split()
    return float(ms), int(rows)


def duck_once():
    t = time.perf_counter()
    rows = duck.sql(DUCK).fetchall()
    return (time.perf_counter() - t) * 1000, rows


# The three agree before anything is timed.
_, table = flight_once()
got = [(r["level"], r["target"], r["n"]) for r in table.to_pylist()]
want = [tuple(r) for r in duck_once()[1]]
assert got == want and got, f"FlightSQL and DuckDB disagree: {got[:3]} vs {want[:3]}"
assert in_process_once()[1] == len(got)
for _ in range(3):  # warm-up
    flight_once(); in_process_once(); duck_once()

source_rows = sum(r[2] for r in want)
print(f"query: {QUERY}")
print(f"over {len(files)} log_stats partition file(s), {len(got)} answer rows, {source_rows} log entries counted")
vs_df, vs_duck = [], []
for r in range(rounds):
    f = statistics.median(flight_once()[0] for _ in range(PER_ROUND))
    p = statistics.median(in_process_once()[0] for _ in range(PER_ROUND))
    d = statistics.median(duck_once()[0] for _ in range(PER_ROUND))
    vs_df.append(f / p)
    vs_duck.append(f / d)
    print(f"round {r + 1}: FlightSQL {f:.2f} ms, DataFusion in process {p:.2f} ms, DuckDB {d:.2f} ms; "
          f"ratios {f / p:.2f}x, {f / d:.2f}x (medians of {PER_ROUND})")
baseline.stdin.close()
baseline.wait()
print(f"FlightSQL / DataFusion in process: median {statistics.median(vs_df):.2f}x (spread {min(vs_df):.2f}x - {max(vs_df):.2f}x "
      f"over {rounds} alternating rounds; goal <= 1.3x)")
print(f"FlightSQL / DuckDB: median {statistics.median(vs_duck):.2f}x (spread {min(vs_duck):.2f}x - {max(vs_duck):.2f}x)")

# The load run.
latencies = {"query": [], "metadata": []}
errors = []
lock = threading.Lock()
stop_at = time.monotonic() + seconds


def client(i):
    c = connect()
    n = 0
    while time.monotonic() < stop_at:
        kind = "metadata" if n % 4 == 3 else "query"
        t = time.perf_counter()
        try:
            if kind == "query":
                with c.cursor() as cur:
                    cur.execute(QUERY)
                    rows = cur.fetch_arrow_table().num_rows
                if rows != len(got):
                    raise RuntimeError(f"{rows} rows instead of {len(got)}")
            else:
                c.adbc_get_objects(depth="tables").read_all()
        except Exception as e:
            with lock:
                errors.append(str(e)[:200])
        else:
            with lock:
                latencies[kind].append((time.perf_counter() - t) * 1000)
        n += 1
    c.close()


threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))] if values else float("nan")


for kind, values in latencies.items():
    print(f"load, {clients} clients for {seconds:.0f} s, {kind}: {len(values)} calls, "
          f"p50 {pct(values, 50):.1f} ms, p99 {pct(values, 99):.1f} ms")
print(f"load: {len(errors)} errors" + (f" (first: {errors[0]})" if errors else ""))
sys.exit(1 if errors else 0)
