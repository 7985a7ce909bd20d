//! The lakehouse that the maintenance daemon and the query service share:
//! the lake ([`lake`]), the read path ([`read`]: sources and views as
//! DataFusion tables) and the write path ([`write`]: a bucket decided,
//! materialized, proven against the stored schema and recorded), over the
//! extension's catalog ([`catalog`]).

pub mod catalog;
pub mod gc;
pub mod lake;
pub mod meter;
pub mod query;
pub mod read;
pub mod sample;
pub mod write;

/// What went wrong; `schema` errors say the catalog and the data disagree
/// (a job that meets one fails and is not retried).
#[derive(Debug, Clone)]
pub struct Error {
    pub message: String,
    pub schema_mismatch: bool,
}

impl Error {
    pub fn msg(message: impl Into<String>) -> Error {
        Error { message: message.into(), schema_mismatch: false }
    }

    pub fn schema(message: impl Into<String>) -> Error {
        Error { message: message.into(), schema_mismatch: true }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

macro_rules! from_error {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Error {
                Error::msg(e.to_string())
            }
        }
    )*};
}

from_error!(
    datafusion::error::DataFusionError,
    datafusion::arrow::error::ArrowError,
    datafusion::parquet::errors::ParquetError,
    object_store::Error,
    std::io::Error
);

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Error {
        Error::msg(match e.as_db_error() {
            Some(db) => format!("{}: {}", db.code().code(), db.message()),
            None => e.to_string(),
        })
    }
}

pub type Result<T> = std::result::Result<T, Error>;
