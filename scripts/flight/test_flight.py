"""The FlightSQL service's suite, with clients nobody here wrote: ADBC's
FlightSQL driver (adbc-driver-flightsql) and pyarrow.flight, against a
running micromegas-views-flight; DuckDB over the same source Parquet files
is the oracle of every row count and every row.

Environment: FLIGHT (grpc://host:port), DAEMON (the daemon binary), LAKE
(the lake's directory), DSN (a superuser's connection string, for the
daemon and for psql), DB (the database), BEGIN, END, and the keys
ADMIN_KEY, ALICE_KEY (groups team-a), BOB_KEY (no group).
"""
import os, signal, subprocess, sys, threading, time
import duckdb
import pyarrow as pa
import pyarrow.flight as fl
import adbc_driver_flightsql.dbapi as flightsql
from adbc_driver_flightsql import DatabaseOptions

E = os.environ
failures = []


def check(ok, what):
    print(("flight: " if ok else "flight: FAILED: ") + what)
    if not ok:
        failures.append(what)


def connect(key, headers=None, address=None):
    kwargs = {DatabaseOptions.AUTHORIZATION_HEADER.value: f"Bearer {key}"}
    for k, v in (headers or {}).items():
        kwargs[f"{DatabaseOptions.RPC_CALL_HEADER_PREFIX.value}{k}"] = v
    return flightsql.connect(address or E["FLIGHT"], db_kwargs=kwargs, autocommit=True)


def query(conn, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetch_arrow_table()


def error_of(conn, sql):
    try:
        query(conn, sql)
    except Exception as e:  # the driver's error, as a client sees it
        return str(e)
    return None


def psql(sql):
    out = subprocess.run(["psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", E["DB"], "-c", sql],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return out.stdout.strip()


def normalize(table):
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


lake, begin, end = E["LAKE"], E["BEGIN"], E["END"]
duck = duckdb.connect()
duck.execute("SET TimeZone = 'UTC'")
src = lambda name: f"read_parquet('{lake}/sources/{name}/**/*.parquet')"
window = f"insert_time >= TIMESTAMPTZ '{begin}' AND insert_time < TIMESTAMPTZ '{end}'"


def inlist(audiences):
    return "(" + ", ".join(f"'{a}'" for a in sorted(audiences)) + ")"


def oracle_log_counts(audiences=None):
    where = window if audiences is None else f"{window} AND audience IN {inlist(audiences)}"
    return duck.sql(f"""
        SELECT time_bucket(INTERVAL 1 hour, time, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS hour,
               process_id, level, audience, count(*) AS n
          FROM {src('log_entries')} WHERE {where} GROUP BY ALL""").to_arrow_table()


def oracle_blocks_per_process(audiences=None):
    visible = "" if audiences is None else f"""AND process_id IN (
        SELECT process_id FROM {src('log_entries')} WHERE audience IN {inlist(audiences)}
        UNION SELECT process_id FROM {src('measures')} WHERE audience IN {inlist(audiences)})"""
    return duck.sql(f"""
        SELECT process_id, time_bucket(INTERVAL 1 hour, insert_time, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS hour,
               count(*) AS blocks, sum(nb_objects) AS objects
          FROM {src('blocks')} WHERE {window} {visible} GROUP BY ALL""").to_arrow_table()


admin = connect(E["ADMIN_KEY"])
alice = connect(E["ALICE_KEY"], {"x-client-type": "notebook-tests"})
bob = connect(E["BOB_KEY"])
ALICE = {"public", "team-a"}
BOB = {"public"}

def statement_command(sql):
    """A FlightSQL CommandStatementQuery in its protobuf Any, encoded by
    hand (pyarrow.flight carries it without knowing FlightSQL)."""
    def field(number, data):
        n, out = len(data), bytearray([number << 3 | 2])
        while True:
            out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                return bytes(out) + data
    return field(1, b"type.googleapis.com/arrow.flight.protocol.sql.CommandStatementQuery") + \
        field(2, field(1, sql.encode()))


# --- Who is calling -------------------------------------------------------
client = fl.FlightClient(E["FLIGHT"])
try:
    client.get_flight_info(fl.FlightDescriptor.for_command(statement_command("SELECT 1")))
    check(False, "a call without credentials was answered")
except fl.FlightUnauthenticatedError as e:
    check("missing credentials" in str(e), "a call without credentials is UNAUTHENTICATED (pyarrow.flight)")
options = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {E['BOB_KEY']}".encode())])
info = client.get_flight_info(fl.FlightDescriptor.for_command(statement_command("SELECT 40 + 2 AS answer")), options)
answer = client.do_get(info.endpoints[0].ticket, options).read_all().to_pylist()
check(answer == [{"answer": 42}], f"pyarrow.flight runs a statement with a bearer key: {answer}")
bad = connect("nobody-has-this-key-0123456789")
e = error_of(bad, "SELECT 1")
check(e is not None and "Unauthenticated" in e and "nobody-has-this-key" not in e,
      f"an unknown key is UNAUTHENTICATED and not echoed (ADBC: {e and e.splitlines()[0]})")
# Basic credentials through Handshake answer a bearer token (pyarrow's own helper).
pair = client.authenticate_basic_token("alice", E["ALICE_KEY"])
check(pair[0] == b"authorization" and pair[1] == f"Bearer {E['ALICE_KEY']}".encode(),
      "a Handshake with Basic credentials answers the bearer header")

# --- DDL through FlightSQL ------------------------------------------------
LOG_COUNTS = """CREATE MATERIALIZED VIEW log_counts WITH (
  extract_query = 'SELECT date_bin(''1 hour'', time) AS hour, process_id, level, audience, count(*) AS n
                     FROM log_entries WHERE insert_time >= ''{begin}'' AND insert_time < ''{end}''
                    GROUP BY 1, process_id, level, audience',
  count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks WHERE array_has("streams.tags", ''log'')
                       AND insert_time >= ''{begin}'' AND insert_time < ''{end}''',
  merge_partitions_query = 'SELECT hour, process_id, level, audience, sum(n) AS n FROM {source}
                              GROUP BY hour, process_id, level, audience',
  update_group = 3100, time_column = 'hour')"""
created = query(admin, LOG_COUNTS).to_pylist()
check(created == [{"view_set_name": "log_counts", "status": "created"}],
      f"an admin's CREATE MATERIALIZED VIEW through FlightSQL answers one row: {created}")
e = error_of(alice, LOG_COUNTS.replace("log_counts", "alice_view"))
check(e is not None and "PermissionDenied" in e and "42501" in e,
      f"a reader's CREATE is PERMISSION_DENIED with the extension's message ({e and e.splitlines()[0][:160]})")
e = error_of(alice, "DROP MATERIALIZED VIEW log_counts")
check(e is not None and "PermissionDenied" in e, "a reader's DROP is PERMISSION_DENIED")
for f in ["deny_queries('sql_hash = ''x''', 'r')", "list_query_denials()", "retire_partitions('log_counts', 'global', '2026-01-01', '2026-01-02')",
          "materialize_partitions('log_counts', '2026-01-01', '2026-01-02', 3600)"]:
    e = error_of(alice, f"SELECT * FROM {f}")
    check(e is not None and "not found" in e, f"for a reader, {f.split('(')[0]}() does not exist")
seen = query(alice, "SELECT view_set_name FROM list_view_sets() WHERE view_set_name = 'log_counts'").to_pylist()
check(seen == [{"view_set_name": "log_counts"}], "a reader's list_view_sets() names the new view")

# The daemon materializes the day.
subprocess.run([E["DAEMON"], "materialize", "--lake", f"file://{lake}", "--dsn", E["DSN"], "--begin", begin, "--end", end,
                "--view", "log_counts", "--view", "blocks_per_process"], check=True, capture_output=True)
parts = query(admin, "SELECT count(*) AS n FROM list_partitions('log_counts') WHERE num_rows > 0").to_pylist()[0]["n"]
check(parts > 0, f"list_partitions() through FlightSQL shows the daemon's {parts} partitions")

# --- Rows by audience, in the plan ------------------------------------------
want_all = normalize(oracle_log_counts())
got = normalize(query(admin, "SELECT * FROM log_counts"))
check(got == want_all and len(got) > 0, f"an admin reads every row of log_counts ({len(got)} rows, DuckDB {len(want_all)})")
for who, conn, audiences in [("alice", alice, ALICE), ("bob", bob, BOB)]:
    want = normalize(oracle_log_counts(audiences))
    got = normalize(query(conn, "SELECT * FROM log_counts"))
    check(got == want and 0 < len(got) < len(want_all),
          f"{who} reads exactly the rows of audiences {sorted(audiences)} ({len(got)} of {len(want_all)})")
    total = sum(r[-1] for r in want)
    shapes = {
        "a subquery": "SELECT sum(n) AS s FROM (SELECT * FROM log_counts) q",
        "a CTE": "WITH c AS (SELECT * FROM log_counts) SELECT sum(n) AS s FROM c",
        "a UNION": "SELECT sum(n) AS s FROM (SELECT n FROM log_counts UNION ALL SELECT n FROM log_counts WHERE level < 0) u",
        "a join": "SELECT sum(l.n) AS s FROM log_counts l JOIN (SELECT DISTINCT process_id FROM log_counts) p ON l.process_id = p.process_id",
        "a qualified name": "SELECT sum(n) AS s FROM datafusion.public.log_counts",
        "a scalar subquery": "SELECT (SELECT sum(n) FROM log_counts) AS s",
        "an IN subquery": "SELECT sum(n) AS s FROM log_counts WHERE process_id IN (SELECT process_id FROM log_counts)",
        "a self-join on audience": "SELECT sum(a.n) AS s FROM log_counts a JOIN (SELECT DISTINCT audience FROM log_counts) b ON a.audience = b.audience",
    }
    for shape, sql in shapes.items():
        s = query(conn, sql).to_pylist()[0]["s"]
        check(s == total, f"{who}: {shape} does not widen the rows (sum {s}, DuckDB {total})")
    aud = {r["a"] for r in query(conn, "SELECT DISTINCT CAST(audience AS VARCHAR) AS a FROM log_counts").to_pylist()}
    check(aud <= audiences, f"{who} sees audiences {sorted(aud)} only")
    src_count = query(conn, "SELECT count(*) AS c FROM log_entries").to_pylist()[0]["c"]
    want_src = duck.sql(f"SELECT count(*) FROM {src('log_entries')} WHERE audience IN {inlist(audiences)}").fetchall()[0][0]
    check(src_count == want_src, f"{who}: the source log_entries is filtered too ({src_count}, DuckDB {want_src})")
    # A view without an audience column: a process's rows show to whoever
    # reads the audience that process's rows carry.
    want_p = normalize(oracle_blocks_per_process(audiences))
    got_p = normalize(query(conn, "SELECT * FROM blocks_per_process"))
    check(got_p == want_p, f"{who}: blocks_per_process (no audience column) shows the processes of its audiences ({len(got_p)} rows, DuckDB {len(want_p)})")
e = error_of(alice, "SELECT * FROM __log_counts__partitions")
check(e is not None and "not found" in e, "the raw partitions table is not reachable")
e = error_of(alice, "CREATE TABLE t AS SELECT 1")
check(e is not None, "DataFusion's own DDL is refused")
got_p = normalize(query(admin, "SELECT * FROM blocks_per_process"))
check(got_p == normalize(oracle_blocks_per_process()), "an admin reads every row of blocks_per_process")

# The caller's predicates only ever see its own rows: one that fails on a
# hidden row (and would quote it) runs on visible rows only.
probe = ("SELECT count(*) AS c FROM log_entries WHERE CASE WHEN CAST(audience AS VARCHAR) <> 'public' "
         "THEN CAST(concat('x', CAST(audience AS VARCHAR), ':', msg) AS INT) ELSE 0 END = 1")
e = error_of(bob, probe)
check(e is None, f"a predicate that would fail on a hidden row never sees one ({e and e.splitlines()[0][:160]})")
e = error_of(bob, "SELECT count(*) FROM processes WHERE CAST(concat('x', process_id) AS INT) = 1")
hidden = {r[0] for r in duck.sql(f"SELECT DISTINCT process_id FROM {src('log_entries')} WHERE audience <> 'public'").fetchall()}
check(e is not None and not any(p in e for p in hidden), "an error raised on a row quotes only a row the caller may see")
for sql in ["EXPLAIN SELECT * FROM log_counts", "EXPLAIN ANALYZE SELECT count(*) FROM blocks", "SET datafusion.execution.batch_size = 1"]:
    e = error_of(bob, sql)
    check(e is not None and "InvalidArgument" in e and "read-only query" in e, f"{sql.split()[0]} is refused ({e and e.splitlines()[0][:120]})")
# Deep statements: within the parse limit they plan (on the query runtime's
# large stacks); past it they are refused; the service stays up.
deep = query(bob, "SELECT " + "+".join(["1"] * 450) + " AS x").to_pylist()
check(deep == [{"x": 450}], "a 450-term expression answers")
e = error_of(bob, "SELECT " + "+".join(["1"] * 100000) + " AS x")
check(e is not None and "nested too deeply" in e, "a 100,000-term expression is refused by the parse check")
e = error_of(bob, "SELECT 1 -- " + "x" * (2 << 20))
check(e is not None and "InvalidArgument" in e and "at most" in e, "a statement past the size limit is refused")
# Planning cannot be stopped part way: its size is capped before it starts
# (thousands of UNION members or hundreds of joins planned for minutes past
# their deadline).
e = error_of(bob, "SELECT b0.block_id FROM blocks b0 " + " ".join(f"JOIN blocks b{i} ON b{i}.block_id = b0.block_id" for i in range(1, 65)))
check(e is not None and "InvalidArgument" in e and "65 tables" in e and "--max-query-tables" in e,
      f"a 65-table join is refused before planning ({e and e.splitlines()[0][:140]})")
e = error_of(bob, " UNION ALL ".join(f"SELECT {i} AS x" for i in range(1000)))
check(e is not None and "InvalidArgument" in e and "1000 SELECT and VALUES blocks" in e and "--max-query-selects" in e,
      f"a 1,000-member UNION is refused before planning ({e and e.splitlines()[0][:140]})")
# A CTE read twice by the next, sixteen deep (33 tables as written, 65,536
# scans once planning expands them), and a CASE of 25,000 branches.
ctes = ["c0 AS (SELECT 1 AS x)"] + [f"c{i} AS (SELECT a.x FROM c{i-1} a, c{i-1} b)" for i in range(1, 17)]
e = error_of(bob, "WITH " + ", ".join(ctes) + " SELECT count(*) AS n FROM c16")
check(e is not None and "InvalidArgument" in e and "--max-query-" in e,
      f"a CTE doubling sixteen deep is refused before planning ({e and e.splitlines()[0][:140]})")
e = error_of(bob, "SELECT CASE " + " ".join(f"WHEN level = {i} THEN {i}" for i in range(25000)) + " END AS x FROM log_entries")
check(e is not None and "InvalidArgument" in e and "--max-query-expressions" in e,
      f"a CASE of 25,000 branches is refused before planning ({e and e.splitlines()[0][:140]})")
union = query(bob, " UNION ALL ".join(f"SELECT {i} AS x" for i in range(200))).to_pylist()
check(sorted(r["x"] for r in union) == list(range(200)), "a 200-member UNION answers")
# What an expression allocates is not in the memory pool: a function whose
# output multiplies its input is bounded before it runs. Over a table, on
# constants, with a negative length (which DataFusion's own lpad turns into
# an unaddressable reservation) or a one-nanosecond timestamp range, each is
# refused as past the query's memory, naming the function; the service
# answers the next query.
for sql, name in [("SELECT length(repeat(msg, 100000000)) AS n FROM log_entries", "repeat()"),
                  ("SELECT length(repeat('x', 2000000000)) AS n", "repeat()"),
                  ("SELECT length(lpad(msg, CAST(level AS BIGINT) - 100)) AS n FROM log_entries", "lpad()"),
                  ("SELECT cardinality(range(TIMESTAMP '2000-01-01T00:00:00', TIMESTAMP '2001-01-01T00:00:00', "
                   "INTERVAL '1 nanosecond')) AS n", "range()")]:
    e = error_of(bob, sql)
    check(e is not None and "ResourceExhausted" in e and name in e,
          f"{name} past the query's memory is refused before it runs ({e and e.splitlines()[0][:160]})")
check(query(bob, "SELECT length(repeat(msg, 3)) AS n FROM log_entries LIMIT 1").to_pylist()[0]["n"] > 0,
      "a call of such a function within the limit answers")
# Work stops at its deadline. On the service that runs one query at a time
# for four seconds, a cross join read by a TopK (a join that makes many
# batches from each input batch, read by an operator that never waits:
# minutes of work in this build) gets DEADLINE_EXCEEDED, and the next query
# gets the only slot within its own four seconds: the aborted work yields at
# every batch, so it ended within moments of its deadline, where it used to
# run to its end holding the slot.
short = connect(E["BOB_KEY"], address=E["FLIGHT_SHORT"])
t0 = time.monotonic()
e = error_of(short, "SELECT a.msg, b.msg FROM log_entries a CROSS JOIN log_entries b "
                    "WHERE length(a.msg || b.msg || a.msg || b.msg) > 0 "
                    "ORDER BY concat(a.msg, b.msg, a.msg, b.msg, a.msg, b.msg) DESC LIMIT 1")
stopped = time.monotonic() - t0
check(e is not None and "DeadlineExceeded" in e, f"a cross join into a TopK past its 4 s deadline is stopped after {stopped:.2f} s ({e and e.splitlines()[0][:120]})")
t0 = time.monotonic()
e = error_of(short, "SELECT count(*) AS c FROM blocks")
took = time.monotonic() - t0
check(e is None, f"the next query got the only slot and answered after {took:.2f} s ({e and e.splitlines()[0][:120]})")
# An operator's batch is computed within one poll of its task, which an
# abort cannot interrupt: a median over a frame growing with each of
# 200,000 rows made one batch by unnest is minutes of work in this build.
# Past its deadline the query is stopped where the abort cannot reach: the
# aggregate's next step refuses. The service's CPU time (the kernel's
# count) over the three seconds after the answer shows whether that work
# went on (three seconds of it, with one core computing the batch) or not.
# The service is its front process and the query processes it started
# (each query runs in one of them): its CPU time is theirs together.
def service_pids(pid):
    pids = [pid]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == int(pid):
                        pids.append(entry)
            except (OSError, ValueError, IndexError):
                pass
    return pids
def cpu_seconds(pid):
    total = 0.0
    for p in service_pids(pid):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total
# The same holds for a window function evaluated row by row over a frame
# covering the whole partition (nth_value past the frame's end, with
# IGNORE NULLS, reads every row of it for each row).
for what, sql in [
    ("a growing window aggregate", "SELECT max(m) AS m FROM (SELECT median(v) OVER (ROWS UNBOUNDED PRECEDING) AS m "
                                   "FROM (SELECT unnest(range(0, 200000)) AS v))"),
    ("levenshtein over rows of a million comparisons each",
     "SELECT max(levenshtein(repeat('a', 1000), repeat('b', 1000) || CAST(value AS VARCHAR))) AS d FROM generate_series(1, 2000)"),
    ("a window function over a whole partition",
     "SELECT max(m) AS m FROM (SELECT nth_value(CASE WHEN v % 2 = 0 THEN v END, 1000000) IGNORE NULLS "
     "OVER (ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS m FROM (SELECT unnest(range(0, 200000)) AS v))"),
]:
    e = error_of(short, sql)
    cpu = cpu_seconds(E["FLIGHT_SHORT_PID"])
    time.sleep(3)
    after = cpu_seconds(E["FLIGHT_SHORT_PID"]) - cpu
    check(e is not None and "DeadlineExceeded" in e, f"{what} past its 4 s deadline is answered DEADLINE_EXCEEDED ({e and e.splitlines()[0][:120]})")
    check(after < 0.5, f"its work stopped with it: the service used {after:.2f} s of CPU in the next 3 s")
# A function whose time grows with the product of its inputs' lengths is
# bounded by that product per row, and runs in slices of rows with a check
# between them (the case above): levenshtein of two strings of 20,000
# characters (400 million comparisons, half a minute in this build) is
# refused before it runs.
e = error_of(short, "SELECT levenshtein(repeat(CAST(value AS VARCHAR), 20000), repeat('y', 20000)) AS d FROM generate_series(1, 1)")
check(e is not None and "ResourceExhausted" in e and "levenshtein() would compare" in e,
      f"levenshtein past its comparisons is refused ({e and e.splitlines()[0][:160]})")
def edit_distance(a, b):
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]
got = query(short, "SELECT levenshtein('kitten', 'sitting') AS a, levenshtein(CAST(value AS VARCHAR), '1000') AS b, "
                   "levenshtein(repeat(CAST(value AS VARCHAR), 250), repeat('99', 400)) AS c "
                   "FROM generate_series(998, 1001) ORDER BY value").to_pylist()
want = [{"a": edit_distance("kitten", "sitting"), "b": edit_distance(str(v), "1000"),
         "c": edit_distance(str(v) * 250, "99" * 400)} for v in range(998, 1002)]
check(got == want, f"levenshtein within them answers each row, over rows run in several slices: {got}")
# On that service (64 MB per query): a join of values each under the
# limit, past it together, is refused too (a 1 MB separator between 80
# values would make 80 MB).
e = error_of(short, "SELECT length(concat_ws(repeat('x', 1000000), " + ", ".join(["'a'"] * 80) + ")) AS n")
check(e is not None and "ResourceExhausted" in e and "concat_ws()" in e,
      f"concat_ws() past the query's memory is refused ({e and e.splitlines()[0][:160]})")
# A query process that stops answering (stopped here with SIGSTOP) is
# killed once its query's deadline and a grace of 5 s have passed, the
# caller told; the next query gets a new process.
query_processes = service_pids(E["FLIGHT_SHORT_PID"])[1:]
check(len(query_processes) == 1, f"the one-query service runs one query process: {query_processes}")
os.kill(int(query_processes[0]), signal.SIGSTOP)
t0 = time.monotonic()
e = error_of(short, "SELECT count(*) AS c FROM blocks")
took = time.monotonic() - t0
check(e is not None and "DeadlineExceeded" in e and "did not answer" in e and 8 < took < 20,
      f"a stopped query process is ended after the deadline and its grace ({took:.1f} s: {e and e.splitlines()[0][:160]})")
time.sleep(0.5)
check(not os.path.exists(f"/proc/{query_processes[0]}") or open(f"/proc/{query_processes[0]}/stat").read().rsplit(")", 1)[1].split()[0] == "Z",
      "the stopped query process is gone")
got = query(short, "SELECT count(*) AS c FROM blocks").to_pylist()[0]["c"]
check(got > 0, f"the next query answers from a new process ({got} blocks)")
short.close()
# What the query holds is counted at every allocation it makes, not per
# call. On a service allowing 64 MB per query: three calls of 30 MB each
# (of a value read from the lake, so that planning does not fold them),
# joined by an operator, are refused together; so is a window aggregate
# whose output grows with the square of its rows, within the batch it is
# computing (8,192 rows of string_agg make 700 MB in one batch; 20,000 rows
# of array_agg, 1.6 GB of arrays): every step of an aggregate checks what
# the query holds, so the peak resident memory of each of the service's processes (the kernel's
# count, VmHWM) grows by less than 160 MB over the two (each refused past
# 64 MB; before that check, about 790 MB for the first batch of the
# second), and the service answers the next query.
def process_peak_mb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) // 1024
    except OSError:
        return 0
# The service's peaks: each of its processes' (a query runs in one).
def peaks_mb(pid):
    return {p: process_peak_mb(p) for p in service_pids(pid)}
# How much the peak of any one of the service's processes grew since
# `before` (a process started since counts from the smallest peak before).
def peak_growth_mb(pid, before):
    now = peaks_mb(pid)
    floor = min(before.values())
    return max(v - before.get(p, floor) for p, v in now.items())
small = connect(E["BOB_KEY"], address=E["FLIGHT_SMALL"])
e = error_of(small, "SELECT length(repeat(m, 30000000) || repeat(m, 30000001) || repeat(m, 30000002)) AS n "
                    "FROM (SELECT left(max(msg), 1) AS m FROM log_entries)")
check(e is not None and "ResourceExhausted" in e and "a query may hold" in e,
      f"three calls each under the limit, past it together, are refused ({e and e.splitlines()[0][:200]})")
# `||` is an operator, not a function, but a chain of it over a batch
# grows with the statement: it is bounded as the functions are (eight
# copies of 47 MB of strings would hold 750 MB), and it answers what the
# operator answers.
chain = " || ".join(["s"] * 8)
e = error_of(small, f"SELECT sum(length({chain})) AS n FROM (SELECT repeat(CAST(value % 10 AS VARCHAR), 6000) AS s "
                    "FROM generate_series(1, 8192))")
check(e is not None and "ResourceExhausted" in e and "||" in e,
      f"a chain of || past the limit is refused ({e and e.splitlines()[0][:200]})")
got = query(small, "SELECT 'a' || CAST(NULL AS VARCHAR) AS x, 'a' || 'b' AS y, concat('a', NULL) AS z").to_pylist()
check(got == [{"x": None, "y": "ab", "z": "a"}], f"|| answers as the operator does (NULL with a NULL side): {got}")
got = query(small, "SELECT count(*) AS n, count(msg || '!') AS m, sum(CASE WHEN msg || '!' = concat(msg, '!') THEN 1 ELSE 0 END) AS same "
                   "FROM log_entries").to_pylist()[0]
check(got["n"] > 0 and got["m"] == got["same"] == got["n"], f"|| over a table column answers each row: {got}")
# A frame covering the whole partition is evaluated once and its value
# copied to every row of it (8,192 copies of 63 KB: 520 MB): the copies are
# checked before they are made. A window function copying a value of its
# frame to each row is checked at each row.
before = peaks_mb(E["FLIGHT_SMALL_PID"])
for what, refusal, sql in [
    ("a window aggregate growing past the limit within one batch is refused at a row of it", "string_agg(): the query holds",
     "SELECT sum(length(s)) AS n FROM (SELECT string_agg(repeat('x', 20), ',') OVER (ORDER BY value "
     "ROWS UNBOUNDED PRECEDING) AS s FROM generate_series(1, 8192))"),
    ("a window aggregate growing past the limit is refused at a row", "array_agg(): the query holds",
     "SELECT sum(cardinality(a)) AS n FROM (SELECT array_agg(value) OVER (ORDER BY value "
     "ROWS UNBOUNDED PRECEDING) AS a FROM generate_series(1, 20000))"),
    ("a window aggregate over a whole partition is refused before its value is copied to each row",
     "copied to the 8192 rows of its window frame",
     "SELECT sum(length(s)) AS n FROM (SELECT string_agg(repeat('x', 20), ',') OVER () AS s FROM generate_series(1, 8192))"),
    ("a window function copying a large value to each row is refused at a row", "last_value(): the query holds",
     "SELECT sum(length(x)) AS n FROM (SELECT last_value(b.s) IGNORE NULLS OVER (ORDER BY g.value ROWS UNBOUNDED PRECEDING) AS x "
     "FROM generate_series(1, 8192) g LEFT JOIN (SELECT 1 AS k, string_agg(repeat('x', 20), ',') AS s FROM generate_series(1, 3000)) b "
     "ON g.value = b.k)"),
]:
    e = error_of(small, sql)
    grown = peak_growth_mb(E["FLIGHT_SMALL_PID"], before)
    check(e is not None and "ResourceExhausted" in e and refusal in e, f"{what} ({e and e.splitlines()[0][:200]})")
    check(grown < 160, f"the peak resident memory of the service's processes grew by at most {grown} MB")
# What no check can stop in time: an operator copying one value to each
# row of a batch in one allocation (a cross join with a one-row side, a
# scalar subquery's value broadcast to every row: 8,192 copies of an
# 800 KB list, 6.5 GB). Each query runs in a process of its own, which
# ends past --query-process-mb (384 MB here): that query is answered
# RESOURCE_EXHAUSTED, the service's front does not grow, and queries
# running at the same time in other processes answer. Without query
# processes, the service itself aborted on the allocation.
front_before = process_peak_mb(E["FLIGHT_SMALL_PID"])
side_results = []
side = connect(E["ALICE_KEY"], address=E["FLIGHT_SMALL"])
side_expected = query(side, "SELECT count(*) AS c FROM blocks").to_pylist()[0]["c"]
def side_queries():
    for _ in range(6):
        try:
            side_results.append(query(side, "SELECT count(*) AS c FROM blocks").to_pylist()[0]["c"])
        except Exception as ex:  # the driver's error, as a client sees it
            side_results.append(str(ex).splitlines()[0])
    side.close()
side_thread = threading.Thread(target=side_queries)
side_thread.start()
for what, sql in [
    ("a cross join copying a list to 8,192 rows",
     "SELECT max(cardinality(t.v)) AS n FROM (SELECT range(0, 100000) AS v) t CROSS JOIN generate_series(1, 8192) g"),
    ("a scalar subquery's list broadcast to 8,192 rows",
     "SELECT max(cardinality(v)) AS n FROM (SELECT (SELECT range(0, 100000)) AS v FROM generate_series(1, 8192))"),
]:
    e = error_of(small, sql)
    check(e is not None and "ResourceExhausted" in e and "its process may hold" in e,
          f"{what} ends its query's process, answered RESOURCE_EXHAUSTED ({e and e.splitlines()[0][:220]})")
side_thread.join()
check(side_expected > 0 and side_results == [side_expected] * 6,
      f"queries of another caller running meanwhile answered, each {side_expected}: {side_results}")
front_after = process_peak_mb(E["FLIGHT_SMALL_PID"])
check(front_after - front_before < 50, f"the service's front grew by {front_after - front_before} MB ({front_before} to {front_after} MB)")
# Planning folds constant expressions: a 60 MB constant is copied several
# times while a statement is planned (GetFlightInfo), so planning runs in a
# query process too, and the front does not grow.
small_client = fl.FlightClient(E["FLIGHT_SMALL"])
small_options = fl.FlightCallOptions(headers=[(b"authorization", f"Bearer {E['BOB_KEY']}".encode())])
front_before = process_peak_mb(E["FLIGHT_SMALL_PID"])
outcomes = []
for _ in range(3):
    try:
        small_client.get_flight_info(fl.FlightDescriptor.for_command(statement_command("SELECT repeat('x', 60000000) AS s")), small_options)
        outcomes.append("planned")
    except (fl.FlightError, pa.ArrowException) as ex:  # pyarrow's errors for a gRPC status
        outcomes.append(str(ex).splitlines()[0][:160])
front_after = process_peak_mb(E["FLIGHT_SMALL_PID"])
check(front_after - front_before < 50 and all(o == "planned" or "memory" in o for o in outcomes),
      f"planning a 60 MB constant three times leaves the front's peak at +{front_after - front_before} MB ({outcomes})")
small_client.close()
got = query(small, "SELECT max(cardinality(t.v)) AS n, count(*) AS c FROM (SELECT range(0, 100000) AS v) t CROSS JOIN generate_series(1, 20) g").to_pylist()
check(got == [{"n": 100000, "c": 20}], f"the same copies under the limit answer in a new process: {got}")
# Those copies are estimated by what one value takes in an array (8 bytes
# for a sum), so a small value over a large partition is not refused.
got = query(small, "SELECT max(s) AS s, max(n) AS n, max(c) AS c FROM (SELECT sum(value) OVER () AS s, count(*) OVER () AS n, "
                   "cardinality(array_agg(value) OVER ()) AS c FROM generate_series(1, 1500) UNION ALL "
                   "SELECT sum(value) OVER (), count(*) OVER (), 0 FROM generate_series(1, 1000000))").to_pylist()
check(got == [{"s": 500000500000, "n": 1000000, "c": 1500}], f"small values over whole partitions answer: {got}")
# A panic in the query engine ends the answer with an error, never with a
# shorter answer: a GROUPS frame whose offsets overflow panics in
# DataFusion 55 (this suite's debug build checks the addition), after a
# first batch of the UNION ALL has been sent.
e = error_of(small, "SELECT CAST(value AS BIGINT) AS x FROM generate_series(1, 50000) UNION ALL "
                    "SELECT sum(v) OVER (ORDER BY v GROUPS BETWEEN 18446744073709551615 PRECEDING AND 18446744073709551615 FOLLOWING) "
                    "FROM (VALUES (1), (2)) t(v)")
check(e is not None and "panicked" in e, f"a panic in the query's work is an error to the client ({e and e.splitlines()[0][:200]})")
check(query(small, "SELECT count(*) AS c FROM blocks").to_pylist()[0]["c"] > 0, "the service answers the next query")
small.close()
# Announced and streamed schemas agree (ADBC compares them).
check(query(bob, "SELECT abs(1) AS n, length('abc') AS l").to_pylist() == [{"n": 1, "l": 3}], "a non-null expression's schema matches its stream")
corr = query(bob, "SELECT (SELECT count(*) FROM blocks b WHERE b.process_id = p.process_id) AS n FROM (SELECT 'x' AS process_id) p").to_pylist()
check(corr == [{"n": 0}], "a correlated scalar subquery's schema matches its stream")

# A prepared statement (ADBC prepares it on the server) answers the same.
with alice.cursor() as cur:
    cur.adbc_prepare("SELECT sum(n) AS s FROM log_counts")
    cur.execute("SELECT sum(n) AS s FROM log_counts")
    s = cur.fetch_arrow_table().to_pylist()[0]["s"]
check(s == sum(r[-1] for r in normalize(oracle_log_counts(ALICE))), "a prepared statement is filtered like a statement")

# --- Metadata ---------------------------------------------------------------
objects = alice.adbc_get_objects(depth="all").read_all().to_pylist()
tables = {t["table_name"]: [c["column_name"] for c in t["table_columns"]]
          for cat in objects for s in cat["catalog_db_schemas"] for t in s["db_schema_tables"]}
check(tables.get("log_counts") == ["hour", "process_id", "level", "audience", "n"] and "log_entries" in tables,
      f"GetTables lists the views and sources with their columns ({len(tables)} tables)")
schema = alice.adbc_get_table_schema("log_counts")
check(schema.names == ["hour", "process_id", "level", "audience", "n"], f"the table schema of log_counts: {schema}")
info = alice.adbc_get_info()
check(info.get("vendor_name") == "micromegas-views-flight", f"GetSqlInfo names the server: {info.get('vendor_name')}")

# --- The deny list ---------------------------------------------------------
offender = "SELECT level, sum(n) AS n FROM log_counts GROUP BY level"
h = psql(f"SELECT micromegas.mm_sql_hash($q${offender}$q$)")
rule = query(admin, f"SELECT * FROM deny_queries('sql_hash = ''{h}'' AND client = ''notebook-tests''', 'too slow for a notebook')").to_pylist()
rule_id = psql("SELECT rule_id FROM micromegas.query_deny_list ORDER BY created_at DESC LIMIT 1")
time.sleep(0.2)
e = error_of(alice, offender.replace("GROUP BY", "  group by"))
check(e is not None and "ResourceExhausted" in e and f"query denied by rule {rule_id}: too slow for a notebook" in e,
      f"a query matching a rule by its hash (spaced and cased otherwise) is RESOURCE_EXHAUSTED naming the rule")
check(error_of(bob, offender) is None, "the same query from another client is not denied")
time.sleep(0.5)
hits = query(admin, "SELECT rule_id, last_hit_at FROM list_query_denials()").to_pylist()
check(any(r["rule_id"] == rule_id and r["last_hit_at"] is not None for r in hits), "the hit shows in list_query_denials()")
# A rule that refuses everything: an admin's recovery statements still pass.
query(admin, "SELECT * FROM deny_queries('sql IS NOT NULL', 'everything')")
time.sleep(0.2)
check(error_of(admin, "SELECT 1") is not None, "a rule matching every query denies an admin's query too")
listed = query(admin, "SELECT rule_id, reason FROM list_query_denials()").to_pylist()
for r in listed:
    query(admin, f"SELECT * FROM remove_query_denial('{r['rule_id']}')")
time.sleep(0.2)
check(error_of(alice, "SELECT count(*) FROM log_counts") is None and len(listed) == 2,
      "an admin lists and removes the rules while every query is denied")

# --- The catalog from a hot standby ------------------------------------------
# A service reading its catalog from a standby (--catalog-dsn, polled every
# second) answers as the primary's does, and its DDL goes to the primary: the
# new view is queryable through it as soon as the standby has replayed it.
on_standby_bob = connect(E["BOB_KEY"], address=E["FLIGHT_STANDBY"])
on_standby_admin = connect(E["ADMIN_KEY"], address=E["FLIGHT_STANDBY"])
# The rules removed above reach it within a poll and the replay lag.
t0 = time.monotonic()
while error_of(on_standby_bob, "SELECT 1 AS one") is not None and time.monotonic() - t0 < 5:
    time.sleep(0.1)
check(error_of(on_standby_bob, "SELECT 1 AS one") is None,
      f"the removed rules stopped denying through the standby's service after {time.monotonic() - t0:.2f} s")
same = "SELECT process_id, level, sum(n) AS n FROM log_counts GROUP BY 1, 2"
check(normalize(query(on_standby_bob, same)) == normalize(query(bob, same)),
      "bob's rows through the service reading the standby equal those through the primary's")
t0 = time.monotonic()
made = query(on_standby_admin, LOG_COUNTS.replace("log_counts", "standby_counts").replace("3100", "3200")).to_pylist()
check(made == [{"view_set_name": "standby_counts", "status": "created"}] and
      psql("SELECT count(*) FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'standby_counts'") == "1",
      f"an admin's CREATE through the service reading the standby is written on the primary: {made}")
seen = None
while time.monotonic() - t0 < 10:
    if error_of(on_standby_bob, "SELECT * FROM standby_counts LIMIT 0") is None:
        seen = time.monotonic() - t0
        break
    time.sleep(0.05)
check(seen is not None and seen < 5, f"the new view is queryable through the standby's catalog after {seen and round(seen * 1000)} ms")
query(admin, "DROP MATERIALIZED VIEW standby_counts")
on_standby_bob.close()
on_standby_admin.close()

# --- Live: a replace is visible within a second -----------------------------
replaced = LOG_COUNTS.replace("CREATE MATERIALIZED VIEW", "CREATE OR REPLACE MATERIALIZED VIEW") \
    .replace("count(*) AS n\n", "count(*) AS n, max(time) AS last_time\n") \
    .replace("sum(n) AS n FROM {source}", "sum(n) AS n, max(last_time) AS last_time FROM {source}")
psql(f"SELECT status FROM micromegas.mm_create_view($r${replaced}$r$)")
t0 = time.monotonic()
elapsed = None
while time.monotonic() - t0 < 5:
    if query(alice, "SELECT * FROM log_counts LIMIT 0").schema.names[-1] == "last_time":
        elapsed = time.monotonic() - t0
        break
    time.sleep(0.01)
check(elapsed is not None and elapsed < 1.0, f"a replace committed in Postgres is queryable through FlightSQL after {elapsed and round(elapsed * 1000)} ms")
check(query(alice, "SELECT count(*) AS c FROM log_counts").to_pylist()[0]["c"] == 0,
      "after a replace that changes the schema, the old partitions are not read")
dropped = query(admin, "DROP MATERIALIZED VIEW log_counts").to_pylist()
check(dropped == [{"view_set_name": "log_counts", "status": "dropped"}], f"an admin's DROP answers one row: {dropped}")
e = error_of(alice, "SELECT * FROM log_counts")
check(e is not None and "not found" in e, "a dropped view is gone at once")

for c in (admin, alice, bob, bad):
    c.close()
print(f"flight: {'passed' if not failures else f'{len(failures)} check(s) failed'}")
sys.exit(1 if failures else 0)
