//! The lake: an object store (a local directory or an S3 bucket) and where
//! things live in it.
//!
//! - `sources/<name>/…`: Parquet files of the built-in sources the catalog
//!   knows (`blocks`, `log_entries`, `measures`, `processes`, `streams`), at
//!   any depth, under any file name.
//! - `views/<view>/<schema hash hex>/<begin>_<end>_<unique>.parquet`: the
//!   partitions the daemon writes. An object name is unique to its write, so
//!   an object is never overwritten: a partition row always names the bytes
//!   it was recorded with.

use crate::{Error, Result};
use chrono::{DateTime, Utc};
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::prelude::SessionContext;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use std::sync::Arc;
use url::Url;

#[derive(Clone, Debug)]
pub struct Lake {
    store: Arc<dyn ObjectStore>,
    /// `file:///` or `s3://bucket/`: what DataFusion's table URLs start with.
    base: Url,
    /// The lake's prefix inside the store (no leading or trailing `/`).
    prefix: String,
    /// The URL as given, for messages.
    pub url: String,
}

impl Lake {
    /// `file:///absolute/path` or `s3://bucket[/prefix]`. S3 takes the usual
    /// `AWS_*` variables (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_REGION`, `AWS_ENDPOINT_URL` and `AWS_ALLOW_HTTP` for an
    /// S3-compatible store on loopback).
    pub fn open(url: &str) -> Result<Lake> {
        let parsed = Url::parse(url).map_err(|e| Error::msg(format!("--lake {url}: {e}")))?;
        match parsed.scheme() {
            "file" => {
                let dir = parsed
                    .to_file_path()
                    .map_err(|_| Error::msg(format!("--lake {url}: not an absolute local path")))?;
                let store = object_store::local::LocalFileSystem::new();
                let prefix = dir.to_string_lossy().trim_matches('/').to_string();
                Ok(Lake {
                    store: Arc::new(store),
                    base: Url::parse("file:///").expect("a URL"),
                    prefix,
                    url: url.to_string(),
                })
            }
            "s3" => {
                let bucket = parsed
                    .host_str()
                    .filter(|b| !b.is_empty())
                    .ok_or_else(|| Error::msg(format!("--lake {url}: no bucket")))?
                    .to_string();
                let mut builder =
                    object_store::aws::AmazonS3Builder::from_env().with_bucket_name(&bucket);
                // AWS_ENDPOINT_URL is the name the AWS CLI and SDKs read.
                if let Ok(endpoint) = std::env::var("AWS_ENDPOINT_URL") {
                    builder = builder.with_endpoint(endpoint);
                }
                if std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v == "true" || v == "1") {
                    builder = builder.with_allow_http(true);
                }
                let store = builder
                    .build()
                    .map_err(|e| Error::msg(format!("--lake {url}: {e}")))?;
                Ok(Lake {
                    store: Arc::new(store),
                    base: Url::parse(&format!("s3://{bucket}/")).expect("a URL"),
                    prefix: parsed.path().trim_matches('/').to_string(),
                    url: url.to_string(),
                })
            }
            other => Err(Error::msg(format!(
                "--lake {url}: the scheme {other}:// is not supported (file:// or s3://)"
            ))),
        }
    }

    /// Refuses a lake that has no `blocks` source files: a mistyped
    /// `--lake`, an unmounted volume or a wrong prefix would otherwise read
    /// as empty sources, and every stale bucket would be replaced by an
    /// empty partition.
    pub async fn require_sources(&self) -> Result<()> {
        let blocks = self.list(&Self::source_dir("blocks")).await?;
        if blocks.iter().any(|o| is_data_file(&o.location)) {
            Ok(())
        } else {
            Err(Error::msg(format!(
                "{}: no Parquet file under sources/blocks/: is --lake the right lake?",
                self.url
            )))
        }
    }

    pub fn store(&self) -> Arc<dyn ObjectStore> {
        self.store.clone()
    }

    /// Makes the store reachable from `ctx` under its URL.
    pub fn register(&self, ctx: &SessionContext) {
        ctx.register_object_store(&self.base, self.store.clone());
    }

    /// The store-relative path of a lake-relative one.
    pub fn path(&self, relative: &str) -> Path {
        let relative = relative.trim_matches('/');
        if self.prefix.is_empty() {
            Path::from(relative)
        } else if relative.is_empty() {
            Path::from(self.prefix.as_str())
        } else {
            Path::from(format!("{}/{relative}", self.prefix))
        }
    }

    /// The lake-relative form of a store path (what a partition row stores).
    pub fn relative(&self, path: &Path) -> String {
        let full = path.as_ref();
        if self.prefix.is_empty() {
            full.to_string()
        } else {
            full.strip_prefix(&self.prefix)
                .and_then(|r| r.strip_prefix('/'))
                .map(str::to_string)
                .unwrap_or_else(|| full.to_string())
        }
    }

    /// The URL DataFusion reads an object by.
    pub fn object_url(&self, path: &Path) -> String {
        format!("{}{}", self.base, path.as_ref())
    }

    pub fn object_store_url(&self) -> ObjectStoreUrl {
        ObjectStoreUrl::parse(self.base.as_str()).expect("an object store URL")
    }

    pub fn source_dir(name: &str) -> String {
        format!("sources/{name}")
    }

    /// A new, unique object name for a partition of `view` with `hash`.
    pub fn partition_path(
        view: &str,
        hash: &[u8],
        begin: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> String {
        format!(
            "views/{view}/{}/{}_{}_{}.parquet",
            hex(hash),
            begin.format("%Y%m%dT%H%M%SZ"),
            end.format("%Y%m%dT%H%M%SZ"),
            uuid::Uuid::new_v4().simple()
        )
    }

    /// Every object under a lake-relative directory, by path.
    pub async fn list(&self, dir: &str) -> Result<Vec<ObjectMeta>> {
        let prefix = self.path(dir);
        let mut objects: Vec<ObjectMeta> = self
            .store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|e| Error::msg(format!("listing {}/{dir}: {e}", self.url)))?;
        objects.sort_by(|a, b| a.location.cmp(&b.location));
        Ok(objects)
    }

    /// Deletes an object; one already gone is not an error.
    pub async fn delete(&self, relative: &str) -> Result<bool> {
        match self.store.delete(&self.path(relative)).await {
            Ok(()) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(Error::msg(format!("deleting {relative}: {e}"))),
        }
    }

    pub async fn put(&self, relative: &str, bytes: Vec<u8>) -> Result<()> {
        self.store
            .put(&self.path(relative), bytes.into())
            .await
            .map(|_| ())
            .map_err(|e| Error::msg(format!("writing {relative}: {e}")))
    }
}

/// Whether an object is a data file: `*.parquet`, and no part of its path
/// starting with `_` or `.` (writers' temporary and marker files).
pub fn is_data_file(path: &Path) -> bool {
    path.as_ref().ends_with(".parquet")
        && !path.parts().any(|p| p.as_ref().starts_with('_') || p.as_ref().starts_with('.'))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
