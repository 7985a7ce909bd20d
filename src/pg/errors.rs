//! Core errors → SQLSTATE, message, DETAIL, HINT. The only place that maps them.

use micromegas_views_core::{Error, ErrorKind};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

pub fn sqlstate(kind: ErrorKind) -> PgSqlErrorCode {
    match kind {
        ErrorKind::Syntax => PgSqlErrorCode::ERRCODE_SYNTAX_ERROR,
        ErrorKind::InvalidOption => PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        ErrorKind::InvalidName => PgSqlErrorCode::ERRCODE_INVALID_NAME,
        ErrorKind::NameTooLong => PgSqlErrorCode::ERRCODE_NAME_TOO_LONG,
        ErrorKind::ReservedName => PgSqlErrorCode::ERRCODE_RESERVED_NAME,
        ErrorKind::InvalidDefinition => PgSqlErrorCode::ERRCODE_INVALID_OBJECT_DEFINITION,
        ErrorKind::InvalidSchema => PgSqlErrorCode::ERRCODE_INVALID_TEXT_REPRESENTATION,
        ErrorKind::ProgramLimit => PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        ErrorKind::TooComplex | ErrorKind::TimeLimit | ErrorKind::MemoryLimit => {
            PgSqlErrorCode::ERRCODE_STATEMENT_TOO_COMPLEX
        }
        ErrorKind::Cancelled => PgSqlErrorCode::ERRCODE_QUERY_CANCELED,
        ErrorKind::Internal => PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
    }
}

/// Raises `e` as a Postgres ERROR; never returns.
pub fn raise(e: Error) -> ! {
    let mut report = ErrorReport::new(sqlstate(e.kind), e.message, "micromegas_views");
    if let Some(detail) = e.detail {
        report = report.set_detail(detail);
    }
    if let Some(hint) = e.hint {
        report = report.set_hint(hint);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Unwraps a core result or raises its error.
pub trait OrRaise<T> {
    fn or_raise(self) -> T;
}

impl<T> OrRaise<T> for Result<T, Error> {
    fn or_raise(self) -> T {
        match self {
            Ok(v) => v,
            Err(e) => raise(e),
        }
    }
}
