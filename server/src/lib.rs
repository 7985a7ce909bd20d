//! The Lance Namespace materialized-view REST operations over
//! the extension's SQL functions. Every request runs in one transaction as
//! the Postgres role its API key maps to (`SET LOCAL ROLE`), with the key's
//! name as `micromegas_views.actor`: Postgres privileges decide what a key
//! may do, and the extension's triggers check every write, as for any other
//! client. The service itself holds no rule.

mod errors;
mod ids;
mod routes;
mod spec;

pub use errors::ApiError;
pub use ids::resolve_id;

use axum::http::HeaderName;
use axum::Router;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use std::sync::Arc;
use std::time::Duration;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

pub const REQUEST_ID: &str = "x-request-id";

pub use micromegas_views_client::keys::{ApiKey, KeyFile};

/// Who a request runs as.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The key's name (`micromegas_views.actor`).
    pub actor: String,
    /// The role to `SET LOCAL ROLE` to; `None` without authentication.
    pub role: Option<String>,
}

pub struct Config {
    /// The namespace the view names live in (`micromegas`): an identifier
    /// may name it before the view, or name only the view.
    pub namespace: Vec<String>,
    /// `None`: no authentication (only with `--insecure-no-auth`).
    pub keys: Option<KeyFile>,
    /// Each request's statements are cancelled past this.
    pub statement_timeout: Duration,
    /// The whole request is answered (408) past this.
    pub request_timeout: Duration,
    pub body_limit: usize,
}

/// The database's health, probed in the background every two seconds with
/// one pool connection: what `/healthz` answers.
pub struct Health {
    state: std::sync::Mutex<(Result<(), String>, std::time::Instant)>,
}

impl Health {
    fn new() -> Self {
        Health {
            state: std::sync::Mutex::new((
                Err("the database has not been probed yet".into()),
                std::time::Instant::now(),
            )),
        }
    }

    /// The last probe's answer; a probe older than 10 s counts as failed.
    pub fn latest(&self) -> Result<(), String> {
        let (result, at) = self.state.lock().expect("health lock").clone();
        if at.elapsed() > Duration::from_secs(10) {
            return Err("the database has not answered a probe for 10 s".into());
        }
        result
    }

    fn record(&self, result: Result<(), String>) {
        *self.state.lock().expect("health lock") = (result, std::time::Instant::now());
    }

    /// Probes until the state is dropped.
    /// Probes until the state is dropped, on a connection of its own (one
    /// taken out of the pool once, and again after it fails): requests
    /// never wait for a probe, and a busy pool is not a database down.
    async fn probe(state: std::sync::Weak<AppState>) {
        let mut own: Option<deadpool_postgres::ClientWrapper> = None;
        loop {
            let Some(app) = state.upgrade() else { return };
            let check = async {
                if own.is_none() {
                    let object = app.pool.get().await.map_err(|e| e.to_string())?;
                    own = Some(deadpool_postgres::Object::take(object));
                }
                let client = own.as_ref().expect("just set");
                if let Err(e) = client.simple_query("SELECT 1").await {
                    own = None;
                    return Err(e.to_string());
                }
                Ok::<_, String>(())
            };
            let result = match tokio::time::timeout(Duration::from_secs(3), check).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(format!("the database is unreachable: {e}")),
                Err(_) => {
                    own = None;
                    Err("the database did not answer within 3 s".to_string())
                }
            };
            app.health.record(result);
            drop(app);
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}

pub struct AppState {
    pub health: Health,
    pub pool: Pool,
    /// The TLS connector of the pool's connections (to cancel with).
    pub tls: micromegas_views_client::tls::Connector,
    pub namespace: Vec<String>,
    keys: Option<KeyFile>,
    pub statement_timeout: Duration,
}

impl AppState {
    /// The identity of a presented secret, if any key has it.
    pub fn identity_for(&self, secret: Option<&str>) -> Result<Identity, &'static str> {
        let Some(keys) = &self.keys else {
            return Ok(Identity {
                actor: "anonymous".into(),
                role: None,
            });
        };
        let secret =
            secret.ok_or("missing credentials: send Authorization: Bearer <key> or x-api-key")?;
        keys.find(secret)
            .map(|k| Identity {
                actor: k.name.clone(),
                role: Some(k.role.clone()),
            })
            .ok_or("invalid API key")
    }
}

/// A pool of connections configured like the CLI's (a libpq-style string,
/// the libpq environment for what it leaves unset, TLS per `sslmode`).
/// The pool, and the TLS connector its connections use.
pub struct Database {
    pool: Pool,
    tls: micromegas_views_client::tls::Connector,
}

pub fn pool(dsn: &str, size: usize) -> Result<Database, String> {
    // TLS as the string's sslmode/sslrootcert (or PGSSLMODE) ask.
    let (config, tls) =
        micromegas_views_client::connection(dsn).map_err(|e| format!("invalid --dsn: {e}"))?;
    let manager = Manager::from_config(
        config,
        tls.clone(),
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .wait_timeout(Some(Duration::from_secs(5)))
        .create_timeout(Some(Duration::from_secs(5)))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map(|pool| Database { pool, tls })
        .map_err(|e| format!("cannot build the connection pool: {e}"))
}

/// The service: routes, request ids (also each error's `instance`),
/// structured request logs, a body limit, timeouts, and panics answered as
/// a 500 instead of a dropped connection.
pub fn app(database: Database, config: Config) -> Router {
    let keys = config.keys;
    let state = Arc::new(AppState {
        health: Health::new(),
        pool: database.pool,
        tls: database.tls,
        namespace: config.namespace,
        keys,
        statement_timeout: config.statement_timeout,
    });
    tokio::spawn(Health::probe(Arc::downgrade(&state)));
    let request_id = HeaderName::from_static(REQUEST_ID);
    let timeout = config.request_timeout;
    routes::router(config.body_limit)
        .with_state(state)
        .layer(CatchPanicLayer::custom(errors::panic_response))
        .layer(axum::middleware::from_fn(move |request, next| {
            errors::within(timeout, request, next)
        }))
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(
            TraceLayer::new_for_http().make_span_with(|request: &axum::http::Request<_>| {
                let id = request
                    .headers()
                    .get(REQUEST_ID)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("-");
                tracing::info_span!("request", method = %request.method(), uri = %request.uri(), request_id = %id)
            }),
        )
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
}
