//! micromegas-views-flight: an Arrow FlightSQL service over the lake the
//! maintenance daemon fills. Every view set of the catalog is a table (a
//! view as its merge query over its current partitions, a source over its
//! files); `CREATE`/`DROP MATERIALIZED VIEW` and the admin table functions
//! run the extension's SQL functions under the caller's role; the deny list
//! refuses a query before it is planned; the audience grants filter every
//! scan of a non-admin in the plan.

pub mod access;
pub mod functions;
pub mod processes;
pub mod service;
pub mod state;
pub mod tables;

/// A Postgres error with its SQLSTATE, DETAIL and HINT.
pub fn describe_db_error(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut out = format!("{}: {}", db.code().code(), db.message());
            if let Some(d) = db.detail() {
                out.push_str(&format!(" (DETAIL: {d})"));
            }
            if let Some(h) = db.hint() {
                out.push_str(&format!(" (HINT: {h})"));
            }
            out
        }
        None => e.to_string(),
    }
}
