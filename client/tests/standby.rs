//! The client against a hot standby, then across its promotion. Run by
//! scripts/standby_test.sh, which sets MMV_PRIMARY_DSN, MMV_STANDBY_DSN and
//! MMV_PROMOTE (the command that promotes the standby); `#[ignore]`d
//! otherwise, since it promotes the server it is given.

use micromegas_views_client::{
    connect, in_recovery, Config, JobContext, JobOutcome, JobWorker, JobWorkerConfig, Watcher,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::Client;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} must be set (scripts/standby_test.sh)"))
}

async fn within<T>(what: &str, limit: Duration, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| panic!("timed out after {limit:?} waiting for {what}"))
}

async fn create(client: &Client, name: &str) -> i64 {
    let statement = format!(
        "CREATE MATERIALIZED VIEW {name} WITH (
           extract_query = 'SELECT time, process_id, level FROM log_entries',
           count_src_query = 'SELECT sum(nb_objects) AS count FROM blocks WHERE insert_time >= ''{{begin}}'' AND insert_time < ''{{end}}''',
           merge_partitions_query = 'SELECT time, process_id, level FROM {{source}}',
           update_group = 4000, time_column = 'time')"
    );
    client
        .query_one(
            "SELECT version FROM micromegas.mm_create_view($1::text)",
            &[&statement],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a primary and a standby it may promote (scripts/standby_test.sh)"]
async fn watcher_and_worker_on_a_standby_then_promoted() {
    let primary = connect(&env("MMV_PRIMARY_DSN")).await.unwrap();
    let standby_dsn = env("MMV_STANDBY_DSN");
    let standby = connect(&standby_dsn).await.unwrap();
    assert!(in_recovery(&standby).await.unwrap());

    // 1. The Watcher with its default configuration (LISTEN on) connects to
    // the standby, loads, and follows a change on the primary by polling.
    let poll = Duration::from_secs(1);
    let mut config = Config::new(standby_dsn.clone());
    assert!(config.listen);
    config.poll_interval = poll;
    let watcher = Watcher::spawn(config);
    let first = within(
        "the first load",
        Duration::from_secs(20),
        watcher.wait_for_version(1),
    )
    .await;
    let version = create(&primary, "sb_one").await;
    let started = Instant::now();
    let seen = within(
        "the primary's change, on the standby",
        Duration::from_secs(20),
        watcher.wait_for_version(version),
    )
    .await;
    assert!(seen.version > first.version);
    assert!(seen.views.iter().any(|v| v.name == "sb_one"));
    // Within the poll interval plus the replay and one reload.
    assert!(started.elapsed() < poll * 3, "took {:?}", started.elapsed());

    // 2. A JobWorker pointed at the standby waits (it does not fail) and
    // claims once the server is promoted.
    let ran = Arc::new(AtomicUsize::new(0));
    let mut worker_config = JobWorkerConfig::new(standby_dsn.clone(), "standby-worker");
    worker_config.poll_interval = Duration::from_millis(200);
    let worker = JobWorker::new(worker_config);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let counter = ran.clone();
    let worker_task = tokio::spawn(async move {
        worker
            .run(
                move |_job, _ctx: JobContext| {
                    let counter = counter.clone();
                    async move {
                        counter.fetch_add(1, Ordering::SeqCst);
                        JobOutcome::done()
                    }
                },
                async {
                    let _ = stopped.await;
                },
            )
            .await
    });
    // run_once there returns the 25006 error (the claim is a write).
    let once = JobWorker::new(JobWorkerConfig::new(standby_dsn.clone(), "standby-once"))
        .run_once(&standby, &|_job, _ctx: JobContext| async {
            JobOutcome::done()
        })
        .await;
    let err = once.expect_err("run_once claimed on a standby");
    let db = err.as_db_error().expect("a database error");
    assert_eq!(db.code().code(), "25006", "{db:?}");
    assert!(
        db.message().contains("read-only on a standby"),
        "{}",
        db.message()
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        !worker_task.is_finished(),
        "the worker gave up on the standby"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 0);

    // 3. Promotion: writes work on the new primary, the catalog version
    // continues from where it was, the Watcher follows, notifications are
    // delivered, and the waiting worker claims a job.
    let before: i64 = standby
        .query_one("SELECT micromegas.mm_catalog_version()", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(before, version);
    let promote = env("MMV_PROMOTE");
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(&promote)
        .status()
        .unwrap();
    assert!(status.success(), "{promote}");
    within("the promotion", Duration::from_secs(30), async {
        while in_recovery(&standby).await.unwrap() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let promoted = standby;
    let after = create(&promoted, "sb_two").await;
    assert!(
        after > before,
        "version {after} after promotion, {before} before"
    );
    within(
        "the watcher after promotion",
        Duration::from_secs(20),
        watcher.wait_for_version(after),
    )
    .await;
    // A watcher that only learns by notification (its poll is an hour away)
    // sees the next change at once: NOTIFY works on the new primary.
    let mut quiet = Config::new(standby_dsn.clone());
    quiet.poll_interval = Duration::from_secs(3600);
    let listener = Watcher::spawn(quiet);
    within(
        "the listener's first load",
        Duration::from_secs(20),
        listener.wait_for_version(after),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let notified = create(&promoted, "sb_three").await;
    within(
        "a notification on the new primary",
        Duration::from_secs(5),
        listener.wait_for_version(notified),
    )
    .await;
    within(
        "the first watcher, listening again",
        Duration::from_secs(5),
        watcher.wait_for_version(notified),
    )
    .await;
    promoted
        .query_one("SELECT micromegas.mm_refresh_view('sb_two')", &[])
        .await
        .unwrap();
    within(
        "the worker's claim after promotion",
        Duration::from_secs(20),
        async {
            while ran.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        },
    )
    .await;
    let _ = stop.send(());
    within(
        "the worker's shutdown",
        Duration::from_secs(10),
        worker_task,
    )
    .await
    .unwrap()
    .unwrap();
}
