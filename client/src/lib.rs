//! The services' side of the reload protocol.
//!
//! A [`Watcher`] keeps an `Arc<Snapshot>` of every loadable view set
//! definition, in materialization order, with the catalog version it was read
//! at. It LISTENs on `micromegas_view_definitions` and reloads on a
//! notification; it also polls `mm_catalog_version()` every
//! `poll_interval`, so a missed notification (or a replica, where NOTIFY never
//! arrives) still converges. A failed reload keeps the last good snapshot; a
//! lost connection is re-established with exponential backoff ([`Backoff`]),
//! and every failure is logged through `tracing`.
//!
//! The same machinery ([`Watching`] over a [`Source`]) keeps the query deny
//! list ([`DenyListWatcher`]) and the audience grants
//! ([`AudienceGrantsWatcher`]) current, on their own channels.
//!
//! A [`JobWorker`] takes refresh and regeneration jobs from the queue
//! (`micromegas_jobs`), with a lease it keeps alive while the work runs.

use futures_util::StreamExt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, Client};

pub mod deny;
pub mod keys;
mod jobs;
pub mod tls;
pub use deny::{DenyMatcher, QueryAttributes};
pub use jobs::{Job, JobContext, JobOutcome, JobWorker, JobWorkerConfig, Ran, JOBS_CHANNEL};

pub const CHANNEL: &str = "micromegas_view_definitions";
pub const APPLICATION_NAME: &str = "micromegas-views-client";

/// One DDL-defined view set, as the services load it.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewDefinition {
    pub name: String,
    pub update_group: i32,
    pub extract_query: String,
    pub count_src_query: String,
    pub merge_partitions_query: String,
    /// `min_time_column`, `max_time_column`, `source_partition_delta`,
    /// `merge_partition_delta`, `merge_sort_order`.
    pub view_options: serde_json::Value,
    /// The inferred Arrow schema, base64 Arrow IPC stream.
    pub schema_ipc: String,
    pub schema_hash: Vec<u8>,
    pub reads: Vec<String>,
    /// The view's `auto_refresh` option: the daemon keeps it refreshed by itself.
    pub auto_refresh: bool,
}

/// Every loadable definition at one catalog version, ordered by
/// (update_group, name): the order the daemon materializes in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub version: i64,
    pub views: Vec<ViewDefinition>,
}

impl Snapshot {
    /// `(name, update_group)` in materialization order.
    pub fn materialization_order(&self) -> Vec<(&str, i32)> {
        self.views
            .iter()
            .map(|v| (v.name.as_str(), v.update_group))
            .collect()
    }
}

/// Reads the whole ordered snapshot in one statement (one consistent read).
pub async fn load_snapshot(client: &Client) -> Result<Snapshot, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT catalog_version, view_set_name, update_group, extract_query, count_src_query, \
             merge_partitions_query, view_options, schema_ipc, schema_hash, reads, auto_refresh \
             FROM micromegas.mm_view_set_snapshot()",
            &[],
        )
        .await?;
    let mut snapshot = Snapshot::default();
    for row in rows {
        snapshot.version = row.get(0);
        let name: Option<String> = row.get(1);
        let Some(name) = name else { continue };
        snapshot.views.push(ViewDefinition {
            name,
            update_group: row.get(2),
            extract_query: row.get(3),
            count_src_query: row.get(4),
            merge_partitions_query: row.get(5),
            view_options: row.get(6),
            schema_ipc: row.get(7),
            schema_hash: row.get(8),
            reads: row.get(9),
            auto_refresh: row.get(10),
        });
    }
    Ok(snapshot)
}

/// What a watcher keeps current: the value, the channel that announces a
/// change, the version that orders changes, and the one-statement load.
pub trait Source: Send + Sync + 'static {
    type Value: Default + Send + Sync + 'static;
    /// The LISTEN channel; its payloads carry a `"version"`.
    const CHANNEL: &'static str;
    const NAME: &'static str;
    /// The version a loaded value was read at.
    fn version_of(value: &Self::Value) -> i64;
    /// The version in the database now.
    fn current_version(
        client: &Client,
    ) -> impl Future<Output = Result<i64, tokio_postgres::Error>> + Send;
    /// The whole value, in one statement.
    fn load(
        client: &Client,
    ) -> impl Future<Output = Result<Self::Value, tokio_postgres::Error>> + Send;
}

/// The view set definitions ([`Snapshot`]).
pub struct Definitions;

impl Source for Definitions {
    type Value = Snapshot;
    const CHANNEL: &'static str = CHANNEL;
    const NAME: &'static str = "view definitions";
    fn version_of(value: &Snapshot) -> i64 {
        value.version
    }
    fn current_version(
        client: &Client,
    ) -> impl Future<Output = Result<i64, tokio_postgres::Error>> + Send {
        catalog_version(client)
    }
    fn load(
        client: &Client,
    ) -> impl Future<Output = Result<Snapshot, tokio_postgres::Error>> + Send {
        load_snapshot(client)
    }
}

/// One rule of the query deny list.
#[derive(Debug, Clone, PartialEq)]
pub struct DenyRule {
    pub rule_id: String,
    pub created_by: String,
    pub reason: String,
    pub match_expr: String,
}

/// Every rule, oldest first (the order rules are tried in).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DenyListSnapshot {
    pub version: i64,
    pub rules: Vec<DenyRule>,
}

/// The query deny list ([`DenyListSnapshot`]), on `micromegas_query_deny_list`.
pub struct DenyList;

impl Source for DenyList {
    type Value = DenyListSnapshot;
    const CHANNEL: &'static str = "micromegas_query_deny_list";
    const NAME: &'static str = "query deny list";
    fn version_of(value: &DenyListSnapshot) -> i64 {
        value.version
    }
    async fn current_version(client: &Client) -> Result<i64, tokio_postgres::Error> {
        Ok(client
            .query_one(
                "SELECT deny_list_version FROM micromegas.mm_access_versions()",
                &[],
            )
            .await?
            .get(0))
    }
    async fn load(client: &Client) -> Result<DenyListSnapshot, tokio_postgres::Error> {
        let rows = client
            .query(
                "SELECT version, rule_id::text, created_by, reason, match_expr \
                 FROM micromegas.mm_query_deny_list_snapshot()",
                &[],
            )
            .await?;
        let mut snapshot = DenyListSnapshot::default();
        for row in rows {
            snapshot.version = row.get(0);
            let Some(rule_id) = row.get::<_, Option<String>>(1) else {
                continue;
            };
            snapshot.rules.push(DenyRule {
                rule_id,
                created_by: row.get(2),
                reason: row.get(3),
                match_expr: row.get(4),
            });
        }
        Ok(snapshot)
    }
}

/// One audience grant.
#[derive(Debug, Clone, PartialEq)]
pub struct AudienceGrant {
    pub audience: String,
    pub axis: String,
    pub selector: String,
}

/// Every grant, by audience, axis, selector.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AudienceGrantsSnapshot {
    pub version: i64,
    pub grants: Vec<AudienceGrant>,
}

/// The audience grants ([`AudienceGrantsSnapshot`]), on `micromegas_audience_grants`.
pub struct AudienceGrants;

impl Source for AudienceGrants {
    type Value = AudienceGrantsSnapshot;
    const CHANNEL: &'static str = "micromegas_audience_grants";
    const NAME: &'static str = "audience grants";
    fn version_of(value: &AudienceGrantsSnapshot) -> i64 {
        value.version
    }
    async fn current_version(client: &Client) -> Result<i64, tokio_postgres::Error> {
        Ok(client
            .query_one(
                "SELECT audience_grants_version FROM micromegas.mm_access_versions()",
                &[],
            )
            .await?
            .get(0))
    }
    async fn load(client: &Client) -> Result<AudienceGrantsSnapshot, tokio_postgres::Error> {
        let rows = client
            .query(
                "SELECT version, audience, axis, selector FROM micromegas.mm_audience_grants_snapshot()",
                &[],
            )
            .await?;
        let mut snapshot = AudienceGrantsSnapshot::default();
        for row in rows {
            snapshot.version = row.get(0);
            let Some(audience) = row.get::<_, Option<String>>(1) else {
                continue;
            };
            snapshot.grants.push(AudienceGrant {
                audience,
                axis: row.get(2),
                selector: row.get(3),
            });
        }
        Ok(snapshot)
    }
}

/// Connects with a libpq-style connection string (empty: the standard
/// `PGHOST`, `PGPORT`, `PGUSER`, `PGDATABASE`, `PGPASSWORD` environment, as
/// libpq reads it), and drives the connection in the background.
pub async fn connect(dsn: &str) -> Result<Client, tokio_postgres::Error> {
    let (config, tls) = connection(dsn)?;
    let (client, connection) = config.connect(tls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// The one place a connection is configured: the connection string, the
/// libpq environment for what it leaves unset, the application name, and
/// TLS as `sslmode`/`sslrootcert` ask (see [`tls`]).
pub fn connection(
    dsn: &str,
) -> Result<(tokio_postgres::Config, tls::Connector), tokio_postgres::Error> {
    let Ok(settings) = tls::settings(dsn) else {
        // Not a connection string tls::settings reads (e.g. an unknown
        // sslmode): tokio-postgres says what is wrong with it.
        let _: tokio_postgres::Config = dsn.parse()?;
        return Err(invalid_sslmode(dsn));
    };
    let mut settings = settings;
    let mut config: tokio_postgres::Config = settings.rest.parse()?;
    // An sslmode the split missed (tokio-postgres read it from what was
    // left): never weaker than what tokio-postgres would have done.
    if config.get_ssl_mode() == tokio_postgres::config::SslMode::Require
        && settings.mode < tls::Mode::Require
    {
        settings.mode = tls::Mode::Require;
    }
    apply_libpq_environment(&mut config);
    config.application_name(APPLICATION_NAME);
    let tcp_names = config
        .get_hosts()
        .iter()
        .filter(|h| matches!(h, tokio_postgres::config::Host::Tcp(_)))
        .count();
    // As libpq: no TLS over Unix sockets, whatever sslmode says; a
    // hostaddr is TCP.
    let unix_only = tcp_names == 0 && config.get_hostaddrs().is_empty();
    if settings.mode == tls::Mode::VerifyFull
        && tcp_names == 0
        && !unix_only
        && settings.problem.is_none()
    {
        settings.problem = Some(
            "sslmode=verify-full needs a host name to check (host=), not only hostaddr".into(),
        );
    }
    config.ssl_mode(if unix_only {
        tokio_postgres::config::SslMode::Disable
    } else {
        tls::ssl_mode(settings.mode)
    });
    Ok((config, tls::connector(&settings)))
}

/// [`connection`]'s configuration alone.
pub fn connection_config(dsn: &str) -> Result<tokio_postgres::Config, tokio_postgres::Error> {
    connection(dsn).map(|(config, _)| config)
}

/// tokio-postgres' own error for a string whose sslmode it cannot read.
fn invalid_sslmode(dsn: &str) -> tokio_postgres::Error {
    let _ = dsn;
    "sslmode=invalid"
        .parse::<tokio_postgres::Config>()
        .expect_err("tokio-postgres refuses an unknown sslmode")
}

/// Fills what the connection string left unset from the libpq environment.
pub fn apply_libpq_environment(config: &mut tokio_postgres::Config) {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    if config.get_hosts().is_empty() {
        match var("PGHOST") {
            Some(hosts) => {
                for host in hosts.split(',') {
                    config.host(host);
                }
            }
            None => {
                config.host("/var/run/postgresql");
            }
        }
    }
    if config.get_ports().is_empty() {
        if let Some(port) = var("PGPORT").and_then(|p| p.parse().ok()) {
            config.port(port);
        }
    }
    if config.get_user().is_none() {
        if let Some(user) = var("PGUSER").or_else(|| var("USER")) {
            config.user(user);
        }
    }
    if config.get_dbname().is_none() {
        if let Some(dbname) = var("PGDATABASE") {
            config.dbname(dbname);
        }
    }
    if config.get_password().is_none() {
        if let Some(password) = var("PGPASSWORD") {
            config.password(password);
        }
    }
}

pub async fn catalog_version(client: &Client) -> Result<i64, tokio_postgres::Error> {
    Ok(client
        .query_one("SELECT micromegas.mm_catalog_version()", &[])
        .await?
        .get(0))
}

#[derive(Debug, Clone)]
pub struct Config {
    /// A libpq-style connection string, e.g. `host=/var/run/postgresql dbname=micromegas`.
    pub dsn: String,
    /// How often the version is polled even without a notification.
    pub poll_interval: Duration,
    /// Whether to LISTEN. On a hot standby (which refuses LISTEN and never
    /// delivers NOTIFY) the watcher polls only, whatever this says, and
    /// starts listening once the server is promoted.
    pub listen: bool,
    pub min_backoff: Duration,
    pub max_backoff: Duration,
}

impl Config {
    /// `poll_interval` from `MICROMEGAS_VIEW_DEFINITION_REFRESH_SECONDS`
    /// (default 60 s), LISTEN on.
    pub fn new(dsn: impl Into<String>) -> Self {
        let seconds = std::env::var("MICROMEGAS_VIEW_DEFINITION_REFRESH_SECONDS")
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|s| *s > 0.0)
            .unwrap_or(60.0);
        Config {
            dsn: dsn.into(),
            poll_interval: Duration::from_secs_f64(seconds),
            listen: true,
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
        }
    }
}

/// A running watcher of `S`. Dropping it stops the background task.
pub struct Watching<S: Source> {
    receiver: watch::Receiver<Arc<S::Value>>,
    task: JoinHandle<()>,
}

/// Keeps the view set definitions current.
pub type Watcher = Watching<Definitions>;
/// Keeps the query deny list current.
pub type DenyListWatcher = Watching<DenyList>;
/// Keeps the audience grants current.
pub type AudienceGrantsWatcher = Watching<AudienceGrants>;

impl<S: Source> Watching<S> {
    /// Starts watching; the first value is empty (version 0) until the
    /// first load succeeds.
    pub fn spawn(config: Config) -> Self {
        let (sender, receiver) = watch::channel(Arc::new(S::Value::default()));
        let task = tokio::spawn(run::<S>(config, sender));
        Watching { receiver, task }
    }

    /// The current value.
    pub fn snapshot(&self) -> Arc<S::Value> {
        self.receiver.borrow().clone()
    }

    /// A receiver that wakes on every new value.
    pub fn subscribe(&self) -> watch::Receiver<Arc<S::Value>> {
        self.receiver.clone()
    }

    /// Waits until the value's version is at least `version`.
    pub async fn wait_for_version(&self, version: i64) -> Arc<S::Value> {
        let mut receiver = self.receiver.clone();
        loop {
            let current = receiver.borrow_and_update().clone();
            if S::version_of(&current) >= version {
                return current;
            }
            if receiver.changed().await.is_err() {
                return current;
            }
        }
    }
}

impl<S: Source> Drop for Watching<S> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How long to wait before the next connection attempt: doubling from
/// `min` to `max` while attempts fail, back to `min` only once a connection
/// was established (and then lost).
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(min: Duration, max: Duration) -> Self {
        Backoff {
            min,
            max,
            next: min,
        }
    }

    /// The wait after a failed session; `connected` says whether it got a
    /// connection before failing.
    pub fn after_failure(&mut self, connected: bool) -> Duration {
        if connected {
            self.next = self.min;
        }
        let wait = self.next;
        self.next = (self.next * 2).min(self.max);
        wait
    }
}

/// Why a session ended without every receiver being gone.
struct Failure {
    connected: bool,
    error: tokio_postgres::Error,
}

async fn run<S: Source>(config: Config, sender: watch::Sender<Arc<S::Value>>) {
    let mut backoff = Backoff::new(config.min_backoff, config.max_backoff);
    loop {
        match session::<S>(&config, &sender).await {
            Ok(()) => return, // every receiver is gone
            Err(failure) => {
                let wait = backoff.after_failure(failure.connected);
                tracing::warn!(
                    error = %failure.error,
                    connected = failure.connected,
                    retry_in_ms = wait.as_millis() as u64,
                    version = S::version_of(&sender.borrow()),
                    source = S::NAME,
                    "micromegas_views watcher: session failed; keeping the last snapshot and reconnecting"
                );
                tokio::time::sleep(wait).await;
            }
        }
        if sender.is_closed() {
            return;
        }
    }
}

/// One connection's life: LISTEN, load, then reload on notifications and on
/// the poll timer until the connection fails.
async fn session<S: Source>(
    config: &Config,
    sender: &watch::Sender<Arc<S::Value>>,
) -> Result<(), Failure> {
    let not_connected = |error| Failure {
        connected: false,
        error,
    };
    let (pg_config, tls) = connection(&config.dsn).map_err(not_connected)?;
    let (client, connection) = pg_config.connect(tls).await.map_err(not_connected)?;
    tracing::debug!(source = S::NAME, "micromegas_views watcher: connected");
    connected_session::<S, _>(config, sender, client, connection)
        .await
        .map_err(|error| Failure {
            connected: true,
            error,
        })
}

/// Drives `connection` in the background and passes on the payload of each
/// notification on `channel`, as JSON (`Null` when it is not JSON). The
/// receiver ends when the connection does.
pub(crate) fn forward_notifications<T>(
    mut connection: tokio_postgres::Connection<tokio_postgres::Socket, T>,
    channel: &'static str,
) -> (JoinHandle<()>, mpsc::UnboundedReceiver<serde_json::Value>)
where
    T: tokio_postgres::tls::TlsStream + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) if n.channel() == channel => {
                    let payload =
                        serde_json::from_str(n.payload()).unwrap_or(serde_json::Value::Null);
                    let _ = tx.send(payload);
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        // Dropping tx tells the receiver the connection is gone.
    });
    (driver, rx)
}

async fn connected_session<S: Source, T>(
    config: &Config,
    sender: &watch::Sender<Arc<S::Value>>,
    client: Client,
    connection: tokio_postgres::Connection<tokio_postgres::Socket, T>,
) -> Result<(), tokio_postgres::Error>
where
    T: tokio_postgres::tls::TlsStream + Unpin + Send + 'static,
{
    let (driver, mut notify_rx) = forward_notifications(connection, S::CHANNEL);
    let result = async {
        // A hot standby refuses LISTEN (and would never deliver NOTIFY):
        // there the watcher polls, and LISTENs once the server is promoted.
        let mut listening = config.listen && listen_unless_standby(&client, S::CHANNEL).await?;
        if config.listen && !listening {
            tracing::info!(
                source = S::NAME,
                "micromegas_views: connected to a hot standby; polling until it is promoted"
            );
        }
        reload_if_newer::<S>(&client, sender).await?;
        let mut ticker = tokio::time::interval(config.poll_interval);
        ticker.tick().await;
        loop {
            tokio::select! {
                notified = notify_rx.recv() => match notified {
                    Some(payload) => {
                        let version = payload["version"].as_i64();
                        let current = S::version_of(&sender.borrow());
                        if version.is_none_or(|v| v > current) {
                            reload_if_newer::<S>(&client, sender).await?;
                        }
                    }
                    None => {
                        // The connection ended: surface its error.
                        client.simple_query("SELECT 1").await?;
                        return Ok(false);
                    }
                },
                _ = ticker.tick() => {
                    if config.listen && !listening {
                        listening = listen_unless_standby(&client, S::CHANNEL).await?;
                    }
                    reload_if_newer::<S>(&client, sender).await?;
                }
                _ = sender.closed() => return Ok(true),
            }
        }
    }
    .await;
    driver.abort();
    match result {
        Ok(true) => Ok(()),
        Ok(false) => Err(client
            .simple_query("SELECT 1")
            .await
            .err()
            .expect("closed connection")),
        Err(e) => Err(e),
    }
}

/// Whether the server is a hot standby (in recovery): the catalog is
/// read-only there, LISTEN is refused and NOTIFY never arrives.
pub async fn in_recovery(client: &Client) -> Result<bool, tokio_postgres::Error> {
    Ok(client
        .query_one("SELECT pg_catalog.pg_is_in_recovery()", &[])
        .await?
        .get(0))
}

/// LISTENs on `channel` unless the server is a hot standby; whether it
/// listens.
pub(crate) async fn listen_unless_standby(
    client: &Client,
    channel: &str,
) -> Result<bool, tokio_postgres::Error> {
    if in_recovery(client).await? {
        return Ok(false);
    }
    client.batch_execute(&format!("LISTEN {channel}")).await?;
    tracing::debug!(channel, "micromegas_views: listening");
    Ok(true)
}

/// Reloads when the database moved past the value's version. A failed
/// reload leaves the last good value in place.
async fn reload_if_newer<S: Source>(
    client: &Client,
    sender: &watch::Sender<Arc<S::Value>>,
) -> Result<(), tokio_postgres::Error> {
    let version = S::current_version(client).await?;
    if version != S::version_of(&sender.borrow()) {
        let value = S::load(client).await?;
        sender.send_replace(Arc::new(value));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Backoff;
    use std::time::Duration;

    #[test]
    fn backoff_grows_while_unreachable_and_resets_only_after_a_connection() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(1000));
        // The database is unreachable: every attempt fails to connect.
        let waits: Vec<_> = (0..6).map(|_| b.after_failure(false)).collect();
        assert_eq!(
            waits,
            [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
        // A session that connected, then lost its connection, starts over...
        assert_eq!(b.after_failure(true), ms(100));
        // ... and grows again while the reconnection attempts fail.
        assert_eq!(b.after_failure(false), ms(200));
        assert_eq!(b.after_failure(false), ms(400));
    }
}
