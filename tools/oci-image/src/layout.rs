//! Reproducible OCI images: a single-layer image written as an OCI image layout directory.
//!
//! Same inputs, same bytes: the tar has fixed owners, modes and mtimes and its entries in a
//! fixed order; the gzip header carries no timestamp and no file name; the JSON documents are
//! serialised from structs (fixed key order) with no creation date. The manifest digest is then
//! a function of the files only.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// The layer type Istio's "compat" Wasm variant requires (`extractOCIStandardImage`).
pub const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
/// The annotation of index.json that names the tag.
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// One entry of the layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Dir {
        path: String,
        mode: u32,
    },
    File {
        path: String,
        mode: u32,
        data: Vec<u8>,
    },
}

impl Entry {
    fn path(&self) -> &str {
        match self {
            Entry::Dir { path, .. } | Entry::File { path, .. } => path,
        }
    }
}

/// `sha256:<hex>` of some bytes.
pub fn digest_of(bytes: &[u8]) -> String {
    pop_common::records::Digest::sha256(bytes).into()
}

/// An uncompressed ustar archive of `entries`, sorted by path, every entry owned by 0:0 with
/// the given `mtime`.
pub fn tar(entries: &[Entry], mtime: u64) -> io::Result<Vec<u8>> {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.path().cmp(b.path()));
    let mut out = Vec::new();
    for entry in sorted {
        match entry {
            Entry::Dir { path, mode } => {
                let name = format!("{}/", path.trim_end_matches('/'));
                out.extend_from_slice(&header(&name, *mode, 0, mtime, b'5')?);
            }
            Entry::File { path, mode, data } => {
                out.extend_from_slice(&header(path, *mode, data.len() as u64, mtime, b'0')?);
                out.extend_from_slice(data);
                let pad = (512 - data.len() % 512) % 512;
                out.extend(std::iter::repeat_n(0u8, pad));
            }
        }
    }
    // The end of archive: two zero blocks.
    out.extend(std::iter::repeat_n(0u8, 1024));
    Ok(out)
}

fn octal(field: &mut [u8], value: u64) -> io::Result<()> {
    // NUL-terminated, zero-padded octal: the classic ustar encoding every reader accepts.
    let width = field.len() - 1;
    let text = format!("{value:0width$o}");
    if text.len() > width {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{value} does not fit a tar header field of {width} octal digits"),
        ));
    }
    field[..width].copy_from_slice(text.as_bytes());
    field[width] = 0;
    Ok(())
}

fn header(name: &str, mode: u32, size: u64, mtime: u64, kind: u8) -> io::Result<[u8; 512]> {
    let mut h = [0u8; 512];
    let bytes = name.as_bytes();
    if bytes.len() > 100 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("tar entry name `{name}` is longer than 100 bytes"),
        ));
    }
    h[..bytes.len()].copy_from_slice(bytes);
    octal(&mut h[100..108], u64::from(mode))?;
    octal(&mut h[108..116], 0)?; // uid
    octal(&mut h[116..124], 0)?; // gid
    octal(&mut h[124..136], size)?;
    octal(&mut h[136..148], mtime)?;
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[265..269].copy_from_slice(b"root");
    h[297..301].copy_from_slice(b"root");
    // The checksum is computed with its own field as eight spaces.
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    let text = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(text.as_bytes());
    Ok(h)
}

/// gzip (RFC 1952) with a fixed header (no mtime, no file name, OS "unknown") around a deflate
/// stream at a fixed level: the compressed bytes depend on the input and the pinned
/// miniz_oxide only, never on the build (flate2 would pick its backend by feature unification).
pub fn gzip(data: &[u8]) -> io::Result<Vec<u8>> {
    let deflated = miniz_oxide::deflate::compress_to_vec(data, 9);
    let mut out = Vec::with_capacity(deflated.len() + 18);
    // ID1 ID2, CM deflate, FLG none, MTIME 0, XFL 2 (best compression), OS 255 (unknown).
    out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 255]);
    out.extend_from_slice(&deflated);
    out.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    // ISIZE: the input's length modulo 2^32, as the format defines it.
    out.extend_from_slice(&((data.len() as u64 & 0xffff_ffff) as u32).to_le_bytes());
    Ok(out)
}

/// A content descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<std::collections::BTreeMap<String, String>>,
}

impl Descriptor {
    fn of(media_type: &str, bytes: &[u8]) -> Descriptor {
        Descriptor {
            media_type: media_type.to_string(),
            digest: digest_of(bytes),
            size: bytes.len() as u64,
            annotations: None,
        }
    }
}

/// The image manifest (OCI image-spec manifest.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    pub media_type: String,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

/// The image layout's index.json.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    pub schema_version: u32,
    pub media_type: String,
    pub manifests: Vec<Descriptor>,
}

/// The runtime part of the image config (OCI image-spec config.md, `config`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunConfig {
    #[serde(rename = "User", skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(rename = "Env", skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    #[serde(rename = "Entrypoint", skip_serializing_if = "Vec::is_empty")]
    pub entrypoint: Vec<String>,
    #[serde(rename = "WorkingDir", skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
}

#[derive(Debug, Serialize)]
struct ImageConfig<'a> {
    architecture: &'a str,
    os: &'a str,
    config: &'a RunConfig,
    rootfs: RootFs,
}

#[derive(Debug, Serialize)]
struct RootFs {
    #[serde(rename = "type")]
    kind: &'static str,
    diff_ids: Vec<String>,
}

/// What goes into one image.
#[derive(Debug, Clone)]
pub struct ImageSpec {
    pub architecture: String,
    pub os: String,
    pub run: RunConfig,
    pub entries: Vec<Entry>,
    /// The tar entries' modification time (seconds since the epoch; `SOURCE_DATE_EPOCH`).
    pub mtime: u64,
    /// The tag recorded in index.json (`org.opencontainers.image.ref.name`).
    pub tag: String,
}

impl ImageSpec {
    /// A Proxy-Wasm plugin image as Istio's WasmPlugin pulls it: one layer holding the module as
    /// `plugin.wasm`.
    pub fn wasm_plugin(module: Vec<u8>, mtime: u64, tag: String) -> ImageSpec {
        ImageSpec {
            // Go's names for a WASI preview 1 module, as the OCI config's platform fields
            // take them; Istio reads neither.
            architecture: "wasm".into(),
            os: "wasip1".into(),
            run: RunConfig::default(),
            entries: vec![Entry::File {
                path: "plugin.wasm".into(),
                mode: 0o644,
                data: module,
            }],
            mtime,
            tag,
        }
    }
}

/// The blobs of a built image, before they are written anywhere.
#[derive(Debug, Clone)]
pub struct Built {
    pub manifest: Vec<u8>,
    pub manifest_digest: String,
    pub config: Vec<u8>,
    pub layer: Vec<u8>,
}

/// Builds the layer, the config and the manifest in memory.
pub fn build(spec: &ImageSpec) -> io::Result<Built> {
    let tar = tar(&spec.entries, spec.mtime)?;
    let diff_id = digest_of(&tar);
    let layer = gzip(&tar)?;
    let config = serde_json::to_vec(&ImageConfig {
        architecture: &spec.architecture,
        os: &spec.os,
        config: &spec.run,
        rootfs: RootFs {
            kind: "layers",
            diff_ids: vec![diff_id],
        },
    })
    .map_err(io::Error::other)?;
    let manifest = serde_json::to_vec(&Manifest {
        schema_version: 2,
        media_type: MANIFEST_MEDIA_TYPE.to_string(),
        config: Descriptor::of(CONFIG_MEDIA_TYPE, &config),
        layers: vec![Descriptor::of(LAYER_MEDIA_TYPE, &layer)],
    })
    .map_err(io::Error::other)?;
    Ok(Built {
        manifest_digest: digest_of(&manifest),
        manifest,
        config,
        layer,
    })
}

fn blob_path(dir: &Path, digest: &str) -> PathBuf {
    dir.join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"))
}

/// Writes `built` as an OCI image layout at `out`, replacing an earlier layout there: it is
/// assembled beside `out` and renamed into place, so a failure leaves the old one whole. A
/// directory at `out` that is not an image layout is never removed.
pub fn write_layout(built: &Built, tag: &str, out: &Path) -> io::Result<()> {
    if out.exists() && !out.join("oci-layout").is_file() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not an OCI image layout: refusing to replace it",
                out.display()
            ),
        ));
    }
    let name = out
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the output has no name"))?;
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent)?;
    let staging = tempfile::Builder::new()
        .prefix(&format!(".{}.", name.to_string_lossy()))
        .tempdir_in(&parent)?;
    let dir = staging.path();
    std::fs::create_dir_all(dir.join("blobs/sha256"))?;
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    for bytes in [&built.manifest, &built.config, &built.layer] {
        std::fs::write(blob_path(dir, &digest_of(bytes)), bytes)?;
    }
    let mut manifest = Descriptor::of(MANIFEST_MEDIA_TYPE, &built.manifest);
    manifest.annotations = Some([(REF_NAME.to_string(), tag.to_string())].into());
    let index = serde_json::to_vec(&Index {
        schema_version: 2,
        media_type: INDEX_MEDIA_TYPE.to_string(),
        manifests: vec![manifest],
    })
    .map_err(io::Error::other)?;
    std::fs::write(dir.join("index.json"), index)?;
    if out.exists() {
        std::fs::remove_dir_all(out)?;
    }
    let kept = staging.keep();
    std::fs::rename(&kept, out)
}

/// An image read back from a layout: what `publish` pushes.
#[derive(Debug, Clone)]
pub struct Layout {
    pub dir: PathBuf,
    pub tag: String,
    pub manifest: Vec<u8>,
    pub manifest_digest: String,
    pub parsed: Manifest,
}

impl Layout {
    /// Reads the one manifest of index.json, and checks every blob it names is present with
    /// the digest it claims.
    pub fn read(dir: &Path) -> Result<Layout, String> {
        let index_path = dir.join("index.json");
        let index: Index = pop_common::input::read_json(&index_path).map_err(|e| e.to_string())?;
        let [descriptor] = index.manifests.as_slice() else {
            return Err(format!(
                "{}: field `manifests`: holds {} manifests, expected exactly one",
                index_path.display(),
                index.manifests.len()
            ));
        };
        let tag = descriptor
            .annotations
            .as_ref()
            .and_then(|a| a.get(REF_NAME))
            .cloned()
            .ok_or_else(|| {
                format!(
                    "{}: field `manifests[0].annotations`: no `{REF_NAME}` (the tag)",
                    index_path.display()
                )
            })?;
        let manifest = Self::blob(dir, &descriptor.digest)?;
        let parsed: Manifest =
            pop_common::input::decode_json(&blob_path(dir, &descriptor.digest), &manifest)
                .map_err(|e| e.to_string())?;
        for blob in std::iter::once(&parsed.config).chain(&parsed.layers) {
            Self::blob(dir, &blob.digest)?;
        }
        Ok(Layout {
            dir: dir.to_path_buf(),
            tag,
            manifest_digest: descriptor.digest.clone(),
            manifest,
            parsed,
        })
    }

    /// A blob's bytes, checked against its digest.
    pub fn blob(dir: &Path, digest: &str) -> Result<Vec<u8>, String> {
        let path = blob_path(dir, digest);
        let bytes =
            std::fs::read(&path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
        if digest_of(&bytes) != digest {
            return Err(format!(
                "{}: its content does not match its digest {digest}",
                path.display()
            ));
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(data: &[u8]) -> ImageSpec {
        ImageSpec::wasm_plugin(data.to_vec(), 0, "0.1.0".into())
    }

    #[test]
    fn the_same_input_gives_the_same_manifest_digest_and_another_input_another() {
        let a = build(&spec(b"\0asm\x01\0\0\0")).unwrap();
        let b = build(&spec(b"\0asm\x01\0\0\0")).unwrap();
        let c = build(&spec(b"\0asm\x01\0\0\x01")).unwrap();
        assert_eq!(a.manifest_digest, b.manifest_digest);
        assert_eq!(a.layer, b.layer);
        assert_ne!(a.manifest_digest, c.manifest_digest);
        let mut later = spec(b"\0asm\x01\0\0\0");
        later.mtime = 1;
        assert_ne!(build(&later).unwrap().manifest_digest, a.manifest_digest);
    }

    /// The digest of the smallest module's image, frozen: it moves only when the image format
    /// or the pinned deflate (miniz_oxide) changes, and then every published digest moves too,
    /// which a release note must say. It once moved with nothing but the set of crates built
    /// alongside (flate2 switched backend): that is what this catches.
    #[test]
    fn the_smallest_image_has_a_frozen_digest() {
        let built = build(&spec(b"\0asm\x01\0\0\0")).unwrap();
        assert_eq!(
            built.manifest_digest,
            "sha256:147ca8a13acf7e0470b3408e870f64ce0999d9784cf4600a54db6eeeb9a3b300"
        );
    }

    #[test]
    fn the_gzip_header_has_no_timestamp_no_name_and_a_fixed_os() {
        let gz = gzip(b"hello").unwrap();
        assert_eq!(&gz[..3], &[0x1f, 0x8b, 8]);
        assert_eq!(gz[3], 0, "no FNAME, no FEXTRA, no FCOMMENT");
        assert_eq!(&gz[4..8], &[0, 0, 0, 0], "MTIME is zero");
        assert_eq!(gz[9], 255, "OS unknown");
        // The trailer: CRC-32 of "hello" (0x3610a686) and its length.
        assert_eq!(&gz[gz.len() - 8..], &[0x86, 0xa6, 0x10, 0x36, 5, 0, 0, 0]);
        let inflated = miniz_oxide::inflate::decompress_to_vec(&gz[10..gz.len() - 8]).unwrap();
        assert_eq!(inflated, b"hello");
    }

    #[test]
    fn tar_entries_are_sorted_owned_by_root_and_checksummed() {
        let entries = vec![
            Entry::File {
                path: "usr/b".into(),
                mode: 0o755,
                data: vec![1; 600],
            },
            Entry::Dir {
                path: "usr".into(),
                mode: 0o755,
            },
        ];
        let tar = tar(&entries, 42).unwrap();
        assert_eq!(tar.len(), 512 + 512 + 1024 + 1024);
        assert_eq!(&tar[..4], b"usr/");
        assert_eq!(tar[156], b'5');
        assert_eq!(&tar[512..517], b"usr/b");
        let h = &tar[512..1024];
        assert_eq!(&h[108..116], b"0000000\0");
        assert_eq!(&h[124..136], b"00000001130\0", "600 bytes in octal");
        assert_eq!(&h[136..148], b"00000000052\0", "mtime 42");
        let mut copy = h.to_vec();
        copy[148..156].copy_from_slice(b"        ");
        let sum: u32 = copy.iter().map(|&b| u32::from(b)).sum();
        let stored = std::str::from_utf8(&h[148..154]).unwrap();
        assert_eq!(u32::from_str_radix(stored, 8).unwrap(), sum);
        let long = vec![Entry::Dir {
            path: "x".repeat(101),
            mode: 0o755,
        }];
        assert!(super::tar(&long, 0).is_err());
    }

    #[test]
    fn a_layout_reads_back_and_a_tampered_blob_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("img");
        let built = build(&spec(b"module")).unwrap();
        write_layout(&built, "0.1.0", &out).unwrap();
        // Written again over itself: replaced, same digest.
        write_layout(&built, "0.1.0", &out).unwrap();
        let layout = Layout::read(&out).unwrap();
        assert_eq!(layout.manifest_digest, built.manifest_digest);
        assert_eq!(layout.tag, "0.1.0");
        assert_eq!(layout.parsed.layers[0].media_type, LAYER_MEDIA_TYPE);
        std::fs::write(blob_path(&out, &layout.parsed.layers[0].digest), b"other").unwrap();
        let err = Layout::read(&out).unwrap_err();
        assert!(err.contains("does not match its digest"), "{err}");
    }

    #[test]
    fn a_directory_that_is_not_a_layout_is_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("precious"), b"x").unwrap();
        let built = build(&spec(b"module")).unwrap();
        let err = write_layout(&built, "0.1.0", dir.path()).unwrap_err();
        assert!(err.to_string().contains("not an OCI image layout"), "{err}");
        assert!(dir.path().join("precious").is_file());
    }
}
