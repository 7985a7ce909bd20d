//! The extension's settings (GUCs), registered when the library loads.
//!
//! | setting | who may change it | default | range |
//! |---|---|---|---|
//! | `micromegas_views.validation_timeout` | any role, per session; above the default only for admins | 5s | 10ms – 60s |
//! | `micromegas_views.validation_memory` | superusers only | 256MB | 16MB – 16GB |
//! | `micromegas_views.max_plan_nodes` | superusers only | 10000 | 100 – 250000 |
//! | `micromegas_views.query_deny_max_rules` | superusers only | 100 | 1 – 10000 |
//! | `micromegas_views.file_retention` | superusers only | 1h | 0 – 30d |
//! | `micromegas_views.job_lease` | superusers only | 5min | 1s – 1d |
//! | `micromegas_views.job_max_attempts` | superusers only | 3 | 1 – 100 |
//! | `micromegas_views.notify_finished_jobs` | superusers only | off | on/off |
//! | `micromegas_views.adopt_existing_roles` | superusers only | off | on/off |
//! | `micromegas_views.extension_role` | superusers only | (none) | the role's name, as a role setting |
//! | `micromegas_views.author_checks` | any role, per session | warn | off, warn, error |
//!
//! The author checks apply at the stricter of `author_checks` and what an
//! admin required for the database or the writing role
//! (`micromegas.mm_require_author_checks`, kept in a table): a session may
//! make them stricter, never more lenient than required.
//! The first two bound work; neither switches a check off. The file
//! retention protects readers of a retired partition's file, so an ordinary
//! role may not shorten it; the job settings decide when a job may run
//! twice, so they are superuser-only as well, and so is whether a finished
//! job is announced (a deployment's choice: every commit that notifies takes
//! a database-wide lock, so announcing each finish halves a busy queue). The deny list's
//! cap is a limit an ordinary role must not lift, so it is superuser-only too. The time limit may be
//! set by any role, but only a member of `micromegas_admin` (or a
//! superuser) gets more than the default: a reader's dry runs and
//! fingerprints run under 5 s whatever it sets, so no role outside the
//! admins can hold a helper process busy for a minute at a time. The
//! memory budget and the plan-node limit bound memory, so only a superuser
//! may raise them.

use micromegas_views_core::isolate;
use micromegas_views_core::sandbox;
use micromegas_views_core::planner::{DEFAULT_MAX_PLAN_NODES, MAX_MAX_PLAN_NODES};
use pgrx::{pg_sys, GucContext, GucFlags, GucRegistry, GucSetting, PostgresGucEnum};
use std::time::Duration;

/// The default validation time limit, and the most a non-admin gets.
const DEFAULT_VALIDATION_TIMEOUT_MS: i32 = 5_000;
static VALIDATION_TIMEOUT_MS: GucSetting<i32> =
    GucSetting::<i32>::new(DEFAULT_VALIDATION_TIMEOUT_MS);
static VALIDATION_MEMORY_MB: GucSetting<i32> =
    GucSetting::<i32>::new((sandbox::DEFAULT_MEMORY_BYTES >> 20) as i32);
const MAX_VALIDATION_TIMEOUT_MS: i32 = isolate::MAX_VALIDATION_TIMEOUT.as_millis() as i32;
static MAX_PLAN_NODES: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_MAX_PLAN_NODES as i32);
static QUERY_DENY_MAX_RULES: GucSetting<i32> = GucSetting::<i32>::new(100);
static FILE_RETENTION_S: GucSetting<i32> = GucSetting::<i32>::new(3_600);
static JOB_LEASE_S: GucSetting<i32> = GucSetting::<i32>::new(300);
static JOB_MAX_ATTEMPTS: GucSetting<i32> = GucSetting::<i32>::new(3);
static ADOPT_EXISTING_ROLES: GucSetting<bool> = GucSetting::<bool>::new(false);
static EXTENSION_ROLE: GucSetting<Option<std::ffi::CString>> =
    GucSetting::<Option<std::ffi::CString>>::new(None);
static NOTIFY_FINISHED_JOBS: GucSetting<bool> = GucSetting::<bool>::new(false);

/// What a definition that misses an author obligation gets, from the most
/// lenient to the strictest (the variants' order is their strictness).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, PostgresGucEnum)]
#[allow(non_camel_case_types)]
pub enum AuthorChecks {
    off,
    warn,
    error,
}

impl AuthorChecks {
    /// Every level, the most lenient first: the SQL ranks levels by their
    /// position here (`_mm_author_check_levels`).
    pub const ALL: [AuthorChecks; 3] = [AuthorChecks::off, AuthorChecks::warn, AuthorChecks::error];

    pub fn name(self) -> &'static str {
        match self {
            AuthorChecks::off => "off",
            AuthorChecks::warn => "warn",
            AuthorChecks::error => "error",
        }
    }
}

static AUTHOR_CHECKS: GucSetting<AuthorChecks> =
    GucSetting::<AuthorChecks>::new(AuthorChecks::warn);

pub fn register() {
    GucRegistry::define_int_guc(
        c"micromegas_views.validation_timeout",
        c"Longest time one validation (parsing, planning and checking a definition or schema) may take.",
        c"Past it the statement fails with SQLSTATE 54001. statement_timeout and pg_cancel_backend still apply. Above the default (5s) only for superusers and members of micromegas_admin; other roles are held to the default.",
        &VALIDATION_TIMEOUT_MS,
        10,
        MAX_VALIDATION_TIMEOUT_MS,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"micromegas_views.validation_memory",
        c"Most memory one validation (or deny rule, fingerprint, schema decoding) may allocate in the backend's helper process.",
        c"Past it the helper process is stopped and the statement fails with SQLSTATE 54001. Superuser only.",
        &VALIDATION_MEMORY_MB,
        (sandbox::MIN_MEMORY_BYTES >> 20) as i32,
        (sandbox::MAX_MEMORY_BYTES >> 20) as i32,
        GucContext::Suset,
        GucFlags::UNIT_MB,
    );
    GucRegistry::define_int_guc(
        c"micromegas_views.max_plan_nodes",
        c"Most logical plan nodes one query of a definition may plan to, counting a common table expression once per reference.",
        c"Past it the definition is refused with SQLSTATE 54001.",
        &MAX_PLAN_NODES,
        100,
        MAX_MAX_PLAN_NODES as i32,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"micromegas_views.query_deny_max_rules",
        c"Most rules the query deny list may hold.",
        c"deny_queries refuses a rule past it (SQLSTATE 54000).",
        &QUERY_DENY_MAX_RULES,
        1,
        10_000,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"micromegas_views.file_retention",
        c"How long the file of a retired partition is kept before the daemon may delete it.",
        c"Readers that planned a query before the retirement may still read the file meanwhile.",
        &FILE_RETENTION_S,
        0,
        30 * 86_400,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"micromegas_views.job_lease",
        c"How long a worker holds a claimed job without a heartbeat.",
        c"Past it the job goes back to the queue (or fails after job_max_attempts claims).",
        &JOB_LEASE_S,
        1,
        86_400,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"micromegas_views.job_max_attempts",
        c"How many times a job may be claimed before a lost lease or a retryable failure fails it.",
        c"",
        &JOB_MAX_ATTEMPTS,
        1,
        100,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"micromegas_views.notify_finished_jobs",
        c"Whether a job that ends (done, failed or cancelled) is announced on micromegas_jobs.",
        c"Off: only a queued job (or one queued again) and a cancellation request are. Every commit that sends a NOTIFY takes a database-wide lock, so announcing each finish slows a busy queue. Superuser only.",
        &NOTIFY_FINISHED_JOBS,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"micromegas_views.adopt_existing_roles",
        c"Whether CREATE EXTENSION may use micromegas_* roles that already exist with members, LOGIN, SUPERUSER, CREATEROLE or an ADMIN OPTION holder.",
        c"Off: such a role is refused (SQLSTATE 42710), since its members would get the extension's privileges. Superuser only.",
        &ADOPT_EXISTING_ROLES,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_string_guc(
        c"micromegas_views.extension_role",
        c"The mark CREATE EXTENSION sets on its own roles (ALTER ROLE ... SET, the role's name), so that a later CREATE EXTENSION recognises them.",
        c"Superuser only, so no other role can forge it; it changes nothing in a session.",
        &EXTENSION_ROLE,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_enum_guc(
        c"micromegas_views.author_checks",
        c"What a definition that misses an author obligation gets: off, warn (a WARNING, class 01) or error (refused, class 42).",
        c"The checks: non_composable_merge, double_count_without_range, range_filter_column. The level applied is the stricter of this and what micromegas.mm_require_author_checks() required for the database or the writing role.",
        &AUTHOR_CHECKS,
        GucContext::Userset,
        GucFlags::default(),
    );
}

/// `micromegas_views.author_checks`: the session's author-check level.
pub fn author_checks() -> AuthorChecks {
    AUTHOR_CHECKS.get()
}

/// `micromegas_views.job_lease`, in seconds.
pub fn job_lease_seconds() -> i32 {
    JOB_LEASE_S.get().max(1)
}

/// `micromegas_views.job_max_attempts`.
pub fn job_max_attempts() -> i32 {
    JOB_MAX_ATTEMPTS.get().max(1)
}

/// `micromegas_views.notify_finished_jobs`.
pub fn notify_finished_jobs() -> bool {
    NOTIFY_FINISHED_JOBS.get()
}

/// `micromegas_views.file_retention`, in seconds.
pub fn file_retention_seconds() -> i32 {
    FILE_RETENTION_S.get().max(0)
}

pub fn query_deny_max_rules() -> i32 {
    QUERY_DENY_MAX_RULES.get()
}

thread_local! {
    static RECHECK_AHEAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// While it lives, validations are a re-check planned ahead of the catalog
/// lock (`_mm_plan_ahead`), under the limit the re-check itself will have.
pub struct RecheckAhead(());

impl RecheckAhead {
    pub fn begin() -> RecheckAhead {
        RECHECK_AHEAD.set(true);
        RecheckAhead(())
    }
}

impl Drop for RecheckAhead {
    fn drop(&mut self) {
        RECHECK_AHEAD.set(false);
    }
}

/// The time one validation may take, and whether the caller is held to the
/// default below what it set. The session's limit, except in the
/// extension's own re-check of a dependent: a caller's short timeout must
/// not decide that a valid view "no longer validates" (statement_timeout and
/// cancellation still apply). A caller that is not an admin gets at most the
/// default.
pub fn validation_timeout() -> (Duration, bool) {
    if crate::pg::trust::held("recheck") || RECHECK_AHEAD.get() || restoring() {
        return (Duration::from_millis(MAX_VALIDATION_TIMEOUT_MS as u64), false);
    }
    let asked = VALIDATION_TIMEOUT_MS.get().max(1);
    if asked > DEFAULT_VALIDATION_TIMEOUT_MS && !crate::pg::trust::caller_is_admin() {
        return (Duration::from_millis(DEFAULT_VALIDATION_TIMEOUT_MS as u64), true);
    }
    (Duration::from_millis(asked as u64), false)
}

/// A superuser's session with `check_function_bodies` off: what the
/// scripts of pg_dump and pg_restore set. Each dumped definition was
/// accepted once, perhaps by an admin who allowed it more than the default
/// time, and nobody sets `validation_timeout` for a restore: it is validated
/// under the most any role may allow, so that a restore never drops a row
/// its database held (a COPY that fails one row loads none).
fn restoring() -> bool {
    // SAFETY: reads backend globals on the backend's thread.
    unsafe { !pg_sys::check_function_bodies && pg_sys::superuser_arg(pg_sys::GetOuterUserId()) }
}

/// The time-limit error of a caller held to the default says so.
pub fn explain_time_limit(e: micromegas_views_core::Error) -> micromegas_views_core::Error {
    if e.kind == micromegas_views_core::ErrorKind::TimeLimit {
        e.with_hint("Simplify the query. Only superusers and members of micromegas_admin get more than the default validation_timeout (5s); this role is held to it.")
    } else {
        e
    }
}

/// `micromegas_views.validation_memory`, in bytes.
pub fn validation_memory_bytes() -> usize {
    (VALIDATION_MEMORY_MB.get().max(1) as usize) << 20
}

pub fn max_plan_nodes() -> usize {
    MAX_PLAN_NODES.get().max(1) as usize
}

/// The settings the SQL files read (`sql/partitions.sql`, `sql/jobs.sql`),
/// through a call into the library, so that each is always defined (and
/// keeps its privilege rule) when read.
pub(crate) mod micromegas {
    use pgrx::prelude::*;

    /// `micromegas_views.file_retention` in seconds.
    #[pg_extern(stable, parallel_safe, name = "_mm_file_retention_seconds")]
    fn file_retention_seconds() -> i32 {
        super::file_retention_seconds()
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_file_retention_seconds() IS
  'micromegas_views.file_retention in seconds';"#,
        name = "comment_mm_file_retention_seconds",
        requires = [file_retention_seconds],
    );

    /// `micromegas_views.job_lease` in seconds.
    #[pg_extern(stable, parallel_safe, name = "_mm_job_lease_seconds")]
    fn job_lease_seconds() -> i32 {
        super::job_lease_seconds()
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_job_lease_seconds() IS
  'micromegas_views.job_lease in seconds';"#,
        name = "comment_mm_job_lease_seconds",
        requires = [job_lease_seconds],
    );

    /// `micromegas_views.job_max_attempts`.
    #[pg_extern(stable, parallel_safe, name = "_mm_job_max_attempts")]
    fn job_max_attempts() -> i32 {
        super::job_max_attempts()
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_job_max_attempts() IS
  'micromegas_views.job_max_attempts';"#,
        name = "comment_mm_job_max_attempts",
        requires = [job_max_attempts],
    );

    /// `micromegas_views.notify_finished_jobs` (the jobs' notification
    /// trigger asks it in its WHEN clause).
    #[pg_extern(stable, parallel_safe, name = "_mm_notify_finished_jobs")]
    pub(crate) fn notify_finished_jobs() -> bool {
        super::notify_finished_jobs()
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_notify_finished_jobs() IS
  'micromegas_views.notify_finished_jobs: whether a job that ends is announced on micromegas_jobs';"#,
        name = "comment_mm_notify_finished_jobs",
        requires = [notify_finished_jobs],
    );

    /// The session's author-check level (`off`, `warn` or `error`).
    #[pg_extern(stable, parallel_safe, name = "_mm_author_checks")]
    fn author_checks() -> &'static str {
        super::author_checks().name()
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_author_checks() IS
  'The session''s micromegas_views.author_checks (off, warn or error)';"#,
        name = "comment_mm_author_checks",
        requires = [author_checks],
    );

    /// The author-check levels, the most lenient first (`AuthorChecks`, the
    /// one place they are defined): SQL ranks a level by its position.
    #[pg_extern(immutable, parallel_safe, name = "_mm_author_check_levels")]
    fn author_check_levels() -> Vec<&'static str> {
        super::AuthorChecks::ALL.iter().map(|l| l.name()).collect()
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_author_check_levels() IS
  'The author-check levels, the most lenient first (off, warn, error): a level''s rank is its position';"#,
        name = "comment_mm_author_check_levels",
        requires = [author_check_levels],
    );
}
