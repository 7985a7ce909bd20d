//! The one error type of the core. The pgrx shell maps [`ErrorKind`] to a
//! SQLSTATE in exactly one place (`src/pg/errors.rs`).

use std::fmt;

/// What went wrong, at the granularity of a Postgres SQLSTATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ErrorKind {
    /// The statement does not follow the DDL grammar (42601 syntax_error).
    Syntax,
    /// An option is unknown, repeated, missing or malformed (22023 invalid_parameter_value).
    InvalidOption,
    /// The view name is not a lower-case identifier (42602 invalid_name).
    InvalidName,
    /// The view name is longer than Postgres allows for a name (42622 name_too_long).
    NameTooLong,
    /// The view name is reserved (42939 reserved_name).
    ReservedName,
    /// A check on the planned queries failed (42P17 invalid_object_definition).
    InvalidDefinition,
    /// A built-in schema could not be decoded (22P02 invalid_text_representation).
    InvalidSchema,
    /// The input is too large to process (54000 program_limit_exceeded).
    ProgramLimit,
    /// The input is nested too deeply, plans to too many nodes or is too
    /// wide to plan (54001 statement_too_complex).
    TooComplex,
    /// The validation ran out of its time limit, or could not start within
    /// it (54001 statement_too_complex, like the limits above: to a caller
    /// it is one more way a statement is too complex; to a re-check it says
    /// nothing about the definition, see [`ErrorKind::is_about_the_definition`]).
    TimeLimit,
    /// The work went past its memory budget and its helper process was
    /// stopped (54001 statement_too_complex, like the time limit: to a
    /// re-check it says nothing about the definition).
    MemoryLimit,
    /// The caller stopped waiting for the work (57014 query_canceled); the
    /// caller has already raised its own error.
    Cancelled,
    /// A bug: a panic or an impossible state (XX000 internal_error).
    Internal,
}

impl ErrorKind {
    /// Whether the error is about what was written — its text, options,
    /// name, queries as planned against their sources, size, nesting, plan
    /// nodes, width — so that the same definition against the same catalog
    /// fails the same way. A re-check of a dependent marks it failed (or
    /// refuses the change) for these, by kind, never by message text; the
    /// others (time, cancellation, a bug) say nothing about the definition
    /// and fail the statement instead.
    pub fn is_about_the_definition(self) -> bool {
        match self {
            ErrorKind::Syntax
            | ErrorKind::InvalidOption
            | ErrorKind::InvalidName
            | ErrorKind::NameTooLong
            | ErrorKind::ReservedName
            | ErrorKind::InvalidDefinition
            | ErrorKind::InvalidSchema
            | ErrorKind::ProgramLimit
            | ErrorKind::TooComplex => true,
            ErrorKind::TimeLimit
            | ErrorKind::MemoryLimit
            | ErrorKind::Cancelled
            | ErrorKind::Internal => false,
        }
    }
}

/// An error with the parts Postgres reports: message, DETAIL and HINT.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            detail: None,
            hint: None,
        }
    }

    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn syntax(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Syntax, message)
    }

    pub fn option(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidOption, message)
    }

    pub fn definition(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidDefinition, message)
    }

    pub fn too_complex(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::TooComplex, message)
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::ProgramLimit, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)?;
        if let Some(detail) = &self.detail {
            write!(f, "\nDETAIL: {detail}")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "\nHINT: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;
