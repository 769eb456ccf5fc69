//! The values that go from the infra config into a node's Talos machine config and onto the
//! rescue system's command lines: the worker's install disk and the API host name. They are
//! checked here, once, where they enter (the config, a tool's arguments), so that every later
//! use (a YAML patch, a `dd of=...` on the rescue system) can take them as they are: a value
//! that passes holds no character a YAML scalar or a shell word would read as syntax.

/// Why a value was refused: says what a good one looks like.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{value}` {expected}")]
pub struct InvalidValue {
    pub value: String,
    pub expected: &'static str,
}

/// An install disk: an absolute device path under `/dev/` (`/dev/sda`, `/dev/nvme0n1`,
/// `/dev/disk/by-id/wwn-0x5000c500a1b2c3d4`, `/dev/disk/by-path/pci-0000:00:17.0-ata-1`), each
/// part made of letters, digits and `._:+-`, no `.` or `..` part, at most 255 bytes.
pub fn check_install_disk(value: &str) -> Result<(), InvalidValue> {
    let refused = || InvalidValue {
        value: value.to_owned(),
        expected: "is not a device path such as /dev/sda, /dev/nvme0n1 or \
                   /dev/disk/by-id/<id> (letters, digits and ._:+- after /dev/)",
    };
    let rest = value.strip_prefix("/dev/").ok_or_else(refused)?;
    let parts_ok = rest.split('/').all(|part| {
        !part.is_empty()
            && part != "."
            && part != ".."
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._:+-".contains(&b))
    });
    if value.len() <= 255 && parts_ok {
        Ok(())
    } else {
        Err(refused())
    }
}

/// A DNS label as the project writes names: 1 to 63 lowercase letters, digits and `-`, not
/// starting or ending with `-`.
pub fn is_dns_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && !label.starts_with('-')
        && !label.ends_with('-')
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A DNS host name: dot-separated [`is_dns_label`] labels, at least two, at most 253 bytes.
pub fn is_host_name(value: &str) -> bool {
    value.len() <= 253 && value.contains('.') && value.split('.').all(is_dns_label)
}

/// [`is_host_name`], or why not.
pub fn check_host_name(value: &str) -> Result<(), InvalidValue> {
    verdict(
        value,
        is_host_name(value),
        "is not a DNS host name such as api.example.com (lowercase letters, digits and '-' in \
         dot-separated labels)",
    )
}

/// A cluster's name: one [`is_dns_label`], since it names servers, tags, DNS records and the
/// backups' objects; or why not.
pub fn check_cluster_name(value: &str) -> Result<(), InvalidValue> {
    verdict(
        value,
        is_dns_label(value),
        "is not a cluster name: a DNS label, 1 to 63 lowercase letters, digits and '-', not \
         starting or ending with '-' (it names servers, tags and backups)",
    )
}

/// `Ok` for a `good` value, else `value` refused as not what `expected` says.
fn verdict(value: &str, good: bool, expected: &'static str) -> Result<(), InvalidValue> {
    if good {
        Ok(())
    } else {
        Err(InvalidValue {
            value: value.to_owned(),
            expected,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::assert_verdicts;

    #[test]
    fn a_cluster_name_is_one_lowercase_dns_label() {
        assert_verdicts(
            check_cluster_name,
            &["edge-par", "a", "prod2"],
            &[
                "",
                "Edge-par",
                "edge.par",
                "-edge",
                "edge-",
                "edge_par",
                &"a".repeat(64),
            ],
            "is not a cluster name",
        );
    }

    #[test]
    fn device_paths_pass_and_anything_a_yaml_or_shell_parser_would_read_is_refused() {
        assert_verdicts(
            check_install_disk,
            &[
                "/dev/sda",
                "/dev/nvme0n1",
                "/dev/disk/by-id/wwn-0x5000c500a1b2c3d4",
                "/dev/disk/by-path/pci-0000:00:17.0-ata-1",
            ],
            &[
                "sda",
                "/dev/",
                "/dev//sda",
                "/dev/../etc/passwd",
                "/etc/passwd",
                "/dev/sda; reboot",
                "/dev/sda|e reboot",
                "/dev/sd$(id)",
                "/dev/sda\n    wipe: true",
                "/dev/sda #",
                "/dev/sd\"a",
                "/dev/sd'a",
                "/dev/sd`a`",
                "/dev/sd a",
                "/dev/sd{a}",
            ],
            "device path",
        );
        assert!(check_install_disk(&format!("/dev/{}", "a".repeat(251))).is_err());
    }

    #[test]
    fn host_names_pass_and_anything_else_is_refused() {
        assert_verdicts(
            check_host_name,
            &["api.example.com", "a.b", "k8s-1.edge.example.net"],
            &[
                "localhost",
                "API.example.com",
                "-api.example.com",
                "api-.example.com",
                "api..example.com",
                "api.example.com.",
                "api.example.com|e id",
                "api.example.com\n  - evil",
                "api.example.com:6443",
                "*.example.com",
                "api_1.example.com",
            ],
            "DNS host name",
        );
        let long = format!("{}.com", "a".repeat(64));
        assert!(check_host_name(&long).is_err());
    }
}
