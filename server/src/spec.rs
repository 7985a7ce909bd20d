//! The Lance Namespace operations a materialized view answers as a table of
//! the namespace (DescribeTable, ListTables, TableExists, DropTable, the
//! table versions, RestoreTable) and the namespace's own (ListNamespaces,
//! DescribeNamespace, NamespaceExists), with the spec's generated models
//! (`lance-namespace-reqwest-client`) as request and response types. Every
//! other operation of the spec answers Unsupported.

use crate::errors::{ApiError, Code};
use crate::ids::{check_body_id, resolve_namespace};
use crate::routes::{decode_token, encode_token, Answer, Caller, Shared};
use arrow_schema::{DataType, Field, Schema};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode, Uri};
use axum::Json;
use lance_namespace_reqwest_client::models;
use micromegas_views_core::schema;
use std::collections::HashMap;

/// The prefix of the table properties this server adds (not the spec's).
pub const PROPERTY_PREFIX: &str = "micromegas.";

/// Largest page a listing returns; a larger `limit` is clamped to it (the
/// spec's limit is an upper bound of what the caller receives).
pub const MAX_PAGE: i64 = 1000;
const DEFAULT_PAGE: i64 = 100;

/// A page size from `limit`: absent is the default, above the maximum is
/// clamped, zero or negative is invalid.
pub fn page_size(caller: &Caller, limit: Option<i64>) -> Result<i64, ApiError> {
    match limit {
        None => Ok(DEFAULT_PAGE),
        Some(n) if n >= 1 => Ok(n.min(MAX_PAGE)),
        Some(n) => Err(caller.err(ApiError::invalid(format!(
            "limit must be at least 1, not {n}"
        )))),
    }
}

fn query_limit(caller: &Caller, query: &HashMap<String, String>) -> Result<Option<i64>, ApiError> {
    match query.get("limit").filter(|t| !t.is_empty()) {
        None => Ok(None),
        Some(text) => text.parse::<i64>().map(Some).map_err(|_| {
            caller.err(ApiError::invalid(format!(
                "limit must be an integer, not \"{text}\""
            )))
        }),
    }
}

/// An Arrow type as the spec's JSON Arrow data type: `type` is the type in
/// this extension's canonical grammar (the spec leaves the names open),
/// with the children of lists, structs and maps as `fields` and the width
/// of fixed-size types as `length`.
fn json_type(t: &DataType) -> models::JsonArrowDataType {
    let mut out = models::JsonArrowDataType::new(schema::canonical_type(t));
    match t {
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::Map(f, _) => {
            out.fields = Some(vec![json_field(f)]);
        }
        DataType::FixedSizeList(f, n) => {
            out.fields = Some(vec![json_field(f)]);
            out.length = Some(i64::from(*n));
        }
        DataType::FixedSizeBinary(n) => out.length = Some(i64::from(*n)),
        DataType::Struct(fields) => {
            out.fields = Some(fields.iter().map(|f| json_field(f)).collect());
        }
        _ => {}
    }
    out
}

fn json_field(f: &Field) -> models::JsonArrowField {
    let mut out =
        models::JsonArrowField::new(f.name().clone(), f.is_nullable(), json_type(f.data_type()));
    if !f.metadata().is_empty() {
        out.metadata = Some(f.metadata().clone().into_iter().collect());
    }
    out
}

/// A schema as the spec's JSON Arrow schema.
pub fn json_schema(s: &Schema) -> models::JsonArrowSchema {
    let mut out = models::JsonArrowSchema::new(s.fields().iter().map(|f| json_field(f)).collect());
    if !s.metadata().is_empty() {
        out.metadata = Some(s.metadata().clone().into_iter().collect());
    }
    out
}

/// TableNotFound unless the view exists or has a history.
async fn known(caller: &Caller, state: &crate::AppState, name: &str) -> Result<(), ApiError> {
    let found: bool = caller
        .one_row(
            state,
            "SELECT EXISTS (SELECT 1 FROM micromegas.lakehouse_view_set_definitions d WHERE d.view_set_name = $1)
                 OR EXISTS (SELECT 1 FROM micromegas.lakehouse_view_set_definition_history h WHERE h.view_set_name = $1)",
            &[&name],
        )
        .await?
        .get(0);
    if !found {
        return Err(caller.err(ApiError::new(
            StatusCode::NOT_FOUND,
            Code::TableNotFound,
            format!("materialized view \"{name}\" does not exist"),
        )));
    }
    Ok(())
}

/// A version the view never had: TableVersionNotFound, not TableNotFound
/// (asked after [`known`], so the view itself exists or existed).
fn version_error(mut e: ApiError) -> ApiError {
    if e.code == Code::TableNotFound && e.error.contains("has no version") {
        e.code = Code::TableVersionNotFound;
    }
    e
}

fn ok<T: serde::Serialize>(status: StatusCode, body: T) -> Answer {
    Ok((
        status,
        Json(serde_json::to_value(body).expect("models serialize")),
    ))
}

fn refuse_branch_and_tag(
    caller: &Caller,
    branch: Option<&str>,
    tag: Option<&str>,
) -> Result<(), ApiError> {
    if branch.is_some() || tag.is_some() {
        return Err(caller.err(ApiError::new(
            StatusCode::NOT_ACCEPTABLE,
            Code::Unsupported,
            "tables of this namespace have no branches or tags",
        )));
    }
    Ok(())
}

// ---- the namespace ------------------------------------------------------

/// ListNamespaces: the root has the configured namespace; it has none.
pub async fn list_namespaces(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    caller: Caller,
) -> Answer {
    caller.authenticated()?;
    let delimiter = query.get("delimiter").map(String::as_str);
    resolve_namespace(&id, delimiter, &state.namespace).map_err(|e| caller.err(e))?;
    page_size(&caller, query_limit(&caller, &query)?)?;
    let root = id == delimiter.unwrap_or(crate::ids::DEFAULT_DELIMITER);
    let namespaces = if root {
        vec![state.namespace.join(crate::ids::DEFAULT_DELIMITER)]
    } else {
        Vec::new()
    };
    let mut response = models::ListNamespacesResponse::new(namespaces);
    response.page_token = None;
    ok(StatusCode::OK, response)
}

/// DescribeNamespace: its properties (this server's own).
pub async fn describe_namespace(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    mut caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let request: models::DescribeNamespaceRequest = caller.body(body)?;
    caller.identify(&state, request.identity.as_deref())?;
    caller.authenticated()?;
    resolve_namespace(
        &id,
        query.get("delimiter").map(String::as_str),
        &state.namespace,
    )
    .map_err(|e| caller.err(e))?;
    let version: i64 = caller
        .one_row(&state, "SELECT micromegas.mm_catalog_version()", &[])
        .await?
        .get(0);
    let mut response = models::DescribeNamespaceResponse::new();
    response.properties = Some(HashMap::from([
        (
            format!("{PROPERTY_PREFIX}catalog_version"),
            version.to_string(),
        ),
        (
            format!("{PROPERTY_PREFIX}kind"),
            "materialized views of micromegas view sets".to_string(),
        ),
    ]));
    ok(StatusCode::OK, response)
}

/// NamespaceExists: 200 without a body, or 404.
pub async fn namespace_exists(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    mut caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let request: models::NamespaceExistsRequest = caller.body(body)?;
    caller.identify(&state, request.identity.as_deref())?;
    caller.authenticated()?;
    resolve_namespace(
        &id,
        query.get("delimiter").map(String::as_str),
        &state.namespace,
    )
    .map_err(|e| caller.err(e))?;
    Ok(StatusCode::OK)
}

/// ListTables: the materialized views by name, paged.
pub async fn list_tables(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    caller: Caller,
) -> Answer {
    caller.authenticated()?;
    resolve_namespace(
        &id,
        query.get("delimiter").map(String::as_str),
        &state.namespace,
    )
    .map_err(|e| caller.err(e))?;
    let limit = page_size(&caller, query_limit(&caller, &query)?)?;
    let after = match query.get("page_token").filter(|t| !t.is_empty()) {
        Some(token) => Some(decode_token(&caller, token)?),
        None => None,
    };
    let sql = "SELECT view_set_name FROM micromegas.list_view_set_definitions()
                WHERE $1::text IS NULL OR view_set_name > $1 ORDER BY view_set_name LIMIT $2";
    let rows = caller
        .run(&state, &[(sql, &[&after, &(limit + 1)])])
        .await?;
    let mut tables: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    let next = if tables.len() as i64 > limit {
        tables.truncate(limit as usize);
        tables.last().map(|v| encode_token(v))
    } else {
        None
    };
    // From the root, the tables of the child namespace, as full
    // identifiers (the spec's listing is recursive); from the namespace,
    // its tables' names.
    let delimiter = query
        .get("delimiter")
        .map(String::as_str)
        .unwrap_or(crate::ids::DEFAULT_DELIMITER);
    if id == delimiter {
        let prefix = state.namespace.join(delimiter);
        tables = tables
            .into_iter()
            .map(|t| format!("{prefix}{delimiter}{t}"))
            .collect();
    }
    let mut response = models::ListTablesResponse::new(tables);
    response.page_token = next;
    ok(StatusCode::OK, response)
}

// ---- a materialized view as a table ----------------------------------

/// The view's describe: its version (the catalog version of its latest
/// change), schema, and this server's properties.
const DESCRIBE_SQL: &str = "
    SELECT v.version, v.definition_sql, v.load_status, v.load_error, v.update_group,
           coalesce(h.schema_ipc, d.schema_ipc), encode(v.schema_hash, 'hex'),
           coalesce((coalesce(h.view_options, d.view_options)->>'auto_refresh')::boolean, false),
           CASE WHEN $2::bigint IS NULL THEN d.warnings::text END,
           v.updated_by, (extract(epoch FROM v.changed_at) * 1000)::bigint
      FROM micromegas.mm_describe_view($1::text, $2::bigint) v
      LEFT JOIN micromegas.lakehouse_view_set_definitions d ON d.view_set_name = v.view_set_name
      LEFT JOIN micromegas.lakehouse_view_set_definition_history h
             ON h.view_set_name = v.view_set_name AND h.version = v.version AND $2::bigint IS NOT NULL";

pub async fn describe_table(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    mut caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let request: models::DescribeTableRequest = caller.body(body)?;
    caller.identify(&state, request.identity.as_deref())?;
    caller.authenticated()?;
    let name = caller.view(&state, &id, &query)?;
    if let Some(path) = &request.id {
        check_body_id(path, &name, &state.namespace).map_err(|e| caller.err(e))?;
    }
    refuse_branch_and_tag(&caller, request.branch.as_deref(), request.tag.as_deref())?;
    if request.vend_credentials == Some(true) {
        return Err(caller.err(ApiError::new(
            StatusCode::NOT_ACCEPTABLE,
            Code::Unsupported,
            "this namespace vends no storage credentials",
        )));
    }
    if request.version.is_some() {
        known(&caller, &state, &name).await?;
    }
    let row = caller
        .one_row(&state, DESCRIBE_SQL, &[&name, &request.version])
        .await
        .map_err(version_error)?;
    let schema_ipc: Option<String> = row.get(5);
    let arrow = schema_ipc
        .as_deref()
        .map(schema::from_ipc_base64)
        .transpose()
        .map_err(|e| caller.err(ApiError::from_core(e)))?;
    let mut properties = HashMap::from([
        (
            format!("{PROPERTY_PREFIX}definition_sql"),
            row.get::<_, String>(1),
        ),
        (
            format!("{PROPERTY_PREFIX}load_status"),
            row.get::<_, String>(2),
        ),
        (
            format!("{PROPERTY_PREFIX}update_group"),
            row.get::<_, i32>(4).to_string(),
        ),
        (
            format!("{PROPERTY_PREFIX}schema_hash"),
            row.get::<_, String>(6),
        ),
        (
            format!("{PROPERTY_PREFIX}auto_refresh"),
            row.get::<_, bool>(7).to_string(),
        ),
    ]);
    // The author checks' findings of the current definition (a past
    // version's are not kept).
    if let Some(warnings) = row.get::<_, Option<String>>(8) {
        properties.insert(format!("{PROPERTY_PREFIX}warnings"), warnings);
    }
    if let Some(error) = row.get::<_, Option<String>>(3) {
        properties.insert(format!("{PROPERTY_PREFIX}load_error"), error);
    }
    if let Some(ipc) = schema_ipc {
        properties.insert(format!("{PROPERTY_PREFIX}schema_ipc"), ipc);
    }
    let mut response = models::DescribeTableResponse::new();
    response.table = Some(name);
    response.namespace = Some(state.namespace.clone());
    response.version = row.get(0);
    response.schema = arrow.map(|s| Box::new(json_schema(&s)));
    response.properties = Some(properties);
    ok(StatusCode::OK, response)
}

/// TableExists: 200 without a body, or 404 TableNotFound.
pub async fn table_exists(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    mut caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let request: models::TableExistsRequest = caller.body(body)?;
    caller.identify(&state, request.identity.as_deref())?;
    caller.authenticated()?;
    let name = caller.view(&state, &id, &query)?;
    if let Some(path) = &request.id {
        check_body_id(path, &name, &state.namespace).map_err(|e| caller.err(e))?;
    }
    if request.version.is_some() {
        known(&caller, &state, &name).await?;
    }
    caller
        .one_row(
            &state,
            "SELECT 1 FROM micromegas.mm_describe_view($1::text, $2::bigint)",
            &[&name, &request.version],
        )
        .await
        .map_err(version_error)?;
    Ok(StatusCode::OK)
}

/// DropTable: drops the view (its partitions retired, as mm_drop_view).
pub async fn drop_table(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    mut caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let request: models::DropTableRequest = caller.body(body)?;
    caller.identify(&state, request.identity.as_deref())?;
    caller.authenticated()?;
    let name = caller.view(&state, &id, &query)?;
    if let Some(path) = &request.id {
        check_body_id(path, &name, &state.namespace).map_err(|e| caller.err(e))?;
    }
    let row = caller
        .one_row(
            &state,
            "SELECT version, partitions_retired, bytes_queued
               FROM micromegas.mm_drop_view($1::text::micromegas.view_set_name, false)",
            &[&name],
        )
        .await?;
    let mut id_path = state.namespace.clone();
    id_path.push(name);
    let mut response = models::DropTableResponse::new();
    response.id = Some(id_path);
    response.properties = Some(HashMap::from([
        (
            format!("{PROPERTY_PREFIX}version"),
            row.get::<_, i64>(0).to_string(),
        ),
        (
            format!("{PROPERTY_PREFIX}partitions_retired"),
            row.get::<_, i64>(1).to_string(),
        ),
        (
            format!("{PROPERTY_PREFIX}bytes_queued"),
            row.get::<_, i64>(2).to_string(),
        ),
    ]));
    ok(StatusCode::OK, response)
}

const VERSIONS_SQL: &str = "
    SELECT h.version, h.operation, encode(h.schema_hash, 'hex'), h.load_status, h.updated_by,
           (extract(epoch FROM h.changed_at) * 1000)::bigint, h.definition_sql
      FROM micromegas.lakehouse_view_set_definition_history h
     WHERE h.view_set_name = $1";

fn table_version(name: &str, row: &tokio_postgres::Row) -> models::TableVersion {
    let version: i64 = row.get(0);
    // No manifest: the path names the definition's version (ours).
    let mut out = models::TableVersion::new(version, format!("micromegas:{name}@{version}"));
    out.timestamp_millis = row.get(5);
    let mut metadata = HashMap::from([
        (
            format!("{PROPERTY_PREFIX}operation"),
            row.get::<_, String>(1),
        ),
        (
            format!("{PROPERTY_PREFIX}schema_hash"),
            row.get::<_, String>(2),
        ),
        (
            format!("{PROPERTY_PREFIX}load_status"),
            row.get::<_, String>(3),
        ),
        (
            format!("{PROPERTY_PREFIX}definition_sql"),
            row.get::<_, String>(6),
        ),
    ]);
    if let Some(by) = row.get::<_, Option<String>>(4) {
        metadata.insert(format!("{PROPERTY_PREFIX}updated_by"), by);
    }
    out.metadata = Some(metadata);
    out
}

/// ListTableVersions: the definition's history, latest first when asked.
pub async fn list_table_versions(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    mut caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let request: models::ListTableVersionsRequest = caller.body(body)?;
    caller.identify(&state, request.identity.as_deref())?;
    caller.authenticated()?;
    let name = caller.view(&state, &id, &query)?;
    if let Some(path) = &request.id {
        check_body_id(path, &name, &state.namespace).map_err(|e| caller.err(e))?;
    }
    refuse_branch_and_tag(
        &caller,
        request
            .branch
            .as_deref()
            .or(query.get("branch").map(String::as_str)),
        None,
    )?;
    let limit = match query_limit(&caller, &query)? {
        Some(l) => page_size(&caller, Some(l))?,
        None => page_size(&caller, request.limit.map(i64::from))?,
    };
    let token = query
        .get("page_token")
        .cloned()
        .or(request.page_token.clone())
        .filter(|t| !t.is_empty());
    let descending = query
        .get("descending")
        .map(|d| d.eq_ignore_ascii_case("true") || d == "1")
        .or(request.descending)
        .unwrap_or(false);
    let after: Option<i64> = match token {
        Some(t) => Some(
            decode_token(&caller, &t)?
                .parse()
                .map_err(|_| caller.err(ApiError::invalid("invalid page_token")))?,
        ),
        None => None,
    };
    // The view must exist now or have a history (a dropped view's versions
    // are what RestoreTable brings back).
    known(&caller, &state, &name).await?;
    let sql = format!(
        "{VERSIONS_SQL} AND ($2::bigint IS NULL OR h.version {} $2) ORDER BY h.version {} LIMIT $3",
        if descending { "<" } else { ">" },
        if descending { "DESC" } else { "ASC" }
    );
    let rows = caller
        .run(&state, &[(&sql, &[&name, &after, &(limit + 1)])])
        .await?;
    let mut versions: Vec<models::TableVersion> =
        rows.iter().map(|r| table_version(&name, r)).collect();
    let next = if versions.len() as i64 > limit {
        versions.truncate(limit as usize);
        versions
            .last()
            .map(|v| encode_token(&v.version.to_string()))
    } else {
        None
    };
    let mut response = models::ListTableVersionsResponse::new(versions);
    response.page_token = next;
    ok(StatusCode::OK, response)
}

/// DescribeTableVersion: one version of the definition (the latest when
/// none is given).
pub async fn describe_table_version(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    mut caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let request: models::DescribeTableVersionRequest = caller.body(body)?;
    caller.identify(&state, request.identity.as_deref())?;
    caller.authenticated()?;
    let name = caller.view(&state, &id, &query)?;
    if let Some(path) = &request.id {
        check_body_id(path, &name, &state.namespace).map_err(|e| caller.err(e))?;
    }
    refuse_branch_and_tag(&caller, request.branch.as_deref(), None)?;
    known(&caller, &state, &name).await?;
    // mm_describe_view raises "has no version N" (P0002) for a version the
    // view never had; without a version, the latest one (of a dropped view
    // too).
    let version: i64 = match request.version {
        Some(v) => caller
            .one_row(&state, "SELECT version FROM micromegas.mm_describe_view($1::text, $2::bigint)", &[&name, &v])
            .await
            .map_err(version_error)?
            .get(0),
        None => caller
            .one_row(
                &state,
                "SELECT max(h.version) FROM micromegas.lakehouse_view_set_definition_history h WHERE h.view_set_name = $1",
                &[&name],
            )
            .await?
            .get::<_, Option<i64>>(0)
            .ok_or_else(|| {
                caller.err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    Code::TableVersionNotFound,
                    format!("materialized view \"{name}\" has no recorded version"),
                ))
            })?,
    };
    let sql = format!("{VERSIONS_SQL} AND h.version = $2");
    let row = caller.one_row(&state, &sql, &[&name, &version]).await?;
    ok(
        StatusCode::OK,
        models::DescribeTableVersionResponse::new(table_version(&name, &row)),
    )
}

/// RestoreTable: the definition as it was at `version` (mm_restore_view).
pub async fn restore_table(
    State(state): State<Shared>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    mut caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    let request: models::RestoreTableRequest = caller.body(body)?;
    caller.identify(&state, request.identity.as_deref())?;
    caller.authenticated()?;
    let name = caller.view(&state, &id, &query)?;
    if let Some(path) = &request.id {
        check_body_id(path, &name, &state.namespace).map_err(|e| caller.err(e))?;
    }
    refuse_branch_and_tag(&caller, request.branch.as_deref(), None)?;
    known(&caller, &state, &name).await?;
    let row = caller
        .one_row(
            &state,
            "SELECT version FROM micromegas.mm_restore_view($1::text, $2::bigint)",
            &[&name, &request.version],
        )
        .await
        .map_err(version_error)?;
    let mut response = models::RestoreTableResponse::new();
    response.context = Some(HashMap::from([(
        format!("{PROPERTY_PREFIX}version"),
        row.get::<_, i64>(0).to_string(),
    )]));
    ok(StatusCode::OK, response)
}

// ---- everything else ----------------------------------------------------

/// The spec's paths this server does not implement: each answers 406
/// Unsupported (a path outside the spec answers 404).
const SPEC_PATHS: &[&str] = &[
    "/v1/namespace/{}/create",
    "/v1/namespace/{}/drop",
    "/v1/table",
    "/v1/table/{}/register",
    "/v1/table/{}/deregister",
    "/v1/table/{}/rename",
    "/v1/table/{}/schema_metadata/update",
    "/v1/table/{}/version/create",
    "/v1/table/{}/version/delete",
    "/v1/table/version/batch-create",
    "/v1/table/batch-commit",
    "/v1/table/{}/alter_columns",
    "/v1/table/{}/update_field_metadata",
    "/v1/table/{}/drop_columns",
    "/v1/table/{}/stats",
    "/v1/table/{}/insert",
    "/v1/table/{}/merge_insert",
    "/v1/table/{}/update",
    "/v1/table/{}/delete",
    "/v1/table/{}/query",
    "/v1/table/{}/count_rows",
    "/v1/table/{}/create",
    "/v1/table/{}/explain_plan",
    "/v1/table/{}/analyze_plan",
    "/v1/table/{}/add_columns",
    "/v1/table/{}/backfill_column",
    "/v1/table/{}/create_index",
    "/v1/table/{}/create_scalar_index",
    "/v1/table/{}/index/list",
    "/v1/table/{}/index/{}/stats",
    "/v1/table/{}/index/{}/drop",
    "/v1/table/{}/tags/list",
    "/v1/table/{}/tags/version",
    "/v1/table/{}/declare",
    "/v1/table/{}/tags/create",
    "/v1/table/{}/tags/delete",
    "/v1/table/{}/tags/update",
    "/v1/table/{}/branches/list",
    "/v1/table/{}/branches/create",
    "/v1/table/{}/branches/delete",
    "/v1/transaction/{}/describe",
    "/v1/transaction/{}/alter",
];

fn is_spec_path(path: &str) -> bool {
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    SPEC_PATHS.iter().any(|template| {
        let t: Vec<&str> = template.split('/').collect();
        t.len() == parts.len()
            && t.iter()
                .zip(&parts)
                .all(|(a, b)| *a == "{}" && !b.is_empty() || a == b)
    })
}

/// Any other request: the spec's operations this server does not
/// implement answer 406 Unsupported; anything else 404.
pub async fn fallback(method: Method, uri: Uri, parts: axum::http::HeaderMap) -> ApiError {
    let request_id = parts
        .get(crate::REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string();
    let path = uri.path();
    if is_spec_path(path) {
        return ApiError::new(
            StatusCode::NOT_ACCEPTABLE,
            Code::Unsupported,
            format!("{method} {path} is a Lance Namespace operation this namespace does not support"),
        )
        .with_detail("This namespace serves micromegas materialized views: their definitions, versions and refresh jobs, not table data.")
        .at(&request_id);
    }
    ApiError::new(
        StatusCode::NOT_FOUND,
        Code::Unsupported,
        format!("no operation at {method} {path}"),
    )
    .at(&request_id)
}

/// A known path asked with another method: 405, in the spec's error shape.
pub async fn method_not_allowed(
    method: Method,
    uri: Uri,
    parts: axum::http::HeaderMap,
) -> ApiError {
    let request_id = parts
        .get(crate::REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string();
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        Code::InvalidInput,
        format!("{} does not answer {method}", uri.path()),
    )
    .at(&request_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn schemas_as_json_arrow() {
        let s = Schema::new(vec![
            Field::new(
                "time",
                DataType::Timestamp(arrow_schema::TimeUnit::Nanosecond, Some("+00:00".into())),
                true,
            ),
            Field::new(
                "tags",
                DataType::List(Arc::new(Field::new("item", DataType::Utf8, false))),
                false,
            ),
        ]);
        let j = serde_json::to_value(json_schema(&s)).unwrap();
        assert_eq!(
            j,
            json!({"fields": [
                {"name": "time", "nullable": true, "type": {"type": "timestamp(ns,\"+00:00\")"}},
                {"name": "tags", "nullable": false, "type": {"type": "list(utf8)", "fields": [
                    {"name": "item", "nullable": false, "type": {"type": "utf8"}}]}}
            ]})
        );
    }

    #[test]
    fn spec_paths() {
        assert!(is_spec_path("/v1/table/a$b/insert"));
        assert!(is_spec_path("/v1/table/x/index/i1/stats"));
        assert!(is_spec_path("/v1/table"));
        assert!(!is_spec_path("/v1/table/x/nope"));
        assert!(!is_spec_path("/v2/table/x/insert"));
    }
}
