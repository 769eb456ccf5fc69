//! The upload of a file: one PUT when it fits in one part, else a multipart upload whose parts go
//! up [`Multipart::parallel`] at a time, as S3 allows ("parts can be uploaded independently, in
//! any order, and in parallel", AWS S3 User Guide, "Uploading and copying objects using multipart
//! upload"): one connection is far below what a real link to Object Storage carries.
//!
//! Each part is read from the file at its own offset, hashed once (its `x-amz-content-sha256`),
//! and retried alone by the client's backoff: a part that fails is sent again, the others are
//! not. A part that fails for good stops the parts not yet started; once the parts in flight have
//! ended, the upload is aborted, so no part is left stored (and billed), and the error names the
//! part. The progress on stderr counts the bytes Object Storage has acknowledged, never the bytes
//! read or being sent.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::{META_PREFIX, MIN_PART, S3, S3Error, object_path, sigv4, xml_value, xml_values};

/// The most parts Object Storage takes in one upload: "1 to 1000 parts per object" (Scaleway's
/// Object Storage docs, "Managing multipart uploads"; AWS takes 10,000).
pub const MAX_PARTS: u64 = 1000;

/// The most parts in flight [`Multipart::parallel`] may ask for: each one is held in memory
/// while it is sent.
pub const MAX_PARALLEL: usize = 32;

/// How a file larger than one part goes up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Multipart {
    /// Bytes per part (the last one may be smaller); raised to [`MIN_PART`] if below.
    pub part_size: usize,
    /// Parts in flight at once, 1 to [`MAX_PARALLEL`]; the memory held is about
    /// `parallel * part_size`.
    pub parallel: usize,
}

impl Default for Multipart {
    /// 64 MiB parts, 4 at once (rclone's default upload concurrency for S3).
    fn default() -> Self {
        Multipart {
            part_size: 64 * 1024 * 1024,
            parallel: 4,
        }
    }
}

/// An object's user metadata as the headers that record it (`x-amz-meta-<name>`).
fn meta_headers(metadata: &[(&str, &str)]) -> Vec<(String, String)> {
    metadata
        .iter()
        .map(|(k, v)| {
            (
                format!("{META_PREFIX}{}", k.to_ascii_lowercase()),
                (*v).to_owned(),
            )
        })
        .collect()
}

impl S3<'_> {
    /// Uploads `file` to `bucket`/`key` and returns its size: one PUT when it fits in one part,
    /// else a multipart upload (see the module). Uploads of the same key that an interrupted run
    /// left unfinished are aborted first: their parts are billed and nothing else would end them.
    /// `metadata` is recorded with the object (`x-amz-meta-<name>`), as [`S3::object`] reads it
    /// back.
    pub fn upload_file(
        &self,
        bucket: &str,
        key: &str,
        file: &Path,
        how: Multipart,
        metadata: &[(&str, &str)],
    ) -> Result<u64, S3Error> {
        let meta = meta_headers(metadata);
        let io = |error| S3Error::File {
            path: file.to_path_buf(),
            error,
        };
        let part_size = how.part_size.max(MIN_PART);
        let mut handle = File::open(file).map_err(io)?;
        let total = handle.metadata().map_err(io)?.len();
        let path = object_path(bucket, key);
        if total <= part_size as u64 {
            let mut body = Vec::new();
            handle.read_to_end(&mut body).map_err(io)?;
            return self.put_whole(&path, key, body, &meta);
        }
        let parts = total.div_ceil(part_size as u64);
        if parts > MAX_PARTS {
            return Err(S3Error::TooManyParts {
                path: file.to_path_buf(),
                size: total,
                part_size,
                parts,
                max: MAX_PARTS,
            });
        }
        for upload_id in self.unfinished_uploads(bucket, key)? {
            pop_common::warn!(
                "{key}: aborting the upload {upload_id} an earlier run left unfinished"
            );
            self.abort(&path, &upload_id)?;
        }
        let created = self.call_as(
            &format_args!("S3 POST {path}?uploads"),
            "POST",
            &path,
            "uploads=",
            Vec::new(),
            &meta,
        )?;
        let upload_id = xml_value(&String::from_utf8_lossy(&created.body), "UploadId")
            .ok_or_else(|| S3Error::Answer(format!("POST {path}?uploads"), "UploadId"))?;
        let upload = Upload {
            s3: self,
            path: &path,
            key,
            upload_query: upload_query(&upload_id),
            file: &handle,
            file_name: file,
            part_size: part_size as u64,
            total,
            parts,
            progress: Mutex::new(Acknowledged::default()),
        };
        let result = upload
            .send_parts(how.parallel)
            .and_then(|etags| upload.complete(&etags));
        if let Err(err) = result {
            // Every part's thread has ended by now: no part still in flight can land after the
            // abort and stay stored ("if any part uploads are currently in progress, those part
            // uploads might or might not succeed", AWS S3 API Reference, AbortMultipartUpload).
            if let Err(abort) = self.abort(&path, &upload_id) {
                pop_common::warn!("could not abort the upload {upload_id} of {key}: {abort}");
            }
            return Err(err);
        }
        Ok(total)
    }

    /// A file that fits in one part, in one PUT; returns its size.
    fn put_whole(
        &self,
        path: &str,
        key: &str,
        body: Vec<u8>,
        meta: &[(String, String)],
    ) -> Result<u64, S3Error> {
        let size = body.len() as u64;
        self.call_as(&format_args!("S3 PUT {path}"), "PUT", path, "", body, meta)?;
        pop_common::info!("uploaded {key}: {size} bytes");
        Ok(size)
    }

    /// The ids of the multipart uploads of `key` begun and neither completed nor aborted
    /// (ListMultipartUploads, its first page: a thousand uploads).
    pub fn unfinished_uploads(&self, bucket: &str, key: &str) -> Result<Vec<String>, S3Error> {
        let query = format!("prefix={}&uploads=", sigv4::uri_encode(key, false));
        let r = self.call("GET", &format!("/{bucket}"), &query, Vec::new())?;
        let text = String::from_utf8_lossy(&r.body);
        Ok(xml_values(&text, "Upload")
            .iter()
            .filter(|upload| xml_value(upload, "Key").as_deref() == Some(key))
            .filter_map(|upload| xml_value(upload, "UploadId"))
            .collect())
    }

    /// AbortMultipartUpload; an upload already gone (an abort repeated after a cut) is aborted.
    fn abort(&self, path: &str, upload_id: &str) -> Result<(), S3Error> {
        match self.call("DELETE", path, &upload_query(upload_id), Vec::new()) {
            Ok(_) | Err(S3Error::Status { status: 404, .. }) => Ok(()),
            Err(err) => Err(err),
        }
    }
}

/// One multipart upload under way.
#[derive(Debug)]
struct Upload<'u, 'a> {
    s3: &'u S3<'a>,
    /// The object's path, `/bucket/key`.
    path: &'u str,
    key: &'u str,
    /// `uploadId=...`, encoded.
    upload_query: String,
    file: &'u File,
    file_name: &'u Path,
    part_size: u64,
    total: u64,
    parts: u64,
    progress: Mutex<Acknowledged>,
}

impl Upload<'_, '_> {
    /// Sends every part, `parallel` at a time, and returns their ETags in part order; the first
    /// part to fail for good stops the parts not yet started and is the error.
    fn send_parts(&self, parallel: usize) -> Result<Vec<String>, S3Error> {
        let next = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        // At most MAX_PARTS: the casts to usize below are exact.
        let etags: Mutex<Vec<Option<String>>> = Mutex::new(vec![None; self.parts as usize]);
        let failure: Mutex<Option<S3Error>> = Mutex::new(None);
        let threads = (parallel.clamp(1, MAX_PARALLEL) as u64).min(self.parts);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        if index >= self.parts {
                            break;
                        }
                        match self.send_part(index) {
                            Ok(etag) => {
                                if let Some(slot) = lock(&etags).get_mut(index as usize) {
                                    *slot = Some(etag);
                                }
                            }
                            Err(err) => {
                                stop.store(true, Ordering::Relaxed);
                                lock(&failure).get_or_insert(err);
                            }
                        }
                    }
                });
            }
        });
        if let Some(err) = failure.into_inner().unwrap_or_else(PoisonError::into_inner) {
            return Err(err);
        }
        etags
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
            .into_iter()
            .collect::<Option<Vec<String>>>()
            .ok_or_else(|| S3Error::Answer(format!("PUT {}", self.path), "every part's ETag"))
    }

    /// Part `index + 1`: read at its offset, sent (and retried) alone, counted once acknowledged.
    fn send_part(&self, index: u64) -> Result<String, S3Error> {
        let number = index + 1;
        let first = index * self.part_size;
        let len = self.part_size.min(self.total - first);
        let named = |source| S3Error::Part {
            number,
            parts: self.parts,
            first,
            last: first + len - 1,
            source: Box::new(source),
        };
        let io = |error| {
            named(S3Error::File {
                path: self.file_name.to_path_buf(),
                error,
            })
        };
        // At most part_size, a usize.
        let mut body = vec![0; len as usize];
        self.file.read_exact_at(&mut body, first).map_err(io)?;
        let query = format!("partNumber={number}&{}", self.upload_query);
        let label = format_args!("S3 PUT {} part {number} of {}", self.path, self.parts);
        let response = self
            .s3
            .call_as(&label, "PUT", self.path, &query, body, &[])
            .map_err(named)?;
        let etag = response
            .header("etag")
            .ok_or_else(|| {
                named(S3Error::Answer(
                    format!("PUT {} part {number}", self.path),
                    "ETag",
                ))
            })?
            .to_owned();
        // Logged under the lock, so that the lines on stderr only ever go up.
        let mut progress = lock(&self.progress);
        progress.bytes += len;
        progress.count += 1;
        let line = format!(
            "{:>3}% acknowledged ({} of {} MiB, {} of {} parts)",
            progress.bytes * 100 / self.total.max(1),
            progress.bytes >> 20,
            self.total >> 20,
            progress.count,
            self.parts
        );
        pop_common::info!("upload {}: {line}", self.key);
        drop(progress);
        Ok(etag)
    }

    /// CompleteMultipartUpload with the parts in order. S3 may answer 200 and still have failed,
    /// the error then in the body ("a 200 OK response can contain either a success or an error",
    /// AWS S3 API Reference, CompleteMultipartUpload): that is an error here too.
    fn complete(&self, etags: &[String]) -> Result<(), S3Error> {
        let mut xml = String::from("<CompleteMultipartUpload>");
        for (number, etag) in (1u64..).zip(etags) {
            xml.push_str(&format!(
                "<Part><PartNumber>{number}</PartNumber><ETag>{etag}</ETag></Part>"
            ));
        }
        xml.push_str("</CompleteMultipartUpload>");
        let r = self
            .s3
            .call("POST", self.path, &self.upload_query, xml.into_bytes())?;
        if String::from_utf8_lossy(&r.body).contains("<Error>") {
            return Err(S3Error::status("POST", self.path, r.status, &r.body));
        }
        Ok(())
    }
}

/// What Object Storage has acknowledged of an upload: a part counts once its PUT is answered with
/// its ETag, never when it is read or being sent.
#[derive(Debug, Default)]
struct Acknowledged {
    bytes: u64,
    count: u64,
}

/// `uploadId=<id>`, encoded: the query of every call on one multipart upload.
fn upload_query(upload_id: &str) -> String {
    format!("uploadId={}", sigv4::uri_encode(upload_id, false))
}

/// A lock that a panicked thread left poisoned still guards plain data: take it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
