//! Against a real PostgreSQL with the extension installed, reached with
//! `MMV_TEST_DSN` (scripts/test.sh sets it). Run with `--features integration`.

use micromegas_views_client::{
    catalog_version, load_snapshot, AudienceGrantsWatcher, Config, DenyListWatcher, Watcher,
    APPLICATION_NAME,
};
use std::time::Duration;
use tokio_postgres::{Client, NoTls};

fn dsn() -> String {
    std::env::var("MMV_TEST_DSN").expect("MMV_TEST_DSN must name a database with micromegas_views")
}

async fn admin() -> Client {
    let (client, connection) = tokio_postgres::connect(&dsn(), NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

fn statement(name: &str, group: i32) -> String {
    format!(
        "CREATE OR REPLACE MATERIALIZED VIEW {name} WITH (extract_query = 'SELECT time, process_id FROM log_entries', \
         count_src_query = 'SELECT count(*) AS count FROM blocks WHERE insert_time >= ''{{begin}}'' AND insert_time < ''{{end}}''', \
         merge_partitions_query = 'SELECT time, process_id FROM {{source}}', update_group = {group}, time_column = 'time')"
    )
}

async fn create(client: &Client, name: &str, group: i32) -> i64 {
    client
        .query_one(
            "SELECT version FROM micromegas.mm_create_view($1)",
            &[&statement(name, group)],
        )
        .await
        .unwrap()
        .get(0)
}

async fn drop_view(client: &Client, name: &str) {
    client
        .execute(
            "SELECT micromegas.mm_drop_view($1::text)",
            &[&format!("DROP MATERIALIZED VIEW IF EXISTS {name}")],
        )
        .await
        .unwrap();
}

fn config(listen: bool, poll: Duration) -> Config {
    let mut config = Config::new(dsn());
    config.listen = listen;
    config.poll_interval = poll;
    config
}

async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

#[tokio::test]
async fn snapshot_is_ordered_and_versioned() {
    let admin = admin().await;
    create(&admin, "cl_order_b", 4100).await;
    let version = create(&admin, "cl_order_a", 4100).await;
    let snapshot = load_snapshot(&admin).await.unwrap();
    assert!(snapshot.version >= version);
    let order = snapshot.materialization_order();
    let groups: Vec<i32> = order.iter().map(|(_, g)| *g).collect();
    assert!(groups.windows(2).all(|w| w[0] <= w[1]), "{order:?}");
    let a = order.iter().position(|(n, _)| *n == "cl_order_a").unwrap();
    let b = order.iter().position(|(n, _)| *n == "cl_order_b").unwrap();
    assert!(a < b, "same group: by name");
    let view = snapshot
        .views
        .iter()
        .find(|v| v.name == "log_stats")
        .unwrap();
    assert_eq!(view.update_group, 3000);
    assert_eq!(view.schema_hash.len(), 8);
    assert_eq!(view.view_options["min_time_column"], "time_bin");
    drop_view(&admin, "cl_order_a").await;
    drop_view(&admin, "cl_order_b").await;
}

#[tokio::test]
async fn a_change_is_seen_through_listen() {
    let admin = admin().await;
    // A poll interval far beyond the timeout: only the notification can deliver.
    let watcher = Watcher::spawn(config(true, Duration::from_secs(3600)));
    within("first load", watcher.wait_for_version(1)).await;
    let version = create(&admin, "cl_listen", 4200).await;
    let snapshot = within("the notification", watcher.wait_for_version(version)).await;
    assert!(snapshot
        .views
        .iter()
        .any(|v| v.name == "cl_listen" && v.update_group == 4200));
    drop_view(&admin, "cl_listen").await;
    let version = catalog_version(&admin).await.unwrap();
    let snapshot = within("the drop", watcher.wait_for_version(version)).await;
    assert!(!snapshot.views.iter().any(|v| v.name == "cl_listen"));
}

#[tokio::test]
async fn a_missed_notification_is_caught_by_the_poll() {
    let admin = admin().await;
    let watcher = Watcher::spawn(config(false, Duration::from_millis(200)));
    within("first load", watcher.wait_for_version(1)).await;
    let version = create(&admin, "cl_poll", 4300).await;
    let snapshot = within("the poll", watcher.wait_for_version(version)).await;
    assert!(snapshot.views.iter().any(|v| v.name == "cl_poll"));
    drop_view(&admin, "cl_poll").await;
}

#[tokio::test]
async fn a_dropped_connection_recovers() {
    let admin = admin().await;
    let watcher = Watcher::spawn(config(true, Duration::from_secs(3600)));
    let before = within("first load", watcher.wait_for_version(1)).await;
    // Kill the watcher's backend, then change the catalog while it is away.
    let killed: i64 = admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()",
            &[&APPLICATION_NAME],
        )
        .await
        .unwrap()
        .get(0);
    assert!(killed >= 1);
    let version = create(&admin, "cl_recover", 4400).await;
    let snapshot = within("the reconnect", watcher.wait_for_version(version)).await;
    assert!(snapshot.version > before.version);
    assert!(snapshot.views.iter().any(|v| v.name == "cl_recover"));
    drop_view(&admin, "cl_recover").await;
}

#[tokio::test]
async fn a_failed_reload_keeps_the_last_good_snapshot() {
    let admin = admin().await;
    admin
        .batch_execute(
            "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mmv_client_test') THEN \
             CREATE ROLE mmv_client_test LOGIN; END IF; END $$; GRANT micromegas_admin TO mmv_client_test;",
        )
        .await
        .unwrap();
    let watcher = Watcher::spawn(Config {
        dsn: format!("{} user=mmv_client_test", dsn()),
        ..config(true, Duration::from_millis(200))
    });
    let version = create(&admin, "cl_good", 4500).await;
    within("the good snapshot", watcher.wait_for_version(version)).await;
    // The watcher's role loses access: every reload now fails. Other tests
    // of this binary change the catalog meanwhile, so the last good
    // snapshot is the one the watcher holds once a reload that began
    // before the revoke had time to end (a poll is 200 ms).
    admin
        .batch_execute("REVOKE micromegas_admin FROM mmv_client_test")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    let good = watcher.snapshot();
    assert!(good.views.iter().any(|v| v.name == "cl_good"));
    let missed = create(&admin, "cl_missed", 4500).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let kept = watcher.snapshot();
    assert_eq!(kept.version, good.version);
    assert_eq!(kept.views, good.views);
    // Access comes back: the watcher converges.
    admin
        .batch_execute("GRANT micromegas_admin TO mmv_client_test")
        .await
        .unwrap();
    let snapshot = within("the recovery", watcher.wait_for_version(missed)).await;
    assert!(snapshot.views.iter().any(|v| v.name == "cl_missed"));
    drop(watcher);
    drop_view(&admin, "cl_good").await;
    drop_view(&admin, "cl_missed").await;
}

/// The deny list and the grants are watched like the definitions: a change
/// is announced on its own channel and the watcher reloads at once (no
/// polling here: the poll interval is an hour).
#[tokio::test]
async fn deny_list_and_grants_watchers_follow_changes() {
    let admin = admin().await;
    // Versions above 0, so that the watchers' first loads are visible (a
    // watcher LISTENs before its first load).
    admin
        .batch_execute(
            "SELECT msg FROM micromegas.deny_queries('client = ''cl-warm''', 'cl_warm');
             DELETE FROM micromegas.query_deny_list WHERE reason = 'cl_warm'",
        )
        .await
        .unwrap();
    let versions = admin
        .query_one(
            "SELECT deny_list_version, audience_grants_version FROM micromegas.mm_access_versions()",
            &[],
        )
        .await
        .unwrap();
    let deny = DenyListWatcher::spawn(config(true, Duration::from_secs(3600)));
    let grants = AudienceGrantsWatcher::spawn(config(true, Duration::from_secs(3600)));
    within(
        "the first deny list load",
        deny.wait_for_version(versions.get(0)),
    )
    .await;
    within(
        "the first grants load",
        grants.wait_for_version(versions.get(1)),
    )
    .await;
    let before = deny.snapshot().version;
    let rule_id: String = admin
        .query_one(
            "SELECT msg FROM micromegas.deny_queries($1, 'cl_watch')",
            &[&"client = 'cl-watch'"],
        )
        .await
        .unwrap()
        .get(0);
    let seen = within("the new rule", deny.wait_for_version(before + 1)).await;
    assert!(seen
        .rules
        .iter()
        .any(|r| r.rule_id == rule_id && r.reason == "cl_watch"));
    let before = grants.snapshot().version;
    admin
        .execute(
            "SELECT micromegas.mm_grant_audience('cl-team', 'read', 'user:cl@example.com')",
            &[],
        )
        .await
        .unwrap();
    let seen = within("the new grant", grants.wait_for_version(before + 1)).await;
    assert!(seen
        .grants
        .iter()
        .any(|g| g.audience == "cl-team" && g.selector == "user:cl@example.com"));
    assert!(seen
        .grants
        .iter()
        .any(|g| g.audience == "public" && g.selector == "*"));
    let before = deny.snapshot().version;
    admin
        .execute("SELECT micromegas.remove_query_denial($1)", &[&rule_id])
        .await
        .unwrap();
    let seen = within("the removal", deny.wait_for_version(before + 1)).await;
    assert!(!seen.rules.iter().any(|r| r.rule_id == rule_id));
    admin
        .execute(
            "SELECT micromegas.mm_revoke_audience('cl-team', 'read', 'user:cl@example.com')",
            &[],
        )
        .await
        .unwrap();
}

/// The in-process matcher answers what the SQL function answers, rule for
/// rule, built from the deny list watcher's snapshot.
#[tokio::test]
async fn the_in_process_deny_matcher_agrees_with_the_sql_function() {
    use micromegas_views_client::{DenyMatcher, QueryAttributes};
    let admin = admin().await;
    admin
        .batch_execute(
            r#"DELETE FROM micromegas.query_deny_list WHERE reason LIKE 'dm\_%';
             SELECT msg FROM micromegas.deny_queries('client = ''dm-grafana'' AND entrypoint = ''alert''', 'dm_alerts');
             SELECT msg FROM micromegas.deny_queries('user_id = ''dm-bot'' OR sql LIKE ''%dm_huge_table%''', 'dm_bot');
             SELECT msg FROM micromegas.deny_queries('sql_hash = ''' || micromegas.mm_sql_hash('SELECT 1 AS dm') || '''', 'dm_hash');"#,
        )
        .await
        .unwrap();
    let version: i64 = admin
        .query_one(
            "SELECT deny_list_version FROM micromegas.mm_access_versions()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let deny = DenyListWatcher::spawn(config(true, Duration::from_millis(200)));
    let snapshot = within("the deny list", deny.wait_for_version(version)).await;
    let matcher = DenyMatcher::new(&snapshot).unwrap();
    assert_eq!(matcher.version(), snapshot.version);
    let s = |v: &str| Some(v.to_string());
    let cases = [
        QueryAttributes {
            client: s("dm-grafana"),
            entrypoint: s("alert"),
            ..Default::default()
        },
        QueryAttributes {
            client: s("dm-grafana"),
            entrypoint: s("dashboard"),
            ..Default::default()
        },
        QueryAttributes {
            user_id: s("dm-bot"),
            ..Default::default()
        },
        QueryAttributes {
            sql: s("select * from dm_huge_table"),
            ..Default::default()
        },
        // the fingerprint of sql, computed when not given
        QueryAttributes {
            sql: s("select   1 as DM -- a comment"),
            ..Default::default()
        },
        QueryAttributes {
            user_id: s("someone"),
            sql: s("SELECT 2"),
            ..Default::default()
        },
    ];
    // other rules of the database may match too: compared on ours
    let ours = |r: Option<String>| r.filter(|r| r.starts_with("dm_"));
    for q in &cases {
        let here = matcher.first_denial(q).unwrap().map(|r| r.reason.clone());
        let there: Option<String> = admin
            .query_opt(
                "SELECT reason FROM micromegas.mm_match_query_denial(user_id => $1, client => $2, entrypoint => $3, sql => $4)",
                &[&q.user_id, &q.client, &q.entrypoint, &q.sql],
            )
            .await
            .unwrap()
            .map(|r| r.get(0));
        assert_eq!(ours(here), ours(there), "{q:?}");
    }
    let reason = |i: usize| {
        ours(
            matcher
                .first_denial(&cases[i])
                .unwrap()
                .map(|r| r.reason.clone()),
        )
    };
    assert_eq!(reason(0).as_deref(), Some("dm_alerts"));
    assert_eq!(reason(1), None);
    assert_eq!(reason(2).as_deref(), Some("dm_bot"));
    assert_eq!(reason(4).as_deref(), Some("dm_hash"));
    admin
        .batch_execute(r#"DELETE FROM micromegas.query_deny_list WHERE reason LIKE 'dm\_%'"#)
        .await
        .unwrap();
}

// ---- Jobs: one test, so that no other test's worker claims its jobs. ----

use micromegas_views_client::{JobContext, JobOutcome, JobWorker, JobWorkerConfig, Ran};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

fn worker(name: &str) -> JobWorker {
    let mut config = JobWorkerConfig::new(dsn(), name);
    config.poll_interval = Duration::from_millis(200);
    config.heartbeat_interval = Duration::from_millis(50);
    JobWorker::new(config)
}

async fn job_state(client: &Client, job_id: &str) -> String {
    client
        .query_one(
            "SELECT state FROM micromegas.mm_job($1::text::uuid)",
            &[&job_id],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jobs_from_request_to_done() {
    let client = admin().await;
    client
        .batch_execute("DELETE FROM micromegas.jobs")
        .await
        .unwrap();
    create(&client, "jobs_v", 4000).await;

    // 1. A request is announced, claimed, heartbeaten and finished; the
    // request and (with micromegas_views.notify_finished_jobs on, in the
    // finishing session) the finish are announced on micromegas_jobs, the
    // claim (and the heartbeat) not: a "running" notification would come
    // second.
    let (listener, mut connection) = tokio_postgres::connect(&dsn(), NoTls).await.unwrap();
    let (tx, mut notes) = tokio::sync::mpsc::unbounded_channel::<serde_json::Value>();
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        use futures_util::StreamExt;
        while let Some(Ok(message)) = messages.next().await {
            if let tokio_postgres::AsyncMessage::Notification(n) = message {
                let _ = tx.send(serde_json::from_str(n.payload()).unwrap());
            }
        }
    });
    listener
        .batch_execute("LISTEN micromegas_jobs")
        .await
        .unwrap();
    let job_id: String = client
        .query_one(
            "SELECT micromegas.mm_refresh_view('jobs_v', params => '{\"sleep_ms\": 120}')::text",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    client
        .batch_execute("SET micromegas_views.notify_finished_jobs = on")
        .await
        .unwrap();
    let beats = Arc::new(Mutex::new(0usize));
    let ran = {
        let beats = beats.clone();
        worker("w-one")
            .run_once(&client, &move |job, _context: JobContext| {
                let beats = beats.clone();
                async move {
                    assert_eq!(job.view_set_name, "jobs_v");
                    assert_eq!(job.attempts, 1);
                    tokio::time::sleep(Duration::from_millis(
                        job.params["sleep_ms"].as_u64().unwrap(),
                    ))
                    .await;
                    *beats.lock().unwrap() += 1;
                    JobOutcome::done()
                }
            })
            .await
            .unwrap()
    };
    assert_eq!(
        ran,
        Some(Ran::Finished {
            job_id: job_id.clone(),
            state: "done".into()
        })
    );
    assert_eq!(job_state(&client, &job_id).await, "done");
    let mut states = Vec::new();
    while states.len() < 2 {
        let note = within("job notifications", notes.recv()).await.unwrap();
        // Any role may LISTEN: the payload names no job and no view.
        assert_eq!(note.as_object().unwrap().len(), 1, "{note}");
        states.push(note["op"].as_str().unwrap().to_string());
    }
    assert_eq!(states, ["queued", "done"]);
    assert_eq!(*beats.lock().unwrap(), 1);

    // 1b. By default a finish is not announced (a commit that notifies
    // holds a database-wide lock until flushed): after a request and its
    // finish, the next notification is a marker sent after both.
    client
        .batch_execute("RESET micromegas_views.notify_finished_jobs")
        .await
        .unwrap();
    let quiet_job: String = client
        .query_one(
            "SELECT micromegas.mm_refresh_view('jobs_v', '2023-01-01', '2023-01-02')::text",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let ran = worker("w-quiet")
        .run_once(&client, &|_job, _context: JobContext| async move {
            JobOutcome::done()
        })
        .await
        .unwrap();
    assert_eq!(
        ran,
        Some(Ran::Finished {
            job_id: quiet_job.clone(),
            state: "done".into()
        })
    );
    client
        .batch_execute(r#"NOTIFY micromegas_jobs, '{"marker": "after the finish"}'"#)
        .await
        .unwrap();
    let queued = within("the quiet job's request", notes.recv())
        .await
        .unwrap();
    assert_eq!(queued, serde_json::json!({"op": "queued"}));
    assert!(!quiet_job.is_empty());
    let next = within("the marker", notes.recv()).await.unwrap();
    assert_eq!(
        next["marker"], "after the finish",
        "the finish was announced: {next}"
    );

    // 2. A cancel while the job runs reaches the handler on a heartbeat; the
    // job ends cancelled.
    let job_id: String = client
        .query_one(
            "SELECT micromegas.mm_refresh_view('jobs_v', '2024-01-01', '2024-01-02')::text",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let canceller = {
        let job_id = job_id.clone();
        tokio::spawn(async move {
            let client = admin().await;
            tokio::time::sleep(Duration::from_millis(150)).await;
            client
                .query_one(
                    "SELECT micromegas.mm_cancel_job($1::text::uuid)",
                    &[&job_id],
                )
                .await
                .unwrap()
                .get::<_, String>(0)
        })
    };
    let ran = within(
        "a cancelled job",
        worker("w-cancel").run_once(&client, &|_job, mut context: JobContext| async move {
            context.cancelled().await;
            JobOutcome::failed("materialize", "stopped on request", false)
        }),
    )
    .await
    .unwrap();
    assert_eq!(canceller.await.unwrap(), "cancel_requested");
    assert_eq!(
        ran,
        Some(Ran::Finished {
            job_id: job_id.clone(),
            state: "cancelled".into()
        })
    );

    // 3. A lost lease stops the handler and reports nothing: the job is
    // taken over by another claim after the lease ran out.
    let job_id: String = client
        .query_one(
            "SELECT micromegas.mm_refresh_view('jobs_v', '2024-02-01', '2024-02-02')::text",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let slow = {
        let mut config = JobWorkerConfig::new(dsn(), "w-slow");
        config.heartbeat_interval = Duration::from_millis(1500);
        JobWorker::new(config)
    };
    let short_lease = admin().await;
    short_lease
        .batch_execute("SET micromegas_views.job_lease = '1s'")
        .await
        .unwrap();
    let takeover = {
        let job_id = job_id.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1300)).await;
            let client = admin().await;
            let row = client
                .query_one(
                    "SELECT job_id::text, attempts, lease_token::text FROM micromegas.mm_claim_job('w-slow')",
                    &[],
                )
                .await
                .unwrap();
            assert_eq!(row.get::<_, String>(0), job_id);
            assert_eq!(row.get::<_, i32>(1), 2);
            // The same worker name as the stale holder: only the token
            // tells the two claims apart.
            let token: String = row.get(2);
            client
                .query_one(
                    "SELECT micromegas.mm_finish_job($1::text::uuid, $2::text::uuid, true)",
                    &[&job_id, &token],
                )
                .await
                .unwrap();
        })
    };
    let ran = within(
        "a lost lease",
        slow.run_once(&short_lease, &|_job, _context| async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            JobOutcome::done()
        }),
    )
    .await
    .unwrap();
    takeover.await.unwrap();
    assert_eq!(
        ran,
        Some(Ran::LeaseLost {
            job_id: job_id.clone()
        })
    );
    assert_eq!(job_state(&client, &job_id).await, "done");

    // 4. Randomized: 8 workers, 1,000 jobs, some failing retryably. No job
    // runs twice at once, none is lost, each ends done or failed with the
    // attempts it was run.
    client
        .batch_execute(
            "SELECT micromegas.mm_refresh_view('jobs_v', '2020-01-01'::timestamptz + i * interval '1 hour',
                    '2020-01-01'::timestamptz + (i + 1) * interval '1 hour',
                    jsonb_build_object('fail', i % 7 = 0))
               FROM generate_series(1, 1000) i",
        )
        .await
        .unwrap();
    let running: Arc<Mutex<HashSet<String>>> = Arc::default();
    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let overlaps = Arc::new(Mutex::new(0u32));
    let mut workers = Vec::new();
    for w in 0..8 {
        let (running, runs, overlaps) = (running.clone(), runs.clone(), overlaps.clone());
        workers.push(tokio::spawn(async move {
            let client = admin().await;
            let me = worker(&format!("w{w}"));
            let mut seed: u64 = 0x9E37_79B9_7F4A_7C15 ^ (w as u64 + 1);
            loop {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let pause = Duration::from_micros(seed % 2000);
                let (running, runs, overlaps) = (running.clone(), runs.clone(), overlaps.clone());
                let ran = me
                    .run_once(&client, &move |job, _context| {
                        let (running, runs, overlaps) =
                            (running.clone(), runs.clone(), overlaps.clone());
                        async move {
                            if !running.lock().unwrap().insert(job.job_id.clone()) {
                                *overlaps.lock().unwrap() += 1;
                            }
                            *runs.lock().unwrap().entry(job.job_id.clone()).or_default() += 1;
                            tokio::time::sleep(pause).await;
                            running.lock().unwrap().remove(&job.job_id);
                            if job.params["fail"].as_bool().unwrap() {
                                JobOutcome::failed("materialize", "injected failure", true)
                            } else {
                                JobOutcome::done()
                            }
                        }
                    })
                    .await
                    .unwrap();
                if ran.is_none() {
                    return;
                }
            }
        }));
    }
    for w in workers {
        within("8 workers, 1000 jobs", w).await.unwrap();
    }
    assert_eq!(*overlaps.lock().unwrap(), 0, "a job ran twice at once");
    let rows = client
        .query(
            "SELECT job_id::text, state, attempts, params->>'fail' FROM micromegas.jobs
              WHERE view_set_name = 'jobs_v' AND begin_time >= '2020-01-01' AND begin_time < '2021-01-01'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1000, "a job was lost");
    let runs = runs.lock().unwrap().clone();
    for row in &rows {
        let (id, state, attempts, fail): (String, String, i32, String) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        let expected = if fail == "true" { "failed" } else { "done" };
        assert_eq!(state, expected, "job {id}");
        assert_eq!(
            runs.get(&id).copied().unwrap_or(0) as i32,
            attempts,
            "job {id}"
        );
        assert_eq!(attempts, if fail == "true" { 3 } else { 1 }, "job {id}");
    }

    // 5. A lease used before its claim committed (the token handed to
    // another connection from inside the claim's transaction): the
    // heartbeat and the finish wait for the claim and go through, as they
    // did when they began by locking the row.
    let finish = "SELECT micromegas.mm_finish_job($1::text::uuid, $2::text::uuid, true)";
    for (call, expected) in [
        (
            "SELECT micromegas.mm_heartbeat_job($1::text::uuid, $2::text::uuid)",
            "running",
        ),
        (finish, "done"),
    ] {
        client
            .batch_execute(
                "SELECT micromegas.mm_refresh_view('jobs_v', '2022-01-01', '2022-01-02')",
            )
            .await
            .unwrap();
        let claimer = admin().await;
        claimer.batch_execute("BEGIN").await.unwrap();
        let claimed = claimer
            .query_one(
                "SELECT job_id::text, lease_token::text FROM micromegas.mm_claim_job('w-early')",
                &[],
            )
            .await
            .unwrap();
        let (job_id, token): (String, String) = (claimed.get(0), claimed.get(1));
        let early = {
            let (job_id, token) = (job_id.clone(), token.clone());
            tokio::spawn(async move {
                let other = admin().await;
                other
                    .query_one(call, &[&job_id, &token])
                    .await
                    .map(|row| row.get::<_, String>(0))
                    .map_err(|e| {
                        e.as_db_error()
                            .map_or(e.to_string(), |d| d.message().to_string())
                    })
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        claimer.batch_execute("COMMIT").await.unwrap();
        let answer = within("a call made before its claim committed", early)
            .await
            .unwrap();
        assert_eq!(answer.as_deref(), Ok(expected), "{call}");
        if call != finish {
            client.query_one(finish, &[&job_id, &token]).await.unwrap();
        }
        assert_eq!(job_state(&client, &job_id).await, "done");
    }
    drop_view(&client, "jobs_v").await;
    client
        .batch_execute("DELETE FROM micromegas.jobs")
        .await
        .unwrap();
}
