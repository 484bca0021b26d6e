//! Opening an object store from what a user types: a bare path, `file://`, `memory://` or
//! `s3://bucket[/prefix]`.

use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::prefix::PrefixStore;

use crate::error::{Error, Result};

/// S3 settings; unset ones fall back to object_store's `AWS_*` environment handling.
#[derive(Debug, Clone, Default)]
pub struct S3Options {
    /// Endpoint URL, for any gateway that is not AWS.
    pub endpoint: Option<String>,
    /// Region; `us-east-1` when neither this nor `AWS_REGION` is set.
    pub region: Option<String>,
    /// Do not sign requests (public buckets).
    pub anonymous: bool,
    /// Permit a plain-http endpoint (implied by an `http://` endpoint).
    pub allow_http: bool,
    /// `bucket.host` addressing instead of `host/bucket`.
    pub virtual_hosted: bool,
}

/// Whether a missing local directory is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// Fail: the data store must exist (creating a mistyped path would make it look empty).
    Fail,
    /// Create it: the manifest store is ours to write.
    Create,
}

/// Opens the store a URL names, scoped to its path (keys are relative to it).
///
/// # Errors
/// [`Error::BadUrl`] for an unknown scheme, a missing or non-directory local path, or S3
/// settings object_store refuses.
pub fn open_store(url: &str, s3: &S3Options, missing: Missing) -> Result<Arc<dyn ObjectStore>> {
    let bad = |reason: String| Error::BadUrl {
        url: url.to_owned(),
        reason,
    };
    if url == "memory://" || url.starts_with("memory://") {
        return Ok(Arc::new(InMemory::new()));
    }
    if let Some(rest) = url.strip_prefix("s3://") {
        return open_s3(rest, s3).map_err(bad);
    }
    let path = match url.strip_prefix("file://") {
        Some(path) => PathBuf::from(path),
        None if url.contains("://") => {
            return Err(bad(
                "unsupported scheme; use a path, file://, memory:// or s3://".into(),
            ));
        }
        None => PathBuf::from(url),
    };
    open_local(&path, missing).map_err(bad)
}

fn open_local(path: &FsPath, missing: Missing) -> Result<Arc<dyn ObjectStore>, String> {
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_dir() => return Err("not a directory".into()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && missing == Missing::Create => {
            std::fs::create_dir_all(path).map_err(|e| format!("cannot create: {e}"))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err("no such directory".into());
        }
        Err(e) => return Err(e.to_string()),
    }
    let absolute = std::fs::canonicalize(path).map_err(|e| e.to_string())?;
    let store = LocalFileSystem::new_with_prefix(absolute).map_err(|e| e.to_string())?;
    Ok(Arc::new(store))
}

fn open_s3(rest: &str, options: &S3Options) -> Result<Arc<dyn ObjectStore>, String> {
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err("no bucket name".into());
    }
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
    if let Some(endpoint) = &options.endpoint {
        builder = builder.with_endpoint(endpoint);
        if endpoint.starts_with("http://") {
            builder = builder.with_allow_http(true);
        }
    }
    // Without `--region`, `from_env` took AWS_DEFAULT_REGION or AWS_REGION, and the builder
    // falls back to us-east-1.
    if let Some(region) = &options.region {
        builder = builder.with_region(region);
    }
    if options.anonymous {
        builder = builder.with_skip_signature(true);
    }
    if options.allow_http {
        builder = builder.with_allow_http(true);
    }
    if options.virtual_hosted {
        builder = builder.with_virtual_hosted_style_request(true);
    }
    let store: Arc<dyn ObjectStore> = Arc::new(builder.build().map_err(|e| e.to_string())?);
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() {
        return Ok(store);
    }
    let prefix = object_store::path::Path::from(prefix);
    Ok(Arc::new(PrefixStore::new(store, prefix)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_directory_is_never_created_but_manifests_are() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let err =
            open_store(data.to_str().unwrap(), &S3Options::default(), Missing::Fail).unwrap_err();
        assert!(err.is_store(), "{err}");
        assert!(!data.exists());
        let manifests = dir.path().join("m/nested");
        let url = format!("file://{}", manifests.display());
        open_store(&url, &S3Options::default(), Missing::Create).unwrap();
        assert!(manifests.is_dir());
    }

    #[test]
    fn a_file_where_a_directory_belongs_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        let err = open_store(
            file.to_str().unwrap(),
            &S3Options::default(),
            Missing::Create,
        )
        .unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
    }

    #[test]
    fn unknown_schemes_are_refused_and_s3_builds_offline() {
        assert!(open_store("ftp://x", &S3Options::default(), Missing::Fail).is_err());
        let options = S3Options {
            endpoint: Some("http://127.0.0.1:9".into()),
            anonymous: true,
            ..S3Options::default()
        };
        open_store("s3://bucket/some/prefix", &options, Missing::Fail).unwrap();
        assert!(open_store("s3://", &options, Missing::Fail).is_err());
        open_store("memory://", &options, Missing::Fail).unwrap();
    }
}
