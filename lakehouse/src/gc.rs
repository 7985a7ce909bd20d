//! Deleting what the lake no longer needs, in the order the extension's
//! contract asks for:
//!
//! - **expired files**: `mm_expired_files` hands them out in a transaction
//!   of its own (a statement in autocommit), and the objects are deleted
//!   only after it committed; an object already gone is not an error;
//! - **orphans**: objects under `views/` that no partition row and no queued
//!   file names, older than a grace period — a daemon that died between
//!   writing an object and recording it leaves one (an object is written
//!   first, then recorded in one transaction, so a recorded file is never
//!   missing). The grace period covers a write in flight.

use crate::lake::Lake;
use crate::Result;
use chrono::{Duration, Utc};
use std::collections::HashSet;
use tokio_postgres::Client;

#[derive(Debug, Default)]
pub struct Collected {
    /// Expired files handed out by the catalog (listed only in a dry run).
    pub expired: Vec<String>,
    /// Objects no row names, past the grace period.
    pub orphans: Vec<String>,
    /// Of those, how many objects were deleted (the others were gone).
    pub deleted: usize,
}

pub async fn collect(lake: &Lake, client: &Client, grace: Duration, dry_run: bool) -> Result<Collected> {
    let mut out = Collected::default();
    // Expired files: a dry run only reads the queue; otherwise the catalog
    // hands them out (and commits) before any object is deleted.
    out.expired = if dry_run {
        client
            .query(
                "SELECT file_path FROM micromegas.temporary_files WHERE expiration <= now() ORDER BY 1",
                &[],
            )
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect()
    } else {
        client
            .query("SELECT file_path FROM micromegas.mm_expired_files(1000)", &[])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    if !dry_run {
        for path in &out.expired {
            // Only partition objects: a queued path elsewhere (a service's
            // own file, a row naming a source) is not this lake's to delete.
            if !path.starts_with("views/") {
                tracing::warn!(path = %path, "gc: an expired file outside views/ is left alone");
                continue;
            }
            match lake.delete(path).await {
                Ok(true) => out.deleted += 1,
                Ok(false) => {}
                // The others still go; this one is an orphan for a later run.
                Err(e) => tracing::warn!(path = %path, error = %e, "gc: could not delete an expired file"),
            }
        }
    }
    // Orphans: read the names the catalog knows after listing the objects,
    // so that an object recorded meanwhile is known.
    let objects = lake.list("views").await?;
    let known: HashSet<String> = client
        .query(
            "SELECT file_path FROM micromegas.lakehouse_partitions WHERE file_path IS NOT NULL \
             UNION SELECT file_path FROM micromegas.temporary_files",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let cutoff = Utc::now() - grace;
    for object in objects {
        let relative = lake.relative(&object.location);
        if known.contains(&relative) || object.last_modified > cutoff {
            continue;
        }
        if !dry_run && lake.delete(&relative).await? {
            out.deleted += 1;
        }
        out.orphans.push(relative);
    }
    Ok(out)
}
