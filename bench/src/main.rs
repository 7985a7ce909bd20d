//! The benchmark table of scripts/bench.sh: each figure beside a native
//! PostgreSQL baseline measured in the same run, and their ratio.
//!   MMV_DSN="host=… port=… user=postgres dbname=mmv_bench" cargo run --release --example bench
use micromegas_views_client::{Config, Watcher};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::{AsyncMessage, Client, NoTls};

const LOG_STATS_LIKE: &str = "CREATE {or_replace}MATERIALIZED VIEW {name} WITH (
  extract_query = $q$SELECT date_bin('1 minute', time) AS time_bin, process_id, level, target, count(*) AS count,
      arrow_cast(max(audience), 'Dictionary(Int32, Utf8)') AS audience
    FROM log_entries WHERE insert_time >= '{begin}' AND insert_time < '{end}'
    GROUP BY process_id, level, target, time_bin$q$,
  count_src_query = $q$SELECT sum(nb_objects) AS count FROM blocks
    WHERE array_has(\"streams.tags\", 'log') AND insert_time >= '{begin}' AND insert_time < '{end}'$q$,
  merge_partitions_query = $q$SELECT time_bin, process_id, level, target, sum(count) AS count, audience
    FROM {source} GROUP BY process_id, level, target, time_bin, audience$q$,
  update_group = 3000, time_column = 'time_bin', merge_sort_order = 'time_bin, process_id, level, target')";

const NATIVE_QUERY: &str =
    "SELECT date_trunc('minute', time) AS time_bin, process_id, level, target, count(*) AS count,
      max(audience) AS audience FROM bench_log_entries
    WHERE insert_time >= '2024-01-01' AND insert_time < '2024-01-02'
    GROUP BY process_id, level, target, time_bin";

fn definition(name: &str, or_replace: bool) -> String {
    LOG_STATS_LIKE
        .replace("{or_replace}", if or_replace { "OR REPLACE " } else { "" })
        .replace("{name}", name)
}

/// The same view with a query changed (a filter; the schema stays): a
/// replace by it is planned, where one by what the row stores is not.
fn changed_definition(name: &str) -> String {
    let changed = definition(name, true)
        .replace("FROM log_entries WHERE", "FROM log_entries WHERE level <= 6 AND");
    assert_ne!(changed, definition(name, true));
    changed
}

async fn connect(dsn: &str) -> Client {
    micromegas_views_client::connect(dsn)
        .await
        .expect("connect")
}

fn percentile(samples: &mut [Duration], p: f64) -> f64 {
    samples.sort();
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i].as_secs_f64() * 1000.0
}

struct Row {
    what: String,
    figure: f64,
    baseline_what: String,
    baseline: f64,
    unit: &'static str,
}

async fn time_each(client: &Client, statements: &[String]) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(statements.len());
    for s in statements {
        let start = Instant::now();
        client
            .batch_execute(s)
            .await
            .unwrap_or_else(|e| panic!("{s}: {e}"));
        samples.push(start.elapsed());
    }
    samples
}

/// A field of /proc/PID/status in KiB: `VmRSS:` (all resident pages) or
/// `RssAnon:` (private anonymous memory; the rest is shared, clean file pages
/// of the mapped libraries).
fn status_kib(pid: i32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with(field)).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<f64>().ok())
            })
        })
        .unwrap_or(f64::NAN)
}

/// Carries MiB in a Duration so that `percentile` serves memory too.
fn mib(kib: f64) -> Duration {
    Duration::from_secs_f64((kib / 1024.0 / 1000.0).max(0.0))
}

async fn fill(client: &Client, total: i64) {
    client
        .batch_execute(&format!(
            "{} ANALYZE micromegas.lakehouse_view_set_definitions;",
            copies_of_log_stats("filler", 1, total)
        ))
        .await
        .unwrap();
}

/// SQL replacing the definitions `<prefix>_<first>` … `<prefix>_<last>` by
/// copies of the validated log_stats row, written with the triggers off
/// (superuser), so that thousands of rows take seconds.
fn copies_of_log_stats(prefix: &str, first: i64, last: i64) -> String {
    format!(
        "SET session_replication_role = replica;
         DELETE FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name LIKE '{prefix}\\_%';
         INSERT INTO micromegas.lakehouse_view_set_definitions
         SELECT '{prefix}_' || i, d.definition_sql, d.extract_query, d.count_src_query, d.merge_partitions_query,
                d.update_group, d.view_options, d.schema_ipc, d.schema_json, d.schema_hash, d.reads,
                d.created_at, d.updated_at, d.updated_by, d.load_status, d.load_error
           FROM micromegas.lakehouse_view_set_definitions d, generate_series({first}, {last}) i
          WHERE d.view_set_name = 'log_stats';
         SET session_replication_role = origin;"
    )
}

fn hub(or_replace: bool, extra: &str) -> String {
    format!(
        "CREATE {}MATERIALIZED VIEW hub WITH (extract_query = 'SELECT time, process_id, level{extra} FROM log_entries',
         count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{{begin}}'' AND insert_time < ''{{end}}''',
         merge_partitions_query = 'SELECT time, process_id, level{extra} FROM {{source}}', update_group = 4000, time_column = 'time')",
        if or_replace { "OR REPLACE " } else { "" }
    )
}

fn spoke(i: usize) -> String {
    format!(
        "CREATE MATERIALIZED VIEW spoke_{i} WITH (extract_query = 'SELECT time, process_id, level FROM hub WHERE level < {i}',
         count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{{begin}}'' AND insert_time < ''{{end}}''',
         merge_partitions_query = 'SELECT time, process_id, level FROM {{source}}', update_group = 5000, time_column = 'time')"
    )
}

/// REPLACE of a view with 3 dependents (schema changes, they are re-checked),
/// and DROP of a leaf view, with `total` unrelated definitions stored.
async fn dependents_at(client: &Client, total: i64, rounds: usize) -> (f64, f64) {
    fill(client, total).await;
    client.batch_execute("DELETE FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name LIKE 'spoke\\_%' OR view_set_name IN ('hub', 'leaf')").await.unwrap();
    client
        .query("SELECT micromegas.mm_create_view($1)", &[&hub(false, "")])
        .await
        .unwrap();
    for i in 1..=3 {
        client
            .query("SELECT micromegas.mm_create_view($1)", &[&spoke(i)])
            .await
            .unwrap();
    }
    let mut replace = Vec::new();
    let mut drop = Vec::new();
    for r in 0..rounds {
        let extra = if r % 2 == 0 { ", target" } else { "" };
        let start = Instant::now();
        client
            .query("SELECT micromegas.mm_create_view($1)", &[&hub(true, extra)])
            .await
            .unwrap();
        replace.push(start.elapsed());
        client
            .query(
                "SELECT micromegas.mm_create_view($1)",
                &[&definition("leaf", true)],
            )
            .await
            .unwrap();
        let start = Instant::now();
        client
            .query("SELECT micromegas.mm_drop_view('leaf')", &[])
            .await
            .unwrap();
        drop.push(start.elapsed());
    }
    (percentile(&mut replace, 0.5), percentile(&mut drop, 0.5))
}

async fn snapshot_read(client: &Client, rounds: usize) -> (f64, f64) {
    let mut snapshot = Vec::new();
    let mut bare = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        client
            .query("SELECT * FROM micromegas.mm_view_set_snapshot()", &[])
            .await
            .unwrap();
        snapshot.push(start.elapsed());
        let start = Instant::now();
        client
            .query(
                "SELECT * FROM micromegas.lakehouse_view_set_definitions",
                &[],
            )
            .await
            .unwrap();
        bare.push(start.elapsed());
    }
    (percentile(&mut snapshot, 0.5), percentile(&mut bare, 0.5))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dsn = std::env::var("MMV_DSN").expect("MMV_DSN");
    let env = |name: &str, default: usize| -> usize {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let rounds = env("MMV_BENCH_ROUNDS", 100);
    // Every figure is measured in this many repetitions of the whole run;
    // within each, the extension and its native baseline alternate.
    let repeats = env("MMV_BENCH_REPEATS", 3).max(3);
    let mut runs: Vec<Vec<Row>> = Vec::new();
    // MMV_BENCH_ONLY=create, first, deny, jobs or partitions: the
    // definition writes' rows, the first call's, the deny list's, the job
    // queue's, or the partition store's, alone.
    let only = std::env::var("MMV_BENCH_ONLY").ok();
    for _ in 0..repeats {
        match only.as_deref() {
            Some("partitions") => runs.push(Vec::new()),
            Some("deny") => runs.push(deny_rows(&connect(&dsn).await, rounds).await),
            Some("jobs") => runs.push(job_rows(&dsn, rounds).await),
            Some("create") => {
                let client = connect(&dsn).await;
                reset_for_creates(&client).await;
                runs.push(create_rows(&client, rounds).await)
            }
            Some("first") => {
                let client = connect(&dsn).await;
                reset_for_creates(&client).await;
                runs.push(first_call_rows(&dsn, &client).await)
            }
            Some(other) => panic!("MMV_BENCH_ONLY is create, first, deny, jobs or partitions, not {other}"),
            None => runs.push(one_run(&dsn, rounds).await),
        }
    }
    // The partition rows come after, so that their 1,000 view sets are not
    // among the definitions the rows above count.
    let partitions = env("MMV_BENCH_PARTITIONS", 1_000_000) as i64;
    if only.is_none() || only.as_deref() == Some("partitions") {
        fill_partitions(&connect(&dsn).await, partitions).await;
        for (repeat, rows) in runs.iter_mut().enumerate() {
            rows.extend(partition_rows(&dsn, rounds, repeat, partitions).await);
            if only.is_none() {
                rows.extend(job_rows(&dsn, rounds).await);
            }
        }
    }
    println!(
        "| measurement | figure | native baseline | baseline | ratio (median of {repeats}) | ratio spread (min – max) |"
    );
    println!("|---|---:|---|---:|---:|---:|");
    for i in 0..runs[0].len() {
        let first = &runs[0][i];
        let mut figures: Vec<f64> = runs.iter().map(|r| r[i].figure).collect();
        let mut baselines: Vec<f64> = runs.iter().map(|r| r[i].baseline).collect();
        let mut ratios: Vec<f64> = runs.iter().map(|r| r[i].figure / r[i].baseline).collect();
        let (low, high) = ratios
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
        let (ratio, spread) = if ratios.iter().all(|r| r.is_finite()) {
            (
                format!("{:.2}x", median(&mut ratios)),
                format!("{low:.2}x – {high:.2}x"),
            )
        } else {
            ("–".to_string(), "–".to_string()) // a zero baseline
        };
        println!(
            "| {} | {:.2} {} | {} | {:.2} {} | {ratio} | {spread} |",
            first.what,
            median(&mut figures),
            first.unit,
            first.baseline_what,
            median(&mut baselines),
            first.unit,
        );
    }
}

/// The tables and clean slate every CREATE row starts from.
async fn reset_for_creates(client: &Client) {
    // Each repetition starts from the same table: the previous one's 10,000
    // filler rows are dead tuples until vacuumed.
    client
        .batch_execute("VACUUM (ANALYZE) micromegas.lakehouse_view_set_definitions")
        .await
        .unwrap();
    client
        .batch_execute(
            "DROP VIEW IF EXISTS bench_native_view; DROP TABLE IF EXISTS bench_log_entries, bench_blocks;
             CREATE TABLE bench_log_entries (process_id text, stream_id text, block_id text, insert_time timestamptz,
               exe text, username text, computer text, time timestamptz, target text, level int, msg text,
               properties jsonb, process_properties jsonb, audience text);
             CREATE TABLE bench_blocks (block_id text, nb_objects int, insert_time timestamptz, tags text[]);
             CREATE FUNCTION pg_temp.bench_plain() RETURNS int LANGUAGE sql AS 'SELECT 1';
             DELETE FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name LIKE 'bench\\_%' OR view_set_name LIKE 'filler\\_%';",
        )
        .await
        .unwrap();
}

/// Section 1: CREATE / REPLACE / DROP and the validation alone, each beside
/// its native baseline (`MMV_BENCH_ONLY=create` runs just these).
async fn create_rows(client: &Client, rounds: usize) -> Vec<Row> {
    let mut rows = Vec::new();
    // 1. CREATE / REPLACE / DROP against native views.
    let names: Vec<String> = (0..rounds).map(|i| format!("bench_{i}")).collect();
    let creates: Vec<String> = names
        .iter()
        .map(|n| {
            format!(
                "SELECT micromegas.mm_create_view($mm${}$mm$)",
                definition(n, false)
            )
        })
        .collect();
    let replaces: Vec<String> = names
        .iter()
        .map(|n| {
            format!(
                "SELECT micromegas.mm_create_view($mm${}$mm$)",
                definition(n, true)
            )
        })
        .collect();
    // A replace that changes a query: planned again, where a replace of
    // what the row stores is not (0.1.9).
    let changed_replaces: Vec<String> = names
        .iter()
        .map(|n| {
            format!(
                "SELECT micromegas.mm_create_view($mm${}$mm$)",
                changed_definition(n)
            )
        })
        .collect();
    let drops: Vec<String> = names
        .iter()
        .map(|n| format!("SELECT micromegas.mm_drop_view('{n}')"))
        .collect();
    let native_creates: Vec<String> = names
        .iter()
        .map(|n| format!("CREATE VIEW native_{n} AS {NATIVE_QUERY}"))
        .collect();
    let native_replaces: Vec<String> = names
        .iter()
        .map(|n| format!("CREATE OR REPLACE VIEW native_{n} AS {NATIVE_QUERY}"))
        .collect();
    let native_drops: Vec<String> = names
        .iter()
        .map(|n| format!("DROP VIEW native_{n}"))
        .collect();
    for (what, ours, native, native_what) in [
        (
            "mm_create_view (CREATE)",
            &creates,
            &native_creates,
            "CREATE VIEW",
        ),
        (
            "mm_create_view (REPLACE, the same definition)",
            &replaces,
            &native_replaces,
            "CREATE OR REPLACE VIEW",
        ),
        (
            "mm_create_view (REPLACE, a query changed)",
            &changed_replaces,
            &native_replaces,
            "CREATE OR REPLACE VIEW",
        ),
        ("mm_drop_view", &drops, &native_drops, "DROP VIEW"),
    ] {
        let mut a = time_each(client, ours).await;
        let mut b = time_each(client, native).await;
        for (p, label) in [(0.5, "p50"), (0.99, "p99")] {
            rows.push(Row {
                what: format!("{what} {label}"),
                figure: percentile(&mut a, p),
                baseline_what: format!("{native_what} {label}"),
                baseline: percentile(&mut b, p),
                unit: "ms",
            });
        }
    }

    // 1b. The validation alone (what a CREATE does before it writes): the
    // row's derivation, catalog look-up, planning and checks of a new name,
    // nothing written; beside CREATE VIEW (whose views are dropped after).
    let validations: Vec<String> = names
        .iter()
        .map(|n| {
            format!(
                "SELECT count(*) FROM micromegas._mm_prepare_definition(NULL, $mm${}$mm$, NULL, NULL, NULL, NULL, NULL, false)",
                definition(&format!("{n}_v"), false)
            )
        })
        .collect();
    let mut a = time_each(client, &validations).await;
    let mut b = time_each(client, &native_creates).await;
    time_each(client, &native_drops).await;
    rows.push(Row {
        what: "validation alone (_mm_prepare_definition, nothing written) p50".into(),
        figure: percentile(&mut a, 0.5),
        baseline_what: "CREATE VIEW p50".into(),
        baseline: percentile(&mut b, 0.5),
        unit: "ms",
    });

    rows
}

/// One full run of every measurement: each row holds the extension's figure
/// and its native baseline, measured one after the other.
async fn one_run(dsn: &str, rounds: usize) -> Vec<Row> {
    let dsn = dsn.to_string();
    let client = connect(&dsn).await;
    reset_for_creates(&client).await;
    let mut rows = create_rows(&client, rounds).await;
    rows.extend(first_call_rows(&dsn, &client).await);

    // 3. REPLACE with 3 dependents, DROP of a leaf: 10 vs 1,000 vs 10,000 definitions.
    let dep_rounds = (rounds / 2).max(10);
    rows.extend(rest_of_run(&dsn, &client, rounds, dep_rounds).await);
    rows
}

/// First call in a fresh connection, and the backend's RSS: five fresh
/// connections each way, the extension's first dry run beside a first plain
/// SQL function call.
async fn first_call_rows(dsn: &str, client: &Client) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut first = Vec::new();
    let mut first_plain = Vec::new();
    let mut growth = Vec::new();
    let mut growth_plain = Vec::new();
    let mut private = Vec::new();
    let mut private_plain = Vec::new();
    let mut file = Vec::new();
    let mut file_plain = Vec::new();
    let mut shmem = Vec::new();
    let mut shmem_plain = Vec::new();
    let explain = format!(
        "SELECT * FROM micromegas.mm_explain_view($mm${}$mm$)",
        definition("bench_first", false)
    );
    for _ in 0..5 {
        let c = connect(&dsn).await;
        let pid: i32 = c
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        let (before, before_private) = (status_kib(pid, "VmRSS:"), status_kib(pid, "RssAnon:"));
        let (before_file, before_shmem) =
            (status_kib(pid, "RssFile:"), status_kib(pid, "RssShmem:"));
        let start = Instant::now();
        c.batch_execute(&explain).await.unwrap();
        first.push(start.elapsed());
        growth.push(mib(status_kib(pid, "VmRSS:") - before));
        private.push(mib(status_kib(pid, "RssAnon:") - before_private));
        file.push(mib(status_kib(pid, "RssFile:") - before_file));
        shmem.push(mib(status_kib(pid, "RssShmem:") - before_shmem));
        let c = connect(&dsn).await;
        c.batch_execute(
            "CREATE FUNCTION pg_temp.bench_plain() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        )
        .await
        .unwrap();
        let pid: i32 = c
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        let (before, before_private) = (status_kib(pid, "VmRSS:"), status_kib(pid, "RssAnon:"));
        let (before_file, before_shmem) =
            (status_kib(pid, "RssFile:"), status_kib(pid, "RssShmem:"));
        let start = Instant::now();
        c.batch_execute("SELECT pg_temp.bench_plain()")
            .await
            .unwrap();
        first_plain.push(start.elapsed());
        growth_plain.push(mib(status_kib(pid, "VmRSS:") - before));
        private_plain.push(mib(status_kib(pid, "RssAnon:") - before_private));
        file_plain.push(mib(status_kib(pid, "RssFile:") - before_file));
        shmem_plain.push(mib(status_kib(pid, "RssShmem:") - before_shmem));
    }
    let mut steady = Vec::new();
    for _ in 0..20 {
        let start = Instant::now();
        client.batch_execute(&explain).await.unwrap();
        steady.push(start.elapsed());
    }
    let first_ms = percentile(&mut first, 0.5);
    let steady_ms = percentile(&mut steady, 0.5);
    rows.push(Row {
        what: "first mm_explain_view in a fresh connection".into(),
        figure: first_ms,
        baseline_what: "first plain SQL function call".into(),
        baseline: percentile(&mut first_plain, 0.5),
        unit: "ms",
    });
    rows.push(Row {
        what: "first-call overhead (first - steady state)".into(),
        figure: first_ms - steady_ms,
        baseline_what: "steady-state mm_explain_view".into(),
        baseline: steady_ms,
        unit: "ms",
    });
    rows.push(Row {
        what: "backend RSS growth, first call (VmRSS)".into(),
        figure: percentile(&mut growth, 0.5),
        baseline_what: "RSS growth, plain SQL function".into(),
        baseline: percentile(&mut growth_plain, 0.5),
        unit: "MiB",
    });
    rows.push(Row {
        what: "of which private memory (RssAnon)".into(),
        figure: percentile(&mut private, 0.5),
        baseline_what: "RssAnon growth, plain SQL function".into(),
        baseline: percentile(&mut private_plain, 0.5),
        unit: "MiB",
    });
    rows.push(Row {
        what: "of which mapped files, the library (RssFile)".into(),
        figure: percentile(&mut file, 0.5),
        baseline_what: "RssFile growth, plain SQL function".into(),
        baseline: percentile(&mut file_plain, 0.5),
        unit: "MiB",
    });
    rows.push(Row {
        what: "of which shared memory, buffers (RssShmem)".into(),
        figure: percentile(&mut shmem, 0.5),
        baseline_what: "RssShmem growth, plain SQL function".into(),
        baseline: percentile(&mut shmem_plain, 0.5),
        unit: "MiB",
    });
    rows
}

/// The rows of a full run after the first call's.
async fn rest_of_run(dsn: &str, client: &Client, rounds: usize, dep_rounds: usize) -> Vec<Row> {
    let dsn = dsn.to_string();
    let mut rows = Vec::new();
    let (replace10, drop10) = dependents_at(&client, 10, dep_rounds).await;
    for total in [1_000i64, 10_000] {
        let (replace, drop) = dependents_at(&client, total, dep_rounds).await;
        rows.push(Row {
            what: format!("REPLACE with 3 dependents, {total} defs p50"),
            figure: replace,
            baseline_what: "same at 10 defs".into(),
            baseline: replace10,
            unit: "ms",
        });
        rows.push(Row {
            what: format!("DROP, {total} defs p50"),
            figure: drop,
            baseline_what: "same at 10 defs".into(),
            baseline: drop10,
            unit: "ms",
        });
    }

    // 4. The snapshot read vs a bare SELECT * of the table, at 10 and 10,000.
    for total in [10i64, 10_000] {
        fill(&client, total).await;
        let (snapshot, bare) = snapshot_read(&client, rounds.min(50)).await;
        rows.push(Row {
            what: format!("mm_view_set_snapshot(), {total} defs p50"),
            figure: snapshot,
            baseline_what: "SELECT * FROM the table".into(),
            baseline: bare,
            unit: "ms",
        });
    }
    fill(&client, 0).await;

    // 5. Commit-to-client delivery vs a bare NOTIFY round trip.
    let (listener, mut connection) = tokio_postgres::connect(&dsn, NoTls).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        use futures_util::StreamExt;
        let mut stream = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(m)) = stream.next().await {
            if let AsyncMessage::Notification(n) = m {
                let _ = tx.send(n.channel().to_string());
            }
        }
    });
    listener
        .batch_execute("LISTEN bench_channel")
        .await
        .unwrap();
    let mut bare = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        client.batch_execute("NOTIFY bench_channel").await.unwrap();
        rx.recv().await.unwrap();
        bare.push(start.elapsed());
    }
    let mut config = Config::new(dsn.clone());
    config.poll_interval = Duration::from_secs(3600);
    let watcher = Watcher::spawn(config);
    watcher.wait_for_version(1).await;
    let mut delivery = Vec::new();
    // Each replace changes a query (and back), so each is planned.
    for i in 0..rounds {
        let statement = match i {
            0 => definition("bench_delivery", false),
            i if i % 2 == 1 => changed_definition("bench_delivery"),
            _ => definition("bench_delivery", true),
        };
        let start = Instant::now();
        let version: i64 = client
            .query_one(
                "SELECT version FROM micromegas.mm_create_view($1)",
                &[&statement],
            )
            .await
            .unwrap()
            .get(0);
        watcher.wait_for_version(version).await;
        delivery.push(start.elapsed());
    }
    client
        .batch_execute("SELECT micromegas.mm_drop_view('bench_delivery')")
        .await
        .unwrap();
    for (p, label) in [(0.5, "p50"), (0.99, "p99")] {
        rows.push(Row {
            what: format!("CREATE OR REPLACE to Watcher snapshot {label}"),
            figure: percentile(&mut delivery, p),
            baseline_what: format!("bare NOTIFY round trip {label}"),
            baseline: percentile(&mut bare, p),
            unit: "ms",
        });
    }

    rows.extend(deny_rows(&client, rounds).await);

    client
        .batch_execute(
            "DROP TABLE IF EXISTS bench_log_entries, bench_blocks;
             DELETE FROM micromegas.query_deny_list;
             DELETE FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name LIKE 'spoke\\_%' OR view_set_name IN ('hub', 'leaf');",
        )
        .await
        .unwrap();
    rows
}

/// The partition store at scale: `total` partitions over 1,000 view sets
/// (pbench_0 … pbench_999, each an hour long, 1 in 100 of an old schema),
/// and a copy of the table with no constraint and one btree index (the
/// baselines' table), filled with the same rows.
async fn fill_partitions(client: &Client, total: i64) {
    let per_view = (total / 1000).max(1);
    let start = Instant::now();
    client
        .batch_execute(&format!(
            "{}
             DELETE FROM micromegas.lakehouse_partitions WHERE view_set_name LIKE 'pbench\\_%';
             INSERT INTO micromegas.lakehouse_partitions
             SELECT 'pbench_' || v, 'global', '2020-01-01'::timestamptz + k * interval '1 hour',
                    '2020-01-01'::timestamptz + (k + 1) * interval '1 hour', NULL, NULL, now(),
                    format('s3://bench/pbench_%s/%s.parquet', v, k), 1000,
                    CASE WHEN k % 100 = 0 THEN '\\x01'::bytea ELSE h.schema_hash END, NULL, 10, 1, NULL, NULL
               FROM generate_series(0, 999) v, generate_series(0, {per_view} - 1) k,
                    (SELECT schema_hash FROM micromegas.lakehouse_view_set_definitions
                      WHERE view_set_name = 'log_stats') h;
             DROP TABLE IF EXISTS bench_partitions_copy;
             CREATE TABLE bench_partitions_copy (LIKE micromegas.lakehouse_partitions INCLUDING DEFAULTS);
             INSERT INTO bench_partitions_copy SELECT * FROM micromegas.lakehouse_partitions;
             CREATE INDEX ON bench_partitions_copy (view_set_name, view_instance_id, begin_insert_time);",
            copies_of_log_stats("pbench", 0, 999)
        ))
        .await
        .unwrap();
    client
        .batch_execute("VACUUM (ANALYZE) micromegas.lakehouse_partitions, bench_partitions_copy")
        .await
        .unwrap();
    eprintln!(
        "bench: {} partitions over 1000 view sets written in {:.0} s",
        per_view * 1000,
        start.elapsed().as_secs_f64()
    );
}

/// Writing and retiring single partitions against their bare-SQL
/// equivalents on the constraint-free copy, and the incompatible-partition
/// listing against the join it stands for, with `total` partitions stored.
async fn partition_rows(dsn: &str, rounds: usize, repeat: usize, total: i64) -> Vec<Row> {
    let client = connect(dsn).await;
    let count = |n: i64| {
        if n >= 1_000_000 && n % 1_000_000 == 0 {
            format!("{}M", n / 1_000_000)
        } else {
            n.to_string()
        }
    };
    let scale = count(total);
    // New hours after the stored ones, distinct for every repetition.
    let hours: Vec<i64> = (0..rounds as i64)
        .map(|i| 1_000_000 + (repeat as i64) * 10_000 + i)
        .collect();
    let at = |h: i64| format!("'2020-01-01'::timestamptz + {h} * interval '1 hour'");
    let writes: Vec<String> = hours
        .iter()
        .map(|&h| {
            format!(
                "SELECT micromegas.mm_write_partition('pbench_7', 'global', {b}, {e}, NULL, NULL,
                   's3://bench/new/{h}.parquet', 1000, (SELECT schema_hash FROM micromegas.lakehouse_view_set_definitions
                   WHERE view_set_name = 'log_stats'), NULL, 10)",
                b = at(h),
                e = at(h + 1)
            )
        })
        .collect();
    let inserts: Vec<String> = hours
        .iter()
        .map(|&h| {
            format!(
                "INSERT INTO bench_partitions_copy (view_set_name, view_instance_id, begin_insert_time, end_insert_time,
                   updated, file_path, file_size, file_schema_hash, num_rows)
                 VALUES ('pbench_7', 'global', {b}, {e}, now(), 's3://bench/new/{h}.parquet', 1000,
                   (SELECT schema_hash FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats'), 10)",
                b = at(h),
                e = at(h + 1)
            )
        })
        .collect();
    let retires: Vec<String> = hours
        .iter()
        .map(|&h| {
            format!(
                "SELECT micromegas.retire_partition_by_metadata('pbench_7', 'global', {b}, {e},
                   (SELECT schema_hash FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = 'log_stats'))",
                b = at(h),
                e = at(h + 1)
            )
        })
        .collect();
    let deletes: Vec<String> = hours
        .iter()
        .map(|&h| {
            format!(
                "DELETE FROM bench_partitions_copy WHERE view_set_name = 'pbench_7' AND view_instance_id = 'global'
                   AND begin_insert_time = {b} AND end_insert_time = {e}
                   AND file_schema_hash = (SELECT schema_hash FROM micromegas.lakehouse_view_set_definitions
                                            WHERE view_set_name = 'log_stats')",
                b = at(h),
                e = at(h + 1)
            )
        })
        .collect();
    let mut rows = Vec::new();
    for (what, ours, native, native_what) in [
        (
            format!("mm_write_partition, {scale} partitions stored, p50"),
            &writes,
            &inserts,
            "INSERT into a constraint-free copy (one btree index) p50",
        ),
        (
            format!("retire_partition_by_metadata, {scale} partitions stored, p50"),
            &retires,
            &deletes,
            "indexed DELETE from the copy p50",
        ),
    ] {
        let mut a = time_each(&client, ours).await;
        let mut b = time_each(&client, native).await;
        rows.push(Row {
            what,
            figure: percentile(&mut a, 0.5),
            baseline_what: native_what.into(),
            baseline: percentile(&mut b, 0.5),
            unit: "ms",
        });
    }
    // Whole scans: a few rounds, alternating.
    let listing = "SELECT count(*) FROM micromegas.list_incompatible_partitions()".to_string();
    let by_hand = "SELECT count(*) FROM (
        SELECT p.view_set_name::text, p.view_instance_id::text, p.begin_insert_time, p.end_insert_time,
               p.file_schema_hash, v.schema_hash, p.file_path::text, p.file_size
          FROM micromegas.lakehouse_partitions p
          JOIN micromegas.view_set_schema_hashes v ON v.view_set_name = p.view_set_name
         WHERE p.file_schema_hash <> v.schema_hash
         ORDER BY 1, 2, 3, 4) x"
        .to_string();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        a.extend(time_each(&client, std::slice::from_ref(&listing)).await);
        b.extend(time_each(&client, std::slice::from_ref(&by_hand)).await);
    }
    rows.push(Row {
        what: format!("list_incompatible_partitions(), {scale} partitions stored, p50 of 5"),
        figure: percentile(&mut a, 0.5),
        baseline_what: "the same join written by hand p50".into(),
        baseline: percentile(&mut b, 0.5),
        unit: "ms",
    });
    client
        .batch_execute(
            "DELETE FROM micromegas.temporary_files WHERE file_path LIKE 's3://bench/new/%'",
        )
        .await
        .unwrap();
    rows
}

/// The job queue: 1, 8 and 32 workers draining 2,000 jobs (claim + finish
/// each, as the client's JobWorker calls them) against the same loop over a
/// bare `FOR UPDATE SKIP LOCKED` table; 8 workers claiming 10 at a time; 8
/// workers announcing every finish;
/// and CREATE with the history trigger against CREATE without it.
async fn job_rows(dsn: &str, rounds: usize) -> Vec<Row> {
    const JOBS: i64 = 2000;
    const ZERO_UUID: &str = "00000000-0000-0000-0000-000000000000";
    let client = connect(dsn).await;
    client
        .batch_execute(
            "DELETE FROM micromegas.jobs;
             DROP TABLE IF EXISTS bench_queue;
             CREATE TABLE bench_queue (id bigserial PRIMARY KEY, state text NOT NULL DEFAULT 'queued',
                                       worker text, created_at timestamptz NOT NULL DEFAULT clock_timestamp());
             CREATE INDEX ON bench_queue (created_at) WHERE state = 'queued';",
        )
        .await
        .unwrap();
    // Workers are long-lived: each connects and makes its first calls (the
    // library load, PL/pgSQL compilation, the statements' plans: measured
    // by the first-call rows) before the clock starts, on both sides.
    async fn drain(
        dsn: &str,
        workers: usize,
        claim: &'static str,
        finish: &'static str,
        warm_up: &'static str,
        no_job: [&'static str; 2],
    ) -> Duration {
        let ready = Arc::new(tokio::sync::Barrier::new(workers + 1));
        let mut tasks = Vec::new();
        for w in 0..workers {
            let dsn = dsn.to_string();
            let ready = Arc::clone(&ready);
            tasks.push(tokio::spawn(async move {
                let client = connect(&dsn).await;
                let worker = format!("bench-{w}");
                let claim = client.prepare(claim).await.unwrap();
                let finish = client.prepare(finish).await.unwrap();
                // Claims nothing; a finish of no job (refused, ignored).
                client.batch_execute(warm_up).await.unwrap();
                let _ = client.execute(&finish, &[&no_job[0], &no_job[1]]).await;
                ready.wait().await;
                loop {
                    let rows = client.query(&claim, &[&worker]).await.unwrap();
                    if rows.is_empty() {
                        return;
                    }
                    // Each job and what proves the claim (our lease token;
                    // the bare queue's worker name), finished one by one.
                    for row in &rows {
                        let id: String = row.get(0);
                        let proof: String = row.get(1);
                        client.execute(&finish, &[&id, &proof]).await.unwrap();
                    }
                }
            }));
        }
        ready.wait().await;
        let start = Instant::now();
        for t in tasks {
            t.await.unwrap();
        }
        start.elapsed()
    }
    let per_job = |d: Duration| d.as_secs_f64() * 1000.0 / JOBS as f64;
    let mut rows = Vec::new();
    // The last row announces every finish (micromegas_views.notify_finished_jobs,
    // off by default): what a NOTIFY per finish costs.
    for (workers, batch, notify) in [
        (1, 1, false),
        (8, 1, false),
        (32, 1, false),
        (8, 10, false),
        (8, 1, true),
    ] {
        client
            .batch_execute(&format!(
                "DELETE FROM micromegas.jobs; TRUNCATE bench_queue;
                 SELECT micromegas.mm_refresh_view('log_entries', '2020-01-01'::timestamptz + i * interval '1 hour',
                        '2020-01-01'::timestamptz + (i + 1) * interval '1 hour') FROM generate_series(1, {JOBS}) i;
                 INSERT INTO bench_queue (state) SELECT 'queued' FROM generate_series(1, {JOBS});"
            ))
            .await
            .unwrap();
        client
            .batch_execute("VACUUM ANALYZE bench_queue, micromegas.jobs")
            .await
            .unwrap();
        let (claim, bare_claim) = if batch == 1 {
            (
                "SELECT job_id::text, lease_token::text FROM micromegas.mm_claim_jobs($1, 1)",
                "UPDATE bench_queue q SET state = 'running', worker = $1
                  WHERE q.id = (SELECT x.id FROM bench_queue x WHERE x.state = 'queued' ORDER BY x.created_at
                                 LIMIT 1 FOR UPDATE SKIP LOCKED)
                 RETURNING q.id::text, q.worker",
            )
        } else {
            (
                "SELECT job_id::text, lease_token::text FROM micromegas.mm_claim_jobs($1, 10)",
                "UPDATE bench_queue q SET state = 'running', worker = $1
                  WHERE q.id IN (SELECT x.id FROM bench_queue x WHERE x.state = 'queued' ORDER BY x.created_at
                                 LIMIT 10 FOR UPDATE SKIP LOCKED)
                 RETURNING q.id::text, q.worker",
            )
        };
        let ours_dsn = if notify {
            format!("{dsn} options='-c micromegas_views.notify_finished_jobs=on'")
        } else {
            dsn.to_string()
        };
        let ours = drain(
            &ours_dsn,
            workers,
            claim,
            "SELECT micromegas.mm_finish_job($1::text::uuid, $2::text::uuid, true)",
            "SELECT * FROM micromegas.mm_claim_jobs('warm-up', 1, ARRAY['none'])",
            [ZERO_UUID, ZERO_UUID],
        )
        .await;
        let bare = drain(
            dsn,
            workers,
            bare_claim,
            "UPDATE bench_queue SET state = 'done' WHERE id = $1::text::bigint AND worker = $2",
            "SELECT x.id FROM bench_queue x WHERE x.state = 'none' ORDER BY x.created_at LIMIT 1 FOR UPDATE SKIP LOCKED",
            ["0", "none"],
        )
        .await;
        let done: i64 = client
            .query_one(
                "SELECT count(*) FROM micromegas.jobs WHERE state = 'done'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(done, JOBS, "every job done exactly once");
        let mut claims = if batch == 1 {
            String::new()
        } else {
            format!(", {batch} per claim")
        };
        if notify {
            claims.push_str(", every finish announced");
        }
        rows.push(Row {
            what: format!(
                "job claim + finish, {workers} worker{}{claims}, {JOBS} jobs ({:.0} jobs/s)",
                if workers == 1 { "" } else { "s" },
                JOBS as f64 / ours.as_secs_f64()
            ),
            figure: per_job(ours),
            baseline_what: format!(
                "bare FOR UPDATE SKIP LOCKED queue ({:.0} jobs/s)",
                JOBS as f64 / bare.as_secs_f64()
            ),
            baseline: per_job(bare),
            unit: "ms/job",
        });
    }
    // CREATE with and without the history trigger, alternating in batches.
    let statements = |prefix: &str| -> Vec<String> {
        (0..rounds)
            .map(|i| {
                format!(
                    "SELECT micromegas.mm_create_view($mm${}$mm$)",
                    definition(&format!("{prefix}_{i}"), false)
                )
            })
            .collect()
    };
    let drops = |prefix: &str| {
        format!("DELETE FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name LIKE '{prefix}\\_%'")
    };
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for half in 0..2 {
        with.extend(time_each(&client, &statements(&format!("hist_on{half}"))).await);
        client
            .batch_execute("ALTER TABLE micromegas.lakehouse_view_set_definitions DISABLE TRIGGER definitions_0_history")
            .await
            .unwrap();
        without.extend(time_each(&client, &statements(&format!("hist_off{half}"))).await);
        client
            .batch_execute("ALTER TABLE micromegas.lakehouse_view_set_definitions ENABLE TRIGGER definitions_0_history")
            .await
            .unwrap();
    }
    for prefix in ["hist_on0", "hist_on1", "hist_off0", "hist_off1"] {
        client.batch_execute(&drops(prefix)).await.unwrap();
    }
    rows.push(Row {
        what: "mm_create_view (CREATE) with the history trigger p50".into(),
        figure: percentile(&mut with, 0.5),
        baseline_what: "the same with the trigger disabled p50".into(),
        baseline: percentile(&mut without, 0.5),
        unit: "ms",
    });
    client
        .batch_execute("DELETE FROM micromegas.jobs; DROP TABLE bench_queue;")
        .await
        .unwrap();
    rows
}

/// The deny list: fingerprinting a 1 KB query, and matching a query's
/// context against 100 rules, in SQL (vs a bare sha256() of the same text)
/// and in process with the client crate's DenyMatcher (vs a sha256 of the
/// same text in process).
async fn deny_rows(client: &Client, rounds: usize) -> Vec<Row> {
    let mut rows = Vec::new();
    let query_1k = {
        let mut q = String::from("SELECT time, process_id, msg FROM log_entries WHERE ");
        let mut i = 0;
        while q.len() < 1000 {
            q.push_str(&format!("(level <= {i} AND target LIKE 'module_{i}%') OR "));
            i += 1;
        }
        q.push_str("false");
        q
    };
    client
        .batch_execute(
            "SET micromegas_views.query_deny_max_rules = 100;
             DELETE FROM micromegas.query_deny_list;
             SELECT count(*) FROM generate_series(1, 100) i,
               micromegas.deny_queries(format('client = %L AND sql LIKE %L', 'bench-' || i, '%thread_spans_' || i || '%'),
                                       'bench rule ' || i);",
        )
        .await
        .unwrap();
    let hash_stmt = client
        .prepare("SELECT micromegas.mm_sql_hash($1)")
        .await
        .unwrap();
    let sha_stmt = client
        .prepare("SELECT encode(sha256(convert_to($1, 'UTF8')), 'hex')")
        .await
        .unwrap();
    let match_stmt = client
        .prepare("SELECT * FROM micromegas.mm_match_query_denial(client => 'grafana', sql => $1)")
        .await
        .unwrap();
    let mut hash = Vec::new();
    let mut sha = Vec::new();
    let mut matched = Vec::new();
    for _ in 0..rounds {
        for (stmt, samples) in [
            (&hash_stmt, &mut hash),
            (&sha_stmt, &mut sha),
            (&match_stmt, &mut matched),
        ] {
            let start = Instant::now();
            client.query(stmt, &[&query_1k]).await.unwrap();
            samples.push(start.elapsed());
        }
    }
    let sha_p50 = percentile(&mut sha, 0.5);
    rows.push(Row {
        what: "mm_sql_hash, 1 KB query p50".into(),
        figure: percentile(&mut hash, 0.5),
        baseline_what: "sha256() of the same text p50".into(),
        baseline: sha_p50,
        unit: "ms",
    });
    rows.push(Row {
        what: "mm_match_query_denial, 100 rules, no match p50".into(),
        figure: percentile(&mut matched, 0.5),
        baseline_what: "sha256() of the same text p50".into(),
        baseline: sha_p50,
        unit: "ms",
    });

    // In process: the rules compiled once from the snapshot, every query
    // matched in memory (sql_hash given, as a service computes it once per
    // query; and from sql, fingerprinted by the matcher).
    let snapshot_rows = client
        .query(
            "SELECT version, rule_id::text, created_by, reason, match_expr FROM micromegas.mm_query_deny_list_snapshot()",
            &[],
        )
        .await
        .unwrap();
    let mut snapshot = micromegas_views_client::DenyListSnapshot::default();
    for row in &snapshot_rows {
        snapshot.version = row.get(0);
        if let Some(rule_id) = row.get::<_, Option<String>>(1) {
            snapshot.rules.push(micromegas_views_client::DenyRule {
                rule_id,
                created_by: row.get(2),
                reason: row.get(3),
                match_expr: row.get(4),
            });
        }
    }
    assert_eq!(snapshot.rules.len(), 100);
    let matcher = micromegas_views_client::DenyMatcher::new(&snapshot).unwrap();
    let hashed = micromegas_views_client::QueryAttributes {
        client: Some("grafana".into()),
        sql: Some(query_1k.clone()),
        sql_hash: Some("0123456789abcdef".into()),
        ..Default::default()
    };
    let unhashed = micromegas_views_client::QueryAttributes {
        sql_hash: None,
        ..hashed.clone()
    };
    // The same 100 rules with no key for the index (no top-level
    // `column = 'value'`): each one is evaluated for every query.
    let unkeyed =
        micromegas_views_client::DenyMatcher::new(&micromegas_views_client::DenyListSnapshot {
            version: 1,
            rules: (1..=100)
                .map(|i| micromegas_views_client::DenyRule {
                    rule_id: format!("unkeyed-{i}"),
                    created_by: "bench".into(),
                    reason: String::new(),
                    match_expr: format!("sql LIKE '%thread_spans_{i}%' OR client = 'bench-{i}'"),
                })
                .collect(),
        })
        .unwrap();
    // A query whose client is the key of one rule: that rule is evaluated.
    let keyed_hit = micromegas_views_client::QueryAttributes {
        client: Some("bench-50".into()),
        ..hashed.clone()
    };
    let mut local_sha = Vec::new();
    let cases: [(
        &str,
        &micromegas_views_client::DenyMatcher,
        &micromegas_views_client::QueryAttributes,
    ); 4] = [
        (
            "in-process DenyMatcher, 100 rules, no match, sql_hash given p50",
            &matcher,
            &hashed,
        ),
        (
            "in-process DenyMatcher, 100 rules, no match, 1 KB sql fingerprinted p50",
            &matcher,
            &unhashed,
        ),
        (
            "in-process DenyMatcher, 100 rules, the client keys one rule, no match p50",
            &matcher,
            &keyed_hit,
        ),
        (
            "in-process DenyMatcher, 100 rules without a key, no match p50",
            &unkeyed,
            &hashed,
        ),
    ];
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); cases.len()];
    for _ in 0..rounds.max(1000) {
        for ((_, matcher, query), samples) in cases.iter().zip(samples.iter_mut()) {
            let start = Instant::now();
            assert!(matcher.first_denial(query).unwrap().is_none());
            samples.push(start.elapsed());
        }
        let start = Instant::now();
        std::hint::black_box(<sha2::Sha256 as sha2::Digest>::digest(query_1k.as_bytes()));
        local_sha.push(start.elapsed());
    }
    let micros = |samples: &mut Vec<Duration>| percentile(samples, 0.5) * 1000.0;
    let local_sha_p50 = micros(&mut local_sha);
    for ((what, _, _), samples) in cases.iter().zip(samples.iter_mut()) {
        rows.push(Row {
            what: what.to_string(),
            figure: micros(samples),
            baseline_what: "sha256 of the 1 KB text, in process p50".into(),
            baseline: local_sha_p50,
            unit: "µs",
        });
    }
    rows
}
