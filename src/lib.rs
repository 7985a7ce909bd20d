//! micromegas_views: the pgrx shell around `micromegas_views_core`.
//!
//! The SQL objects (tables, triggers, the public functions) are hand-written
//! in `sql/`; the Rust functions here are the pure steps they call.

mod pg;

/// The system allocator, counting what a helper process's call allocates
/// (`micromegas_views_core::sandbox`); elsewhere one relaxed load per
/// allocation.
#[global_allocator]
static ALLOCATOR: micromegas_views_core::sandbox::BudgetAllocator =
    micromegas_views_core::sandbox::BudgetAllocator;

::pgrx::pg_module_magic!(name, version);

#[pgrx::pg_guard]
pub extern "C-unwind" fn _PG_init() {
    pg::settings::register();
    pg::trust::register();
    pg::helper::register();
}

pgrx::extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);
pgrx::extension_sql_file!("../sql/access.sql", name = "access");
pgrx::extension_sql_file!("../sql/partitions.sql", name = "partitions");
pgrx::extension_sql_file!("../sql/history.sql", name = "history");
// The jobs' notification trigger asks a setting in its WHEN clause.
pgrx::extension_sql_file!(
    "../sql/jobs.sql",
    name = "jobs",
    requires = [pg::settings::micromegas::notify_finished_jobs]
);
pgrx::extension_sql_file!("../sql/privileges.sql", name = "privileges");
pgrx::extension_sql_file!("../sql/api.sql", name = "api", finalize);

#[cfg(any(test, feature = "pg_test"))]
mod tests;

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
