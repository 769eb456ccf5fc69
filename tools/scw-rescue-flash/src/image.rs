//! The Talos image: the `.zst` file, measured once (raw size, both digests) and opened again,
//! compressed or decompressed, for each write.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The image file cannot be read as a zstd disk image.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct ImageError {
    pub path: PathBuf,
    pub message: String,
}

/// A reader that hashes what it reads.
struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(buf.get(..n).unwrap_or_default());
        Ok(n)
    }
}

/// The raw image behind the `.zst` file: its size and digest, found by decompressing it once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub path: PathBuf,
    /// Bytes of the raw image.
    pub size: u64,
    /// Bytes of the .zst file.
    pub compressed: u64,
    /// sha256 of the raw (decompressed) image, lower-case hex.
    pub sha256: String,
    /// sha256 of the .zst file itself: what a download of it must have.
    pub compressed_sha256: String,
}

impl Image {
    pub fn measure(path: &Path) -> Result<Image, ImageError> {
        let file = Image::open_file(path)?;
        // The size of the file that is read, not of whatever the path names by then.
        let compressed = file
            .metadata()
            .map_err(|e| ImageError {
                path: path.to_path_buf(),
                message: format!("cannot read its size: {e}"),
            })?
            .len();
        // One read of the file: the .zst's digest is taken from the bytes the decoder reads,
        // beneath its buffer, and from whatever follows the last frame.
        let mut file = HashingReader {
            inner: file,
            hasher: Sha256::new(),
        };
        let mut reader = Image::decoder(path, &mut file)?;
        let mut hasher = Sha256::new();
        let mut buffer = vec![0u8; 1 << 20];
        let mut size = 0u64;
        loop {
            let n = reader.read(&mut buffer).map_err(|e| ImageError {
                path: path.to_path_buf(),
                message: format!("not a readable zstd image: {e}"),
            })?;
            if n == 0 {
                break;
            }
            hasher.update(buffer.get(..n).unwrap_or_default());
            size += n as u64;
        }
        drop(reader);
        std::io::copy(&mut file, &mut std::io::sink()).map_err(|e| ImageError {
            path: path.to_path_buf(),
            message: format!("cannot read: {e}"),
        })?;
        let compressed_sha256 = pop_common::hex::encode(&file.hasher.finalize());
        if size == 0 {
            return Err(ImageError {
                path: path.to_path_buf(),
                message: "the image is empty".into(),
            });
        }
        Ok(Image {
            path: path.to_path_buf(),
            size,
            compressed,
            sha256: pop_common::hex::encode(&hasher.finalize()),
            compressed_sha256,
        })
    }

    /// The .zst file, opened.
    pub(crate) fn open_file(path: &Path) -> Result<File, ImageError> {
        File::open(path).map_err(|e| ImageError {
            path: path.to_path_buf(),
            message: format!("cannot open: {e}"),
        })
    }

    /// `file` (the .zst at `path`), decompressed as it is read.
    fn decoder<R: Read>(path: &Path, file: R) -> Result<impl Read + use<R>, ImageError> {
        zstd::stream::read::Decoder::with_buffer(BufReader::with_capacity(1 << 20, file)).map_err(
            |e| ImageError {
                path: path.to_path_buf(),
                message: format!("not a zstd image: {e}"),
            },
        )
    }

    pub(crate) fn open_at(path: &Path) -> Result<impl Read + use<>, ImageError> {
        Image::decoder(path, Image::open_file(path)?)
    }

    /// Whether sending the .zst saves enough to be worth decompressing on the far side: at least
    /// a tenth of the raw bytes. A disk image, mostly free space, saves far more; an
    /// incompressible one saves nothing and would only add a `zstd` stage there.
    pub fn worth_sending_compressed(&self) -> bool {
        u128::from(self.compressed) * 10 < u128::from(self.size) * 9
    }

    /// The digest recorded in the inventory.
    pub fn digest(&self) -> String {
        format!("sha256:{}", self.sha256)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_image_is_measured_raw_and_a_non_zstd_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let raw = vec![7u8; 3 << 20];
        let path = dir.path().join("talos.raw.zst");
        std::fs::write(&path, zstd::encode_all(raw.as_slice(), 3).unwrap()).unwrap();
        let image = Image::measure(&path).unwrap();
        assert_eq!(image.size, raw.len() as u64);
        assert_eq!(image.sha256, pop_common::hex::encode(&Sha256::digest(&raw)));
        assert_eq!(
            image.compressed_sha256,
            pop_common::hex::encode(&Sha256::digest(std::fs::read(&path).unwrap()))
        );
        assert!(image.compressed < 1 << 20 && image.worth_sending_compressed());
        let noise = dir.path().join("noise.raw.zst");
        let random = testkit::incompressible_bytes(1 << 20, 7);
        std::fs::write(&noise, zstd::encode_all(random.as_slice(), 3).unwrap()).unwrap();
        let noise = Image::measure(&noise).unwrap();
        assert!(noise.compressed >= noise.size && !noise.worth_sending_compressed());
        let plain = dir.path().join("plain.raw");
        std::fs::write(&plain, &raw).unwrap();
        let err = Image::measure(&plain).unwrap_err().to_string();
        assert!(err.contains("plain.raw") && err.contains("zstd"), "{err}");
    }
}
