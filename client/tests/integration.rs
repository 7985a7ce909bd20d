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
    let good = within("the good snapshot", watcher.wait_for_version(version)).await;
    assert!(good.views.iter().any(|v| v.name == "cl_good"));
    // The watcher's role loses access: every reload now fails.
    admin
        .batch_execute("REVOKE micromegas_admin FROM mmv_client_test")
        .await
        .unwrap();
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
