//! The Talos image file, on this machine (Talos' Scaleway guide): the Image Factory's
//! `scaleway-amd64.raw.zst`, downloaded and checked against its pinned sha256, zstd-decompressed
//! and converted to QCOW2 with `qemu-img`, ready for the upload ([`super::image`]).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sha2::{Digest, Sha256};

/// Where the image comes from, pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TalosSource {
    pub url: String,
    /// Lowercase hex sha256 of the `.raw.zst` file.
    pub sha256: String,
    /// The same file already on this machine (`make talos-image-digests` keeps the one it
    /// measured), used instead of a download when its sha256 is the pin.
    pub file: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("download {url}: {error}")]
    Download { url: String, error: String },
    #[error(
        "download {url}: its sha256 is {got}, the pinned one is {want}: refused (the file was deleted)"
    )]
    Digest {
        url: String,
        got: String,
        want: String,
    },
    #[error("{program}: {error}")]
    Tool { program: String, error: String },
    #[error("{}: {error}", path.display())]
    File {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// The pinned file: `source.file` when it is there and holds the pinned bytes, else downloaded
/// into `dir`; returns its path.
pub fn obtain(source: &TalosSource, dir: &Path) -> Result<PathBuf, ImageError> {
    let Some(file) = source.file.as_ref().filter(|file| file.exists()) else {
        return download(source, dir);
    };
    match sha256_file(file) {
        Ok(sha256) if sha256 == source.sha256 => {
            pop_common::info!(
                "{}: the pinned image (sha256 {sha256}), not downloaded again",
                file.display()
            );
            return Ok(file.clone());
        }
        Ok(sha256) => pop_common::warn!(
            "{}: sha256 {sha256} is not the pinned {}: downloading it again",
            file.display(),
            source.sha256
        ),
        Err(error) => pop_common::warn!("{error}: downloading it again"),
    }
    download(source, dir)
}

/// Downloads `source` into `dir`, checking its sha256 as it streams; returns the file.
pub fn download(source: &TalosSource, dir: &Path) -> Result<PathBuf, ImageError> {
    let fail = |error: String| ImageError::Download {
        url: source.url.clone(),
        error,
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(3600)))
        .build()
        .into();
    pop_common::info!("downloading {}", source.url);
    let mut response = agent
        .get(&source.url)
        .call()
        .map_err(|e| fail(e.to_string()))?;
    let path = dir.join("talos.raw.zst");
    let mut file = std::fs::File::create(&path).map_err(|error| ImageError::File {
        path: path.clone(),
        error,
    })?;
    let mut reader = response.body_mut().as_reader();
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = reader.read(&mut buffer).map_err(|e| fail(e.to_string()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        file.write_all(&buffer[..n])
            .map_err(|error| ImageError::File {
                path: path.clone(),
                error,
            })?;
    }
    let got = pop_common::hex::encode(&hasher.finalize());
    if got != source.sha256 {
        let _ = std::fs::remove_file(&path);
        return Err(ImageError::Digest {
            url: source.url.clone(),
            got,
            want: source.sha256.clone(),
        });
    }
    Ok(path)
}

/// Runs `program` (zstd, qemu-img) without the Scaleway secret, which it has no use for.
fn run(program: &str, args: &[&std::ffi::OsStr]) -> Result<(), ImageError> {
    let mut command = Command::new(program);
    for variable in scaleway::creds::SECRET_VARIABLES {
        command.env_remove(variable);
    }
    let out = command.args(args).output().map_err(|e| {
        let hint = match program {
            "zstd" => " (apt-get install zstd)",
            "qemu-img" => " (apt-get install qemu-utils)",
            _ => "",
        };
        ImageError::Tool {
            program: program.to_owned(),
            error: format!("cannot run it: {e}{hint}"),
        }
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(ImageError::Tool {
            program: program.to_owned(),
            error: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        })
    }
}

/// `.raw.zst` -> `.raw` -> `.qcow2`; returns (qcow2 file, size of the raw disk in bytes).
pub fn convert(zst: &Path, dir: &Path) -> Result<(PathBuf, u64), ImageError> {
    let raw = dir.join("talos.raw");
    let qcow2 = dir.join("talos.qcow2");
    run(
        "zstd",
        &[
            "-d".as_ref(),
            "-q".as_ref(),
            "-f".as_ref(),
            zst.as_os_str(),
            "-o".as_ref(),
            raw.as_os_str(),
        ],
    )?;
    let size = std::fs::metadata(&raw)
        .map_err(|error| ImageError::File {
            path: raw.clone(),
            error,
        })?
        .len();
    run(
        "qemu-img",
        &[
            "convert".as_ref(),
            "-f".as_ref(),
            "raw".as_ref(),
            "-O".as_ref(),
            "qcow2".as_ref(),
            raw.as_os_str(),
            qcow2.as_os_str(),
        ],
    )?;
    let _ = std::fs::remove_file(&raw);
    Ok((qcow2, size))
}

/// The sha256 (lowercase hex) of a file, read as a stream.
pub fn sha256_file(path: &Path) -> Result<String, ImageError> {
    let fail = |error| ImageError::File {
        path: path.to_path_buf(),
        error,
    };
    let mut file = std::fs::File::open(path).map_err(fail)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(fail)?;
    Ok(pop_common::hex::encode(&hasher.finalize()))
}

/// The snapshot size to ask for: the disk rounded up to whole GB, at least 10 GB (the guide's).
pub fn snapshot_size(raw_size: u64) -> u64 {
    const GB: u64 = 1_000_000_000;
    raw_size.div_ceil(GB).max(10) * GB
}

#[cfg(test)]
mod tests {
    use super::*;

    use testkit::http::{Reply, Server};

    fn sha256_hex(bytes: &[u8]) -> String {
        pop_common::hex::encode(&Sha256::digest(bytes))
    }

    #[test]
    fn the_kept_file_is_used_when_it_holds_the_pin_else_the_image_is_downloaded() {
        let dir = tempfile::tempdir().unwrap();
        let pinned = b"the pinned image".to_vec();
        let kept = dir.path().join("kept.raw.zst");
        std::fs::write(&kept, &pinned).unwrap();
        // A factory with nothing to serve: a download would fail.
        let factory = Server::start(vec![]).unwrap();
        let source = TalosSource {
            url: format!("{}/image.raw.zst", factory.url),
            sha256: sha256_hex(&pinned),
            file: Some(kept.clone()),
        };
        assert_eq!(obtain(&source, dir.path()).unwrap(), kept);
        assert!(factory.requests().is_empty());

        // Other bytes there, or no file: the pinned image is downloaded.
        for file in [Some(b"another image".as_slice()), None] {
            let _ = std::fs::remove_file(&kept);
            if let Some(bytes) = file {
                std::fs::write(&kept, bytes).unwrap();
            }
            let factory = Server::start(vec![Reply::ok(pinned.clone())]).unwrap();
            let source = TalosSource {
                url: format!("{}/image.raw.zst", factory.url),
                ..source.clone()
            };
            let got = obtain(&source, dir.path()).unwrap();
            assert_eq!(got, dir.path().join("talos.raw.zst"));
            assert_eq!(std::fs::read(&got).unwrap(), pinned);
            assert_eq!(factory.requests().len(), 1);
        }
    }

    #[test]
    fn snapshot_sizes_are_whole_gb_and_at_least_ten() {
        assert_eq!(snapshot_size(1), 10_000_000_000);
        assert_eq!(snapshot_size(12_000_000_001), 13_000_000_000);
    }
}
