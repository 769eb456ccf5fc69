//! The inputs of an encrypted backup to Object Storage (the scheduled etcd backup, and the
//! platform config that deploys it), checked where each enters.

/// S3's bucket names as Object Storage takes them: 3 to 63 lowercase letters, digits, `-` and
/// `.`, starting and ending with a letter or a digit.
pub fn check_bucket_name(bucket: &str) -> Result<(), String> {
    let ok = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && bucket.starts_with(|c: char| c.is_ascii_alphanumeric())
        && bucket.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{bucket:?} is not a bucket name (3 to 63 lowercase letters, digits, '-' and '.')"
        ))
    }
}

/// A folder of the bucket: segments of letters, digits, `-`, `_` and `.`, joined by `/`, none
/// empty, none `.` or `..`.
pub fn check_object_prefix(prefix: &str) -> Result<(), String> {
    let segment_ok = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    if prefix.split('/').all(segment_ok) {
        Ok(())
    } else {
        Err(format!(
            "{prefix:?} is not a folder (segments of letters, digits, '-', '_' and '.' joined by \
             '/', no empty one)"
        ))
    }
}

/// An age X25519 recipient: `age1` and 58 bech32 characters (age's format, "Recipient
/// encoding": Bech32 of the 32-byte public key with the HRP `age`). age checks the checksum
/// itself; this refuses what is plainly something else (an identity, a file name) early.
pub fn check_age_recipient(recipient: &str) -> Result<(), String> {
    const BECH32: &str = "qpzry9x8gf2tvdw0s3jn54khce6mua7l";
    let body = recipient.strip_prefix("age1");
    match body {
        Some(body) if body.len() == 58 && body.chars().all(|c| BECH32.contains(c)) => Ok(()),
        _ if recipient.starts_with("AGE-SECRET-KEY-") => Err(
            "this is an age identity, the private key: give its public key (age-keygen -y)".into(),
        ),
        _ => Err(format!(
            "{recipient:?} is not an age public key (age1 and 58 lowercase bech32 characters)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_prefixes_and_recipients_are_checked_for_what_they_are() {
        for good in ["b-1", "edgepop-edge-par-0123abcd", "a.b.c"] {
            assert_eq!(check_bucket_name(good), Ok(()), "{good}");
        }
        for bad in ["ab", "Bucket", "-b1", "b1-", "b_1"] {
            assert!(check_bucket_name(bad).is_err(), "{bad}");
        }
        for good in ["edge-par", "backups/etcd", "a_b.c"] {
            assert_eq!(check_object_prefix(good), Ok(()), "{good}");
        }
        for bad in ["", "a//b", "../x", "/a", "a/"] {
            assert!(check_object_prefix(bad).is_err(), "{bad}");
        }
        let recipient = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p";
        assert_eq!(check_age_recipient(recipient), Ok(()));
        let identity = check_age_recipient("AGE-SECRET-KEY-1QQQQ").unwrap_err();
        assert!(identity.contains("the private key"), "{identity}");
        assert!(check_age_recipient("age1short").is_err());
        assert!(check_age_recipient(&recipient.to_uppercase()).is_err());
    }
}
