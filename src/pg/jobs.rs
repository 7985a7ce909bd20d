//! The job queue's one Rust step: the stored form of a lease token, called
//! by every claim, heartbeat and finish (`sql/jobs.sql`). A C function, so
//! that the call costs what a built-in does: as a SQL function (with the
//! SET clause every SQL function of the extension carries) Postgres parsed
//! and planned its body at every call, a tenth of a worker's backend time.
//! Its input is a fixed 16 bytes and SHA-256 is bounded work, so it runs on
//! the backend itself, not in the helper process.

mod micromegas {
    use micromegas_views_core::jobs;
    use pgrx::prelude::*;

    /// `sha256(uuid_send(token))`.
    #[pg_extern(immutable, parallel_safe, strict, name = "_mm_lease_hash")]
    fn lease_hash(token: pgrx::Uuid) -> Vec<u8> {
        jobs::lease_hash(token.as_bytes()).to_vec()
    }
    pgrx::extension_sql!(
        r#"COMMENT ON FUNCTION micromegas._mm_lease_hash(uuid) IS
  'The SHA-256 of a lease token: only the hash is stored';"#,
        name = "comment_mm_lease_hash",
        requires = [lease_hash],
    );
}
