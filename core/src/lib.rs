//! The pure-Rust core of micromegas_views: no pgrx, no Postgres.
//!
//! The data's path: [`ddl`] parses a statement, [`options`] turns it into a
//! [`Definition`], [`planner`] plans its queries against a [`Catalog`],
//! [`checks`] runs micromegas' CREATE-time checks, [`schema`] encodes and
//! hashes the result. [`isolate`] runs it all on a big-stack thread with
//! a deadline, and [`sandbox`] runs that in a helper process a host can
//! stop, under a memory budget. [`meter`] counts what each query of the
//! services holds, and [`bounded`] refuses the calls that would pass it.

pub mod author;
pub mod bounded;
pub mod builtins;
pub mod catalog;
pub mod checks;
pub mod ddl;
pub mod deny;
pub mod error;
pub mod functions;
pub mod isolate;
pub mod jobs;
pub mod meter;
pub mod options;
pub mod planner;
pub mod prepare;
pub mod properties;
pub mod sandbox;
pub mod schema;
pub mod width;

pub use catalog::{Catalog, CatalogEntry, CatalogRow, SourceKind};
pub use checks::{referenced_relations, validate, Validated};
pub use ddl::{parse, Statement};
pub use error::{Error, ErrorKind, Result};
pub use options::Definition;

#[cfg(test)]
mod tests;
