//! The routes. Each handler: who is calling (auth), the identifier, the
//! body (parsed here, so a malformed one gets an `ErrorResponse`), then one
//! transaction of calls to the extension's SQL functions.

use crate::errors::{ApiError, Code};
use crate::ids::{check_body_id, resolve_id, resolve_namespace};
use crate::spec;
use crate::{AppState, Identity};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use lance_namespace_reqwest_client::models;
use micromegas_views_core::schema;
use micromegas_views_core::{Definition, Statement};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

pub(crate) type Shared = Arc<AppState>;
pub(crate) type Answer = Result<(StatusCode, Json<Value>), ApiError>;

pub fn router(body_limit: usize) -> Router<Shared> {
    Router::new()
        .route("/healthz", get(healthz))
        // The spec's materialized-view operations.
        .route("/v1/materialized_view/{id}/create", post(create))
        .route("/v1/materialized_view/{id}/refresh", post(refresh))
        // The spec's table and namespace operations a view answers.
        .route("/v1/namespace/{id}/list", get(spec::list_namespaces))
        .route(
            "/v1/namespace/{id}/describe",
            post(spec::describe_namespace),
        )
        .route("/v1/namespace/{id}/exists", post(spec::namespace_exists))
        .route("/v1/namespace/{id}/table/list", get(spec::list_tables))
        .route("/v1/table/{id}/describe", post(spec::describe_table))
        .route("/v1/table/{id}/exists", post(spec::table_exists))
        .route("/v1/table/{id}/drop", post(spec::drop_table))
        .route(
            "/v1/table/{id}/version/list",
            post(spec::list_table_versions),
        )
        .route(
            "/v1/table/{id}/version/describe",
            post(spec::describe_table_version),
        )
        .route("/v1/table/{id}/restore", post(spec::restore_table))
        // This server's own routes: 0.1.4's describe, drop and list (kept
        // for its clients), and the jobs.
        .route("/v1/materialized_view/{id}/describe", post(describe))
        .route("/v1/materialized_view/{id}/drop", post(drop_view))
        .route("/v1/namespace/{id}/materialized_view/list", get(list))
        .route("/v1/jobs/describe", post(describe_job))
        .route("/v1/jobs/cancel", post(cancel_job))
        .route("/v1/jobs/list", post(list_jobs))
        .method_not_allowed_fallback(spec::method_not_allowed)
        .fallback(spec::fallback)
        .layer(DefaultBodyLimit::max(body_limit))
}

/// serde's message with every quoted value replaced by `"…"`.
fn redacted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut quoted = false;
    for ch in message.chars() {
        if ch == '"' {
            if !quoted {
                out.push_str("\"…\"");
            }
            quoted = !quoted;
        } else if !quoted {
            out.push(ch);
        }
    }
    out
}

/// A pooled connection for one request. A request dropped before it
/// settles (its answer timed out, 408) may leave a statement running: the
/// statement is cancelled and the connection kept out of the pool.
pub(crate) struct Conn {
    object: Option<deadpool_postgres::Object>,
    cancel: tokio_postgres::CancelToken,
    tls: micromegas_views_client::tls::Connector,
    settled: bool,
}

impl Conn {
    /// No statement of this request is running any more.
    pub(crate) fn settle(&mut self) {
        self.settled = true;
    }
}

impl std::ops::Deref for Conn {
    type Target = deadpool_postgres::Object;
    fn deref(&self) -> &Self::Target {
        self.object.as_ref().expect("present until dropped")
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.object.as_mut().expect("present until dropped")
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        // Out of the pool (its client closes), and the statement cancelled.
        if let Some(object) = self.object.take() {
            drop(deadpool_postgres::Object::take(object));
        }
        let (cancel, tls) = (self.cancel.clone(), self.tls.clone());
        tokio::spawn(async move {
            if let Err(e) = cancel.cancel_query(tls).await {
                tracing::warn!(error = %e, "could not cancel an abandoned request's statement");
            }
        });
    }
}

/// Who calls, and the request id every error carries as its `instance`.
/// Credentials come from the headers (`Authorization: Bearer`, `x-api-key`)
/// or, without them, from a request body's `identity` (the spec's
/// alternative); they are never logged or stored.
pub struct Caller {
    identity: Option<Identity>,
    /// Why there is no identity yet (no credentials in the headers).
    missing: &'static str,
    request_id: String,
}

impl FromRequestParts<Shared> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> Result<Self, ApiError> {
        let request_id = request_id(parts);
        let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
        let secret = header("authorization")
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .or_else(|| header("x-api-key"))
            .map(str::trim);
        let (identity, missing) = match state.identity_for(secret) {
            Ok(identity) => (Some(identity), ""),
            // No credentials in the headers: a body may carry them.
            Err(why) if secret.is_none() => (None, why),
            Err(why) => {
                return Err(
                    ApiError::new(StatusCode::UNAUTHORIZED, Code::Unauthenticated, why)
                        .at(&request_id),
                )
            }
        };
        Ok(Caller {
            identity,
            missing,
            request_id,
        })
    }
}

fn request_id(parts: &Parts) -> String {
    parts
        .headers
        .get(crate::REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string()
}

impl Caller {
    pub(crate) fn err(&self, e: ApiError) -> ApiError {
        e.at(&self.request_id)
    }

    /// Takes the credentials of a body's `identity` when the headers had
    /// none (the API key, or a bearer token standing for one).
    pub(crate) fn identify(
        &mut self,
        state: &AppState,
        body: Option<&models::Identity>,
    ) -> Result<(), ApiError> {
        if self.identity.is_some() {
            return Ok(());
        }
        let secret = body.and_then(|i| i.api_key.as_deref().or(i.auth_token.as_deref()));
        if secret.is_some() {
            let identity = state.identity_for(secret).map_err(|why| {
                self.err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    Code::Unauthenticated,
                    why,
                ))
            })?;
            self.identity = Some(identity);
        }
        Ok(())
    }

    /// The identity, or 401 when no credentials came.
    pub(crate) fn authenticated(&self) -> Result<&Identity, ApiError> {
        self.identity.as_ref().ok_or_else(|| {
            self.err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                Code::Unauthenticated,
                self.missing,
            ))
        })
    }

    fn db(&self, e: tokio_postgres::Error) -> ApiError {
        ApiError::from_db(&e).at(&self.request_id)
    }

    /// The request's transaction, as the key's role, its name as the actor,
    /// with the service's statement timeout.
    async fn begin<'a>(
        &self,
        state: &AppState,
        client: &'a mut deadpool_postgres::Object,
    ) -> Result<deadpool_postgres::Transaction<'a>, ApiError> {
        let identity = self.authenticated()?;
        let tx = client.transaction().await.map_err(|e| self.db(e))?;
        let timeout = format!("{}ms", state.statement_timeout.as_millis());
        tx.execute(
            "SELECT set_config('micromegas_views.actor', $1, true), set_config('statement_timeout', $2, true)",
            &[&identity.actor, &timeout],
        )
        .await
        .map_err(|e| self.db(e))?;
        if let Some(role) = &identity.role {
            tx.execute("SELECT set_config('role', $1, true)", &[role])
                .await
                .map_err(|e| self.db(e))?;
        }
        Ok(tx)
    }

    /// One transaction of statements; the last one's rows.
    pub(crate) async fn run(
        &self,
        state: &AppState,
        steps: &[(&str, &[&(dyn tokio_postgres::types::ToSql + Sync)])],
    ) -> Result<Vec<tokio_postgres::Row>, ApiError> {
        let mut client = self.connection(state).await?;
        let result = async {
            let tx = self.begin(state, &mut client).await?;
            let mut rows = Vec::new();
            for (sql, params) in steps {
                rows = tx.query(*sql, params).await.map_err(|e| self.db(e))?;
            }
            tx.commit().await.map_err(|e| self.db(e))?;
            Ok(rows)
        }
        .await;
        // Reached only when no statement is left running (a dropped
        // request never gets here: see Conn).
        client.settle();
        result
    }

    /// One statement's one row, in its own transaction.
    pub(crate) async fn one_row(
        &self,
        state: &AppState,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<tokio_postgres::Row, ApiError> {
        self.run(state, &[(sql, params)])
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| {
                self.err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    Code::Internal,
                    "no row returned",
                ))
            })
    }

    async fn connection(&self, state: &AppState) -> Result<Conn, ApiError> {
        let object = state
            .pool
            .get()
            .await
            .map_err(|e| ApiError::from_pool(e).at(&self.request_id))?;
        Ok(Conn {
            cancel: object.cancel_token(),
            tls: state.tls.clone(),
            object: Some(object),
            settled: false,
        })
    }

    pub(crate) fn body<T: serde::de::DeserializeOwned>(
        &self,
        body: Result<Bytes, BytesRejection>,
    ) -> Result<T, ApiError> {
        let bytes = body.map_err(|rejection| {
            let status = rejection.status();
            self.err(ApiError::new(
                status,
                Code::InvalidInput,
                rejection.body_text(),
            ))
        })?;
        let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        serde_json::from_slice(bytes).map_err(|e| {
            let text = e.to_string();
            // serde's "missing field `kind` at line 1 column 2"
            if let Some(field) = text
                .strip_prefix("missing field `")
                .and_then(|rest| rest.split('`').next())
            {
                // A top-level field (serde does not say where a nested one
                // is missing).
                let top = serde_json::from_slice::<Value>(bytes)
                    .ok()
                    .and_then(|v| v.as_object().map(|o| !o.contains_key(field)))
                    .unwrap_or(false);
                if top {
                    return self.err(ApiError::invalid(format!(
                        "missing required field \"{field}\""
                    )));
                }
            }
            self.err(
                ApiError::invalid("the request body is not valid JSON for this operation")
                    // Quoted values of the body are not echoed (an
                    // identity's key might be one).
                    .with_detail(redacted(&text)),
            )
        })
    }

    pub(crate) fn view(
        &self,
        state: &AppState,
        id: &str,
        query: &HashMap<String, String>,
    ) -> Result<String, ApiError> {
        resolve_id(
            id,
            query.get("delimiter").map(String::as_str),
            &state.namespace,
        )
        .map_err(|e| self.err(e))
    }
}

/// The health the background probe last saw (see `crate::Health`): no
/// request takes a pool connection, so a flood of probes cannot starve the
/// API.
async fn healthz(State(state): State<Shared>) -> Answer {
    match state.health.latest() {
        Ok(()) => Ok((StatusCode::OK, Json(json!({"status": "ok"})))),
        Err(why) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            Code::ServiceUnavailable,
            why,
        )),
    }
}

/// The definition a request's `source_query` describes: the DDL statement,
/// or a JSON object of the options (the three queries, update_group, …).
fn definition(name: &str, source: &str) -> Result<Definition, ApiError> {
    if source.trim_start().starts_with('{') {
        let object: serde_json::Map<String, Value> = serde_json::from_str(source).map_err(|e| {
            ApiError::invalid("source_query is not a valid JSON object of options")
                .with_detail(e.to_string())
        })?;
        let text = |key: &str| object.get(key).and_then(Value::as_str).map(str::to_string);
        let update_group =
            match object.get("update_group") {
                None | Some(Value::Null) => None,
                Some(v) => Some(v.as_i64().and_then(|g| i32::try_from(g).ok()).ok_or_else(
                    || ApiError::invalid(format!("update_group must be a 32-bit integer, not {v}")),
                )?),
            };
        let mut options = serde_json::Map::new();
        for (key, value) in &object {
            match key.as_str() {
                "extract_query" | "count_src_query" | "merge_partitions_query" | "update_group" => {
                }
                _ => {
                    options.insert(key.clone(), value.clone());
                }
            }
        }
        return Definition::from_row(
            name,
            text("extract_query"),
            text("count_src_query"),
            text("merge_partitions_query"),
            update_group,
            Some(&Value::Object(options)),
        )
        .map_err(ApiError::from_core);
    }
    match micromegas_views_core::parse(source).map_err(ApiError::from_core)? {
        Statement::Create(statement) if statement.name == name => {
            Definition::from_statement(&statement).map_err(ApiError::from_core)
        }
        Statement::Create(statement) => Err(ApiError::invalid(format!(
            "source_query creates \"{}\", but the identifier names \"{name}\"",
            statement.name
        ))),
        Statement::Drop(_) => Err(ApiError::invalid(
            "source_query must be a CREATE MATERIALIZED VIEW statement or a JSON object of options",
        )),
    }
}

/// The first difference between the schema a client expects and the one
/// the view produces: a field's name, type or nullability, or a field one
/// side lacks.
fn first_difference(expected: &arrow_schema::Schema, actual: &arrow_schema::Schema) -> String {
    let (e, a) = (expected.fields(), actual.fields());
    for i in 0..e.len().max(a.len()) {
        match (e.get(i), a.get(i)) {
            (Some(x), Some(y)) if x.name() != y.name() => {
                return format!(
                    "field {i}: output_schema has \"{}\", the view produces \"{}\"",
                    x.name(),
                    y.name()
                )
            }
            (Some(x), Some(y)) if x.data_type() != y.data_type() => {
                return format!(
                    "field \"{}\": output_schema has type {}, the view produces {}",
                    x.name(),
                    x.data_type(),
                    y.data_type()
                )
            }
            (Some(x), Some(y)) if x.is_nullable() != y.is_nullable() => {
                let word = |n: bool| if n { "nullable" } else { "not null" };
                return format!(
                    "field \"{}\": output_schema has it {}, the view produces it {}",
                    x.name(),
                    word(x.is_nullable()),
                    word(y.is_nullable())
                );
            }
            (Some(x), None) => {
                return format!(
                    "field \"{}\": output_schema has it, the view does not produce it",
                    x.name()
                )
            }
            (None, Some(y)) => {
                return format!(
                    "field \"{}\": the view produces it, output_schema lacks it",
                    y.name()
                )
            }
            _ => {}
        }
    }
    "the schemas differ in their metadata".to_string()
}

async fn create(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    mut caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let name = caller.view(&state, &id, &query)?;
    let request: models::CreateMaterializedViewRequest = caller.body(body)?;
    caller.identify(&state, request.identity.as_deref())?;
    caller.authenticated()?;
    if let Some(path) = &request.id {
        check_body_id(path, &name, &state.namespace).map_err(|e| caller.err(e))?;
    }
    let kind = match request.kind {
        models::create_materialized_view_request::Kind::Query => "query",
        models::create_materialized_view_request::Kind::Udtf => "udtf",
        models::create_materialized_view_request::Kind::Chunker => "chunker",
    };
    if kind != "query" {
        return Err(caller.err(
            ApiError::new(
                StatusCode::BAD_REQUEST,
                Code::Unsupported,
                format!("materialized view kind \"{kind}\" is not supported"),
            )
            .with_detail("This namespace stores micromegas view sets: only kind \"query\"."),
        ));
    }
    if matches!(request.udtf_spec, Some(Some(_))) {
        return Err(caller.err(
            ApiError::invalid("udtf_spec is valid only for materialized views of kind \"udtf\"")
                .with_detail("This request's kind is \"query\"."),
        ));
    }
    let source = request.source_query.as_str();
    let output_schema = request.output_schema.as_str();
    let expected = schema::from_ipc_base64(output_schema).map_err(|e| {
        caller.err(ApiError::from_core(e).with_detail(
            "output_schema must be a base64 Arrow IPC stream holding the view's schema",
        ))
    })?;
    let mut definition = definition(&name, source).map_err(|e| caller.err(e))?;
    // The micromegas DDL may say OR REPLACE (the spec's create of an
    // existing table is otherwise 409 TableAlreadyExists).
    let or_replace = !source.trim_start().starts_with('{')
        && matches!(micromegas_views_core::parse(source), Ok(Statement::Create(c)) if c.or_replace);
    if let Some(v) = request.with_no_data {
        definition.options.with_no_data = v;
    }
    if let Some(Some(v)) = request.auto_refresh {
        definition.options.auto_refresh = v;
    }
    let statement = definition.render(or_replace);

    let mut client = caller.connection(&state).await?;
    let outcome = async {
        let tx = caller.begin(&state, &mut client).await?;
        let row = tx
            .query_one(
                "SELECT version, job_id::text FROM micromegas.mm_create_view($1::text)",
                &[&statement],
            )
            .await
            .map_err(|e| caller.db(e))?;
        let (version, job_id): (i64, Option<String>) = (row.get(0), row.get(1));
        let produced: String = tx
            .query_one(
                "SELECT schema_ipc FROM micromegas.lakehouse_view_set_definitions WHERE view_set_name = $1",
                &[&name],
            )
            .await
            .map_err(|e| caller.db(e))?
            .get(0);
        let produced =
            schema::from_ipc_base64(&produced).map_err(|e| caller.err(ApiError::from_core(e)))?;
        if schema::schema_hash_bytes(&expected) != schema::schema_hash_bytes(&produced) {
            // Dropping the transaction rolls the create back.
            return Err(caller.err(
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    Code::TableSchemaValidationError,
                    format!("output_schema does not match the schema of materialized view \"{name}\""),
                )
                .with_detail(first_difference(&expected, &produced)),
            ));
        }
        tx.commit().await.map_err(|e| caller.db(e))?;
        Ok::<_, ApiError>((version, job_id))
    }
    .await;
    // Every statement of the request finished (see Conn).
    client.settle();
    let (version, job_id) = outcome?;
    let mut response = models::CreateMaterializedViewResponse::new(version);
    response.job_id = Some(job_id);
    response.context = request.context;
    Ok((
        StatusCode::CREATED,
        Json(serde_json::to_value(response).expect("models serialize")),
    ))
}

/// The job parameters of a refresh: only the spec's fields a worker acts
/// on, validated; `identity` (credentials) and `context` are read for
/// nothing and never stored or logged.
fn job_params(request: &models::RefreshMaterializedViewRequest) -> Result<Value, ApiError> {
    if matches!(request.output_limit, Some(Some(_))) {
        return Err(
            ApiError::invalid("output_limit is valid only for chunker materialized views")
                .with_detail("The views of this namespace are of kind \"query\"."),
        );
    }
    if matches!(request.manifest, Some(Some(_))) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            Code::Unsupported,
            "manifest overrides are not supported",
        )
        .with_detail("The views of this namespace are micromegas view sets, not Geneva views."));
    }
    let mut params = serde_json::Map::new();
    if let Some(Some(v)) = request.src_version {
        if v < 0 {
            return Err(ApiError::invalid(format!(
                "src_version must not be negative, not {v}"
            )));
        }
        params.insert("src_version".into(), v.into());
    }
    for (field, value) in [
        ("max_rows_per_fragment", request.max_rows_per_fragment),
        ("concurrency", request.concurrency),
        (
            "intra_applier_concurrency",
            request.intra_applier_concurrency,
        ),
        ("source_task_size", request.source_task_size),
    ] {
        if let Some(Some(v)) = value {
            if v < 1 {
                return Err(ApiError::invalid(format!(
                    "{field} must be at least 1, not {v}"
                )));
            }
            params.insert(field.into(), v.into());
        }
    }
    if let Some(Some(cluster)) = &request.cluster {
        params.insert("cluster".into(), cluster.clone().into());
    }
    Ok(Value::Object(params))
}

async fn refresh(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    mut caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let name = caller.view(&state, &id, &query)?;
    let request: models::RefreshMaterializedViewRequest = caller.body(body)?;
    caller.identify(&state, request.identity.as_deref())?;
    if let Some(path) = &request.id {
        check_body_id(path, &name, &state.namespace).map_err(|e| caller.err(e))?;
    }
    let params = job_params(&request).map_err(|e| caller.err(e))?;
    let job_id: String = caller
        .one_row(
            &state,
            "SELECT micromegas.mm_refresh_view($1::text, NULL::timestamptz, NULL::timestamptz, $2::jsonb)::text",
            &[&name, &params],
        )
        .await?
        .get(0);
    let mut response = models::RefreshMaterializedViewResponse::new(job_id);
    response.context = request.context;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::to_value(response).expect("models serialize")),
    ))
}

async fn describe(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let name = caller.view(&state, &id, &query)?;
    let _: Value = caller.body(body)?;
    let row = caller
        .one_row(
            &state,
            "SELECT v.version, v.definition_sql, v.load_status, v.load_error, v.update_group, d.schema_ipc,
                    coalesce((d.view_options->>'auto_refresh')::boolean, false), d.updated_by, d.updated_at::text,
                    d.warnings::text
               FROM micromegas.mm_describe_view($1::text) v
               JOIN micromegas.lakehouse_view_set_definitions d ON d.view_set_name = v.view_set_name",
            &[&name],
        )
        .await?;
    let mut id_path = state.namespace.clone();
    id_path.push(name);
    Ok((
        StatusCode::OK,
        Json(json!({
            "id": id_path,
            "kind": "query",
            "version": row.get::<_, Option<i64>>(0),
            "source_query": row.get::<_, String>(1),
            "load_status": row.get::<_, String>(2),
            "load_error": row.get::<_, Option<String>>(3),
            "update_group": row.get::<_, i32>(4),
            "output_schema": row.get::<_, String>(5),
            "auto_refresh": row.get::<_, bool>(6),
            "updated_by": row.get::<_, Option<String>>(7),
            "updated_at": row.get::<_, String>(8),
            // The view's properties (string values, as Lance properties
            // are): the author checks' findings as a JSON array.
            "properties": {"warnings": row.get::<_, String>(9)},
        })),
    ))
}

async fn drop_view(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let name = caller.view(&state, &id, &query)?;
    let _: Value = caller.body(body)?;
    let row = caller
        .one_row(
            &state,
            "SELECT version, partitions_retired, bytes_queued
               FROM micromegas.mm_drop_view($1::text::micromegas.view_set_name, false)",
            &[&name],
        )
        .await?;
    Ok((
        StatusCode::OK,
        Json(json!({
            "version": row.get::<_, i64>(0),
            "partitions_retired": row.get::<_, i64>(1),
            "bytes_queued": row.get::<_, i64>(2),
        })),
    ))
}

const MAX_PAGE: i64 = 1000;

fn page_limit(caller: &Caller, raw: Option<&str>) -> Result<i64, ApiError> {
    match raw {
        None => Ok(100),
        Some(text) => match text.parse::<i64>() {
            Ok(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
            _ => Err(caller.err(ApiError::invalid(format!(
                "limit must be an integer from 1 to {MAX_PAGE}, not \"{text}\""
            )))),
        },
    }
}

pub(crate) fn encode_token(text: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

pub(crate) fn decode_token(caller: &Caller, token: &str) -> Result<String, ApiError> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| caller.err(ApiError::invalid("invalid page_token")))
}

async fn list(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    caller: Caller,
) -> Answer {
    resolve_namespace(
        &id,
        query.get("delimiter").map(String::as_str),
        &state.namespace,
    )
    .map_err(|e| caller.err(e))?;
    let limit = page_limit(&caller, query.get("limit").map(String::as_str))?;
    let after = match query.get("page_token").filter(|t| !t.is_empty()) {
        Some(token) => Some(decode_token(&caller, token)?),
        None => None,
    };
    // Ordered by name, resumed after the last name returned: a page never
    // repeats or skips a view that existed throughout.
    let sql = "SELECT view_set_name FROM micromegas.list_view_set_definitions()
                WHERE $1::text IS NULL OR view_set_name > $1 ORDER BY view_set_name LIMIT $2";
    let rows = caller
        .run(&state, &[(sql, &[&after, &(limit + 1)])])
        .await?;
    let mut views: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    let next = if views.len() as i64 > limit {
        views.truncate(limit as usize);
        views.last().map(|v| encode_token(v))
    } else {
        None
    };
    Ok((
        StatusCode::OK,
        Json(json!({"views": views, "page_token": next})),
    ))
}

#[derive(Deserialize)]
struct JobRequest {
    job_id: Option<String>,
}

/// The spec's job states: IN_PROGRESS while queued or running.
fn job_state(state: &str) -> &'static str {
    match state {
        "done" => "DONE",
        "failed" => "FAILED",
        "cancelled" => "CANCELLED",
        _ => "IN_PROGRESS",
    }
}

fn job_json(row: &tokio_postgres::Row) -> Value {
    let state: String = row.get(3);
    let failure = (state == "failed").then(|| {
        json!({
            "phase": row.get::<_, Option<String>>(4),
            "message": row.get::<_, Option<String>>(5),
            "retryable": row.get::<_, Option<bool>>(6).unwrap_or(false),
        })
    });
    json!({
        "job_id": row.get::<_, String>(0),
        "kind": row.get::<_, String>(1),
        "view_set_name": row.get::<_, String>(2),
        "job_state": job_state(&state),
        "state": state,
        "failure": failure,
        "attempts": row.get::<_, i32>(7),
        "created_at": row.get::<_, String>(8),
    })
}

const JOB_COLUMNS: &str =
    "job_id::text, kind, view_set_name, state, failure_phase, failure_message,
                           failure_retryable, attempts, created_at::text";

impl Caller {
    fn job_id(&self, body: Result<Bytes, BytesRejection>) -> Result<String, ApiError> {
        let request: JobRequest = self.body(body)?;
        request
            .job_id
            .ok_or_else(|| self.err(ApiError::invalid("missing required field \"job_id\"")))
    }
}

async fn describe_job(
    State(state): State<Shared>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let job_id = caller.job_id(body)?;
    let describe = format!("SELECT {JOB_COLUMNS} FROM micromegas.mm_job($1::text::uuid)");
    let row = caller.one_row(&state, &describe, &[&job_id]).await?;
    Ok((StatusCode::OK, Json(job_json(&row))))
}

async fn cancel_job(
    State(state): State<Shared>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let job_id = caller.job_id(body)?;
    let describe = format!("SELECT {JOB_COLUMNS} FROM micromegas.mm_job($1::text::uuid)");
    let rows = caller
        .run(
            &state,
            &[
                (
                    "SELECT micromegas.mm_cancel_job($1::text::uuid)",
                    &[&job_id],
                ),
                (&describe, &[&job_id]),
            ],
        )
        .await?;
    Ok((StatusCode::OK, Json(job_json(&rows[0]))))
}

#[derive(Deserialize)]
struct ListJobsRequest {
    /// A view's identifier (namespace + name, or the name).
    id: Option<Vec<String>>,
    job_state: Option<String>,
    limit: Option<i64>,
    page_token: Option<String>,
}

async fn list_jobs(
    State(state): State<Shared>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let request: ListJobsRequest = caller.body(body)?;
    let view = match &request.id {
        Some(parts) if !parts.is_empty() => Some(
            resolve_id(
                &parts.join(crate::ids::DEFAULT_DELIMITER),
                None,
                &state.namespace,
            )
            .map_err(|e| caller.err(e))?,
        ),
        _ => None,
    };
    let states: Option<Vec<String>> = match request.job_state.as_deref() {
        None => None,
        Some("IN_PROGRESS") => Some(vec!["queued".into(), "running".into()]),
        Some("DONE") => Some(vec!["done".into()]),
        Some("FAILED") => Some(vec!["failed".into()]),
        Some("CANCELLED") => Some(vec!["cancelled".into()]),
        Some(other) => {
            return Err(caller.err(ApiError::invalid(format!(
                "unknown job_state \"{other}\": IN_PROGRESS, DONE, FAILED or CANCELLED"
            ))))
        }
    };
    let limit = page_limit(&caller, request.limit.map(|l| l.to_string()).as_deref())?;
    let offset: i64 = match request.page_token.as_deref().filter(|t| !t.is_empty()) {
        Some(token) => decode_token(&caller, token)?
            .parse()
            .map_err(|_| caller.err(ApiError::invalid("invalid page_token")))?,
        None => 0,
    };
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM micromegas.jobs
          WHERE ($1::text IS NULL OR view_set_name = $1) AND ($2::text[] IS NULL OR state = ANY ($2))
          ORDER BY created_at DESC, job_id LIMIT $3 OFFSET $4"
    );
    let rows = caller
        .run(&state, &[(&sql, &[&view, &states, &(limit + 1), &offset])])
        .await?;
    let more = rows.len() as i64 > limit;
    let jobs: Vec<Value> = rows.iter().take(limit as usize).map(job_json).collect();
    let next = more.then(|| encode_token(&(offset + limit).to_string()));
    Ok((
        StatusCode::OK,
        Json(json!({"jobs": jobs, "page_token": next})),
    ))
}
