//! The Rust steps of the jobs (`sql/jobs.sql`): the lease and attempt
//! settings, read with the library loaded so that they are always defined.

use pgrx::prelude::*;

mod micromegas {
    use super::*;

    /// `micromegas_views.job_lease` in seconds.
    #[pg_extern(stable, parallel_safe, name = "_mm_job_lease_seconds")]
    fn job_lease_seconds() -> i32 {
        super::super::settings::job_lease_seconds()
    }

    /// `micromegas_views.job_max_attempts`.
    #[pg_extern(stable, parallel_safe, name = "_mm_job_max_attempts")]
    fn job_max_attempts() -> i32 {
        super::super::settings::job_max_attempts()
    }
}
