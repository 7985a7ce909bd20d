//! The one Rust step of the partition functions (`sql/partitions.sql`):
//! reading the file retention setting with the library loaded, so the
//! setting is always defined (and superuser-only) when read.

use pgrx::prelude::*;

mod micromegas {
    use super::*;

    /// `micromegas_views.file_retention` in seconds.
    #[pg_extern(stable, parallel_safe, name = "_mm_file_retention_seconds")]
    fn file_retention_seconds() -> i32 {
        super::super::settings::file_retention_seconds()
    }
}
