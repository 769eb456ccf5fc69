//! The two program images, lists-refresh and etcd-backup: static binaries in /usr/local/bin and
//! a CA bundle, on no base image (no shell, no package manager, no libc), run as distroless's
//! `nonroot`. Each one's first binary is its entrypoint; the others are found on its PATH.

use std::path::{Path, PathBuf};

use crate::Error;
use crate::layout::{Entry, ImageSpec, RunConfig};

/// The binaries of the lists image, all in /usr/local/bin; the first is the entrypoint.
pub const LISTS_BINARIES: [&str; 4] = [
    "lists-refresh",
    "lists-gen-asn",
    "lists-gen-tor",
    "lists-gen-crawlers",
];
/// The backup image's entrypoint, built here.
pub const BACKUP_ENTRYPOINT: &str = "etcd-backup";
/// The upstream programs etcd-backup runs, by these bare names (its `--talosctl` and `--age`
/// defaults), so they sit beside it on the image's PATH.
pub const BACKUP_UPSTREAM: [&str; 2] = ["talosctl", "age"];
/// The images' user: distroless's `nonroot`, which the CronJobs' securityContext names.
pub const PROGRAM_USER: &str = "65532:65532";
pub const CA_BUNDLE_PATH: &str = "etc/ssl/certs/ca-certificates.crt";
/// Where the binaries go, and the image's whole PATH.
const BIN_DIR: &str = "usr/local/bin";

/// One binary of an image: its name in /usr/local/bin, where it is read from, and what it is
/// (for the error that names it).
#[derive(Debug, Clone)]
pub struct Binary {
    pub name: String,
    pub path: PathBuf,
    pub what: &'static str,
}

impl Binary {
    pub fn new(name: &str, path: PathBuf, what: &'static str) -> Binary {
        Binary {
            name: name.to_string(),
            path,
            what,
        }
    }
}

/// The lists image's binaries, all from `bin_dir`.
pub fn lists_binaries(bin_dir: &Path) -> Vec<Binary> {
    LISTS_BINARIES
        .iter()
        .map(|name| Binary::new(name, bin_dir.join(name), "a binary of the lists image"))
        .collect()
}

/// The backup image's binaries: etcd-backup from `bin_dir`, then talosctl and age as
/// pipelines/upstream.sh built them at their pins.
pub fn backup_binaries(bin_dir: &Path, talosctl: &Path, age: &Path) -> Vec<Binary> {
    let [talosctl_name, age_name] = BACKUP_UPSTREAM;
    vec![
        Binary::new(
            BACKUP_ENTRYPOINT,
            bin_dir.join(BACKUP_ENTRYPOINT),
            "the backup image's entrypoint",
        ),
        Binary::new(
            talosctl_name,
            talosctl.to_path_buf(),
            "talosctl, for the backup image",
        ),
        Binary::new(age_name, age.to_path_buf(), "age, for the backup image"),
    ]
}

/// A program image: the binaries (the first is the entrypoint) and the CA bundle, every file
/// read and checked here, before anything is written.
pub fn program_image(
    binaries: &[Binary],
    ca_bundle: &Path,
    mtime: u64,
    tag: String,
) -> Result<ImageSpec, Error> {
    let entrypoint = binaries
        .first()
        .ok_or_else(|| Error::Usage("an image needs at least one binary".into()))?;
    Ok(ImageSpec {
        architecture: "amd64".into(),
        os: "linux".into(),
        run: RunConfig {
            user: Some(PROGRAM_USER.into()),
            env: vec![
                format!("PATH=/{BIN_DIR}"),
                format!("SSL_CERT_FILE=/{CA_BUNDLE_PATH}"),
            ],
            entrypoint: vec![format!("/{BIN_DIR}/{}", entrypoint.name)],
            working_dir: Some("/".into()),
        },
        entries: entries(binaries, ca_bundle)?,
        mtime,
        tag,
    })
}

/// The tree: its directories, the static binaries, and the CA bundle.
fn entries(binaries: &[Binary], ca_bundle: &Path) -> Result<Vec<Entry>, Error> {
    let mut entries = Vec::new();
    for dir in [
        "etc",
        "etc/ssl",
        "etc/ssl/certs",
        "usr",
        "usr/local",
        BIN_DIR,
    ] {
        entries.push(Entry::Dir {
            path: dir.into(),
            mode: 0o755,
        });
    }
    // A writable /tmp for when no emptyDir is mounted there (sticky, as usual).
    entries.push(Entry::Dir {
        path: "tmp".into(),
        mode: 0o1777,
    });
    for binary in binaries {
        entries.push(Entry::File {
            path: format!("{BIN_DIR}/{}", binary.name),
            mode: 0o755,
            data: static_executable(binary)?,
        });
    }
    let ca = crate::read_file(ca_bundle, "the CA bundle")?;
    if !String::from_utf8_lossy(&ca).contains("-----BEGIN CERTIFICATE-----") {
        return Err(Error::Usage(format!(
            "{}: no PEM certificate in the CA bundle",
            ca_bundle.display()
        )));
    }
    entries.push(Entry::File {
        path: CA_BUNDLE_PATH.into(),
        mode: 0o644,
        data: ca,
    });
    Ok(entries)
}

/// The bytes of a binary that runs with nothing else in the image: a 64-bit ELF that names no
/// program interpreter (a dynamic loader, and the libc it would load, are not there).
fn static_executable(binary: &Binary) -> Result<Vec<u8>, Error> {
    let path = &binary.path;
    let data = crate::read_file(path, binary.what)?;
    match needs_interpreter(&data) {
        None => Err(Error::Usage(format!(
            "{} ({}): not a 64-bit little-endian ELF executable",
            path.display(),
            binary.what
        ))),
        Some(true) => Err(Error::Usage(format!(
            "{} ({}): dynamically linked (it names a program interpreter): the image has no \
             libc; build it static (Rust: for x86_64-unknown-linux-musl; Go: with \
             CGO_ENABLED=0, as pipelines/upstream.sh does)",
            path.display(),
            binary.what
        ))),
        Some(false) => Ok(data),
    }
}

/// Whether an ELF file asks for a program interpreter (a dynamic loader): the image has none.
fn needs_interpreter(elf: &[u8]) -> Option<bool> {
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 || elf[5] != 1 {
        return None; // not a 64-bit little-endian ELF
    }
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(elf.get(at..at + 8)?.try_into().ok()?));
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let phentsize = usize::from(u16_at(0x36)?);
    let phnum = usize::from(u16_at(0x38)?);
    for i in 0..phnum {
        let at = phoff.checked_add(i.checked_mul(phentsize)?)?;
        let p_type = u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?);
        if p_type == 3 {
            return Some(true); // PT_INTERP
        }
    }
    Some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_elf_is_told_from_a_static_one() {
        // This test binary is dynamically linked (glibc target).
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(needs_interpreter(&me), Some(true));
        assert_eq!(needs_interpreter(b"#!/bin/sh\n"), None);
    }

    /// The smallest ELF header a static executable has: 64-bit, little-endian, no program
    /// header (so no PT_INTERP).
    fn static_elf() -> Vec<u8> {
        let mut elf = vec![0u8; 64];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf
    }

    /// A folder holding etcd-backup, talosctl and age as `make`s of them would, and a CA bundle.
    fn backup_inputs(talosctl: &[u8]) -> (tempfile::TempDir, Vec<Binary>, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(BACKUP_ENTRYPOINT), static_elf()).unwrap();
        std::fs::write(dir.path().join("talosctl"), talosctl).unwrap();
        std::fs::write(dir.path().join("age"), static_elf()).unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\nMIIB\n").unwrap();
        let binaries = backup_binaries(
            dir.path(),
            &dir.path().join("talosctl"),
            &dir.path().join("age"),
        );
        (dir, binaries, ca)
    }

    #[test]
    fn the_backup_image_runs_etcd_backup_with_talosctl_and_age_on_its_path() {
        let (_dir, binaries, ca) = backup_inputs(&static_elf());
        let spec = program_image(&binaries, &ca, 0, "0.1.0".into()).unwrap();
        assert_eq!(spec.run.entrypoint, ["/usr/local/bin/etcd-backup"]);
        assert_eq!(spec.run.user.as_deref(), Some("65532:65532"));
        assert!(spec.run.env.contains(&"PATH=/usr/local/bin".to_string()));
        let files: Vec<&str> = spec
            .entries
            .iter()
            .filter_map(|e| match e {
                Entry::File { path, .. } => Some(path.as_str()),
                Entry::Dir { .. } => None,
            })
            .collect();
        assert_eq!(
            files,
            [
                "usr/local/bin/etcd-backup",
                "usr/local/bin/talosctl",
                "usr/local/bin/age",
                CA_BUNDLE_PATH
            ]
        );
    }

    #[test]
    fn a_dynamic_or_non_elf_upstream_program_is_refused_by_its_path() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        for (talosctl, why) in [
            (me, "dynamically linked"),
            (b"#!/bin/sh\n".to_vec(), "not a 64-bit little-endian ELF"),
        ] {
            let (dir, binaries, ca) = backup_inputs(&talosctl);
            let err = program_image(&binaries, &ca, 0, "0.1.0".into()).unwrap_err();
            let text = err.to_string();
            let named = dir.path().join("talosctl").display().to_string();
            assert!(text.contains(&named) && text.contains(why), "{text}");
            assert!(matches!(err, Error::Usage(_)));
        }
    }
}
