//! The Lance Namespace `ErrorResponse` (`error`, `code`, `type`, `detail`,
//! `instance`) with the HTTP status that goes with it, and the one map from
//! Postgres errors (SQLSTATE) to both.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use tokio_postgres::error::SqlState;

/// Lance Namespace error codes (the subset this service answers with).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Unsupported = 0,
    NamespaceNotFound = 1,
    TableNotFound = 4,
    TableAlreadyExists = 5,
    InvalidInput = 13,
    ConcurrentModification = 14,
    PermissionDenied = 15,
    Unauthenticated = 16,
    ServiceUnavailable = 17,
    Internal = 18,
    TableVersionNotFound = 11,
    InvalidTableState = 19,
    TableSchemaValidationError = 20,
}

impl Code {
    fn name(self) -> &'static str {
        match self {
            Code::Unsupported => "Unsupported",
            Code::NamespaceNotFound => "NamespaceNotFound",
            Code::TableNotFound => "TableNotFound",
            Code::TableAlreadyExists => "TableAlreadyExists",
            Code::InvalidInput => "InvalidInput",
            Code::ConcurrentModification => "ConcurrentModification",
            Code::PermissionDenied => "PermissionDenied",
            Code::Unauthenticated => "Unauthenticated",
            Code::ServiceUnavailable => "ServiceUnavailable",
            Code::Internal => "Internal",
            Code::TableVersionNotFound => "TableVersionNotFound",
            Code::InvalidTableState => "InvalidTableState",
            Code::TableSchemaValidationError => "TableSchemaValidationError",
        }
    }
}

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: Code,
    pub error: String,
    pub detail: Option<String>,
    /// The request id, filled in before the response is written.
    pub instance: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: Code, error: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            error: error.into(),
            detail: None,
            instance: None,
        }
    }

    pub fn invalid(error: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, Code::InvalidInput, error)
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    pub fn at(mut self, request_id: &str) -> Self {
        self.instance = Some(request_id.to_string());
        self
    }

    /// A problem found by the core library (parsing a statement, decoding
    /// a schema): the caller's input.
    pub fn from_core(e: micromegas_views_core::error::Error) -> Self {
        let mut out = Self::invalid(e.message);
        out.detail = join(e.detail, e.hint);
        out
    }

    /// The one map from a database error to an HTTP answer: the Postgres
    /// message, its DETAIL and HINT carried into `detail`.
    pub fn from_db(e: &tokio_postgres::Error) -> Self {
        let Some(db) = e.as_db_error() else {
            // No server answer: the connection is gone or never was.
            return Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                Code::ServiceUnavailable,
                "the database is unreachable",
            )
            .with_detail(e.to_string());
        };
        let state = db.code();
        let (status, code) =
            if *state == SqlState::UNDEFINED_OBJECT || *state == SqlState::NO_DATA_FOUND {
                (StatusCode::NOT_FOUND, Code::TableNotFound)
            } else if *state == SqlState::DUPLICATE_OBJECT {
                (StatusCode::CONFLICT, Code::TableAlreadyExists)
            } else if *state == SqlState::INSUFFICIENT_PRIVILEGE {
                (StatusCode::FORBIDDEN, Code::PermissionDenied)
            } else if *state == SqlState::T_R_SERIALIZATION_FAILURE
                || *state == SqlState::T_R_DEADLOCK_DETECTED
                || *state == SqlState::LOCK_NOT_AVAILABLE
            {
                (StatusCode::CONFLICT, Code::ConcurrentModification)
            } else if *state == SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
                || *state == SqlState::DEPENDENT_OBJECTS_STILL_EXIST
            {
                (StatusCode::CONFLICT, Code::InvalidTableState)
            } else if *state == SqlState::READ_ONLY_SQL_TRANSACTION {
                // A hot standby: the catalog is written on the primary only.
                (StatusCode::SERVICE_UNAVAILABLE, Code::ServiceUnavailable)
            } else if *state == SqlState::QUERY_CANCELED
                || *state == SqlState::ADMIN_SHUTDOWN
                || *state == SqlState::CANNOT_CONNECT_NOW
                || *state == SqlState::TOO_MANY_CONNECTIONS
                || state.code().starts_with("08")
            {
                (StatusCode::SERVICE_UNAVAILABLE, Code::ServiceUnavailable)
            } else if ["22", "23", "42", "54", "P0", "2B"]
                .iter()
                .any(|c| state.code().starts_with(c))
            {
                (StatusCode::BAD_REQUEST, Code::InvalidInput)
            } else {
                tracing::error!(
                    sqlstate = state.code(),
                    message = db.message(),
                    "unexpected database error"
                );
                return Self::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    Code::Internal,
                    "the database failed to answer the request",
                )
                .with_detail(format!("SQLSTATE {}", state.code()));
            };
        let mut out = Self::new(status, code, db.message());
        out.detail = join(
            db.detail().map(str::to_string),
            db.hint().map(|h| format!("HINT: {h}")),
        )
        .map(|d| format!("{d} (SQLSTATE {})", state.code()))
        .or_else(|| Some(format!("SQLSTATE {}", state.code())));
        out
    }

    pub fn from_pool(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => Self::from_db(&e),
            other => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                Code::ServiceUnavailable,
                "the database is unreachable",
            )
            .with_detail(other.to_string()),
        }
    }
}

fn join(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(format!("{a}\n{b}")),
        (a, b) => a.or(b),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = self.status.as_u16(), code = self.code as i32, error = %self.error,
                           instance = ?self.instance, "request failed");
        } else {
            tracing::info!(status = self.status.as_u16(), code = self.code as i32, error = %self.error,
                           instance = ?self.instance, "request refused");
        }
        // The spec's ErrorResponse (detail and instance absent rather than
        // null), plus this server's own `type`: the code's name.
        let mut body = lance_namespace_reqwest_client::models::ErrorResponse::new(self.code as i32);
        body.error = Some(self.error.clone());
        body.detail = self.detail.clone();
        body.instance = self.instance.clone();
        let mut body = serde_json::to_value(body).expect("models serialize");
        body["type"] = self.code.name().into();
        (self.status, Json(body)).into_response()
    }
}

/// A panic in a handler: a 500 in the same shape, never a stack trace.
pub fn panic_response(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        Code::Internal,
        "internal error",
    )
    .into_response()
}

/// The whole request answered within `limit`, or 408 in the spec's shape
/// (the handler is dropped, which rolls its transaction back).
pub async fn within(
    limit: std::time::Duration,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let request_id = request
        .headers()
        .get(crate::REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string();
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            Code::ServiceUnavailable,
            format!(
                "the request was not answered within {} s",
                limit.as_secs_f64()
            ),
        )
        .at(&request_id)
        .into_response(),
    }
}
