//! The backups' names, and the pruning of the oldest beyond the count kept.

use scaleway::s3::S3;

use crate::Error;

const SUFFIX: &str = ".snapshot.age";

/// `<cluster>-<YYYYMMDDTHHMMSSZ>.snapshot.age` for `now` (seconds since the epoch): the names
/// sort as the times do.
pub fn object_name(cluster: &str, now: u64) -> String {
    format!("{cluster}-{}{SUFFIX}", pop_common::time::basic(now))
}

/// Whether `name` is a backup of `cluster` as [`object_name`] names them.
pub fn is_backup_name(cluster: &str, name: &str) -> bool {
    let Some(stamp) = name
        .strip_prefix(cluster)
        .and_then(|n| n.strip_prefix('-'))
        .and_then(|n| n.strip_suffix(SUFFIX))
    else {
        return false;
    };
    let bytes = stamp.as_bytes();
    bytes.len() == 16
        && bytes[8] == b'T'
        && bytes[15] == b'Z'
        && bytes[..8]
            .iter()
            .chain(&bytes[9..15])
            .all(u8::is_ascii_digit)
}

/// The keys to delete so that the `keep` newest backups of `cluster` stay, oldest first; keys
/// under the prefix that are not such backups are never among them.
pub fn to_prune(keys: &[String], prefix: &str, cluster: &str, keep: usize) -> Vec<String> {
    let folder = format!("{prefix}/");
    let mut backups: Vec<&String> = keys
        .iter()
        .filter(|k| {
            k.strip_prefix(&folder)
                .is_some_and(|name| is_backup_name(cluster, name))
        })
        .collect();
    backups.sort();
    let extra = backups.len().saturating_sub(keep);
    backups.into_iter().take(extra).cloned().collect()
}

/// Deletes the backups beyond the `keep` newest; the keys deleted.
pub(crate) fn prune(
    s3: &S3<'_>,
    bucket: &str,
    prefix: &str,
    cluster: &str,
    keep: usize,
) -> Result<Vec<String>, Error> {
    let keys = s3
        .list_keys(bucket, &format!("{prefix}/"))
        .map_err(|e| Error::Prune(Box::new(e)))?;
    let old = to_prune(&keys, prefix, cluster, keep);
    for key in &old {
        pop_common::info!("deleting {bucket}/{key}: older than the {keep} kept");
        s3.delete_object(bucket, key)
            .map_err(|e| Error::Prune(Box::new(e)))?;
    }
    Ok(old)
}
