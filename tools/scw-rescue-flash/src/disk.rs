//! The target disk check, from `lsblk --json -b -p` run in the rescue system: the disk must
//! exist, be a whole disk, hold the image, and have nothing mounted (the rescue system runs in
//! RAM, so a mounted partition means someone is using that disk). When it refuses, it names the
//! disks that would do (Scaleway may present NVMe, not `/dev/sda`).

use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Lsblk {
    blockdevices: Vec<Device>,
}

#[derive(Debug, Deserialize)]
struct Device {
    name: String,
    #[serde(default, deserialize_with = "size")]
    size: u64,
    #[serde(rename = "type", default)]
    kind: String,
    /// util-linux < 2.37.
    #[serde(default)]
    mountpoint: Option<String>,
    /// util-linux >= 2.37.
    #[serde(default)]
    mountpoints: Vec<Option<String>>,
    #[serde(default)]
    children: Vec<Device>,
}

/// `size` is a number with `-b` in recent util-linux, a string in older ones.
fn size<'de, D: serde::Deserializer<'de>>(de: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Number(u64),
        Text(String),
    }
    match Size::deserialize(de)? {
        Size::Number(n) => Ok(n),
        Size::Text(t) => t.trim().parse().map_err(serde::de::Error::custom),
    }
}

impl Device {
    fn mounts(&self, into: &mut Vec<String>) {
        let mounted = self
            .mountpoint
            .iter()
            .chain(self.mountpoints.iter().flatten())
            .filter(|m| !m.is_empty());
        for mountpoint in mounted {
            into.push(format!("{} on {mountpoint}", self.name));
        }
        for child in &self.children {
            child.mounts(into);
        }
    }
}

/// Why a disk is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("lsblk output is not what `lsblk --json -b -p` prints: {0}")]
    Unreadable(String),
    #[error("disk {disk} not found; {suggestion}")]
    Missing { disk: String, suggestion: String },
    #[error("{disk} is a {kind}, not a whole disk; {suggestion}")]
    NotADisk {
        disk: String,
        kind: String,
        suggestion: String,
    },
    #[error("disk {disk} holds {size} bytes, the image needs {needed}; {suggestion}")]
    TooSmall {
        disk: String,
        size: u64,
        needed: u64,
        suggestion: String,
    },
    #[error(
        "disk {disk} has mounted filesystems ({mounts}): refusing to overwrite it; {suggestion}"
    )]
    Mounted {
        disk: String,
        mounts: String,
        suggestion: String,
    },
}

fn gigabytes(bytes: u64) -> String {
    format!("{:.1} GB", bytes as f64 / 1e9)
}

/// The device named `name`, at any depth (a partition is a child of its disk).
fn find<'a>(devices: &'a [Device], name: &str) -> Option<&'a Device> {
    devices.iter().find_map(|d| {
        if d.name == name {
            Some(d)
        } else {
            find(&d.children, name)
        }
    })
}

/// Checks `disk` in `lsblk` for an image of `needed` bytes; returns the disk's size.
pub fn check(lsblk: &str, disk: &str, needed: u64) -> Result<u64, Refusal> {
    let parsed: Lsblk =
        serde_json::from_str(lsblk).map_err(|e| Refusal::Unreadable(e.to_string()))?;
    let disks: Vec<&Device> = parsed
        .blockdevices
        .iter()
        .filter(|d| d.kind == "disk")
        .collect();
    let suggestion = || {
        let usable: Vec<String> = disks
            .iter()
            .filter(|d| d.name != disk && d.size >= needed)
            .filter(|d| {
                let mut mounts = Vec::new();
                d.mounts(&mut mounts);
                mounts.is_empty()
            })
            .map(|d| format!("{} ({})", d.name, gigabytes(d.size)))
            .collect();
        let all: Vec<String> = disks
            .iter()
            .map(|d| format!("{} ({})", d.name, gigabytes(d.size)))
            .collect();
        match (usable.as_slice(), all.as_slice()) {
            ([], []) => "lsblk shows no disk at all".to_owned(),
            ([], all) => format!("disks found: {}, none usable", all.join(", ")),
            (usable, _) => format!(
                "a disk that would do: {} (set the worker's install_disk / --disk to it)",
                usable.join(", ")
            ),
        }
    };
    let Some(device) = find(&parsed.blockdevices, disk) else {
        return Err(Refusal::Missing {
            disk: disk.to_owned(),
            suggestion: suggestion(),
        });
    };
    if device.kind != "disk" {
        return Err(Refusal::NotADisk {
            disk: disk.to_owned(),
            kind: device.kind.clone(),
            suggestion: suggestion(),
        });
    }
    if device.size < needed {
        return Err(Refusal::TooSmall {
            disk: disk.to_owned(),
            size: device.size,
            needed,
            suggestion: suggestion(),
        });
    }
    let mut mounts = Vec::new();
    device.mounts(&mut mounts);
    if !mounts.is_empty() {
        return Err(Refusal::Mounted {
            disk: disk.to_owned(),
            mounts: mounts.join(", "),
            suggestion: suggestion(),
        });
    }
    Ok(device.size)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// util-linux 2.38 (Debian 12, Ubuntu 24.04 rescue) with `-p`.
    const RESCUE: &str = r#"{"blockdevices": [
      {"name":"/dev/loop0", "maj:min":"7:0", "rm":false, "size":4096, "ro":true, "type":"loop", "mountpoints":["/snap"]},
      {"name":"/dev/sda", "maj:min":"8:0", "rm":false, "size":1000204886016, "ro":false, "type":"disk", "mountpoints":[null],
       "children":[{"name":"/dev/sda1", "maj:min":"8:1", "rm":false, "size":536870912, "ro":false, "type":"part", "mountpoints":[null]}]},
      {"name":"/dev/nvme0n1", "maj:min":"259:0", "rm":false, "size":480103981056, "ro":false, "type":"disk", "mountpoints":[null]}
    ]}"#;

    #[test]
    fn an_unmounted_big_enough_disk_passes() {
        assert_eq!(check(RESCUE, "/dev/sda", 4_000_000_000), Ok(1000204886016));
    }

    #[test]
    fn a_missing_disk_names_the_ones_that_would_do() {
        let err = check(RESCUE, "/dev/vda", 4_000_000_000)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("disk /dev/vda not found"), "{err}");
        assert!(
            err.contains("/dev/sda (1000.2 GB), /dev/nvme0n1 (480.1 GB)"),
            "{err}"
        );
        assert!(!err.contains("loop0"), "{err}");
        let partition = check(RESCUE, "/dev/sda1", 1).unwrap_err().to_string();
        assert!(
            partition.contains("is a part, not a whole disk"),
            "{partition}"
        );
    }

    #[test]
    fn too_small_and_mounted_disks_are_refused_with_a_suggestion() {
        let small = check(RESCUE, "/dev/nvme0n1", 500_000_000_000)
            .unwrap_err()
            .to_string();
        assert!(
            small.contains("holds 480103981056 bytes, the image needs 500000000000"),
            "{small}"
        );
        assert!(small.contains("would do: /dev/sda"), "{small}");
        let mounted = RESCUE.replace(
            r#""size":536870912, "ro":false, "type":"part", "mountpoints":[null]"#,
            r#""size":536870912, "ro":false, "type":"part", "mountpoints":["/mnt"]"#,
        );
        let err = check(&mounted, "/dev/sda", 1).unwrap_err().to_string();
        assert!(
            err.contains("mounted filesystems (/dev/sda1 on /mnt)"),
            "{err}"
        );
        assert!(err.contains("would do: /dev/nvme0n1"), "{err}");
    }

    #[test]
    fn older_lsblk_with_string_sizes_and_a_single_mountpoint() {
        let old = r#"{"blockdevices":[{"name":"/dev/sda","size":"2000","type":"disk","mountpoint":"/"}]}"#;
        assert!(matches!(
            check(old, "/dev/sda", 10),
            Err(Refusal::Mounted { .. })
        ));
        assert!(matches!(
            check("not json", "/dev/sda", 1),
            Err(Refusal::Unreadable(_))
        ));
    }
}
