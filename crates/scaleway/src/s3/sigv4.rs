//! AWS Signature Version 4 (header form), as Scaleway Object Storage checks it: canonical
//! request, string to sign, derived key, signature. Passes AWS's published test suite
//! (`tests/sigv4.rs`).

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::creds::SecretKey;

type HmacSha256 = Hmac<Sha256>;

/// The `x-amz-content-sha256` of an empty body.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Who signs, and for which region and service.
#[derive(Debug, Clone)]
pub struct Signer {
    pub access_key: String,
    pub secret: SecretKey,
    pub region: String,
    pub service: String,
}

/// What is signed.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    pub method: &'a str,
    /// The path as sent (already percent-encoded where it needs to be).
    pub path: &'a str,
    /// The query as sent, without `?` (may be empty).
    pub query: &'a str,
    /// Every header to sign, `host` and `x-amz-date` included.
    pub headers: &'a [(String, String)],
    /// Hex SHA-256 of the body (or `UNSIGNED-PAYLOAD`).
    pub payload_sha256: &'a str,
}

pub fn sha256_hex(data: &[u8]) -> String {
    pop_common::hex::encode(&Sha256::digest(data))
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length: new_from_slice cannot fail here.
    match HmacSha256::new_from_slice(key) {
        Ok(mut mac) => {
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
        Err(_) => Vec::new(),
    }
}

/// RFC 3986 percent-encoding: unreserved characters kept, `/` kept when `keep_slash`.
pub fn uri_encode(text: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric()
            || matches!(byte, b'-' | b'_' | b'.' | b'~')
            || (keep_slash && byte == b'/')
        {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn percent_decode(text: &str) -> String {
    let hex_value = |b: u8| {
        char::from(b)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if let (b'%', Some(hi), Some(lo)) = (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex_value),
            bytes.get(i + 2).copied().and_then(hex_value),
        ) {
            out.push(hi * 16 + lo);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The canonical URI. `normalize` removes `.` and `..` segments and empty ones (every service but
/// S3, which signs the path exactly as sent).
pub fn canonical_uri(path: &str, normalize: bool) -> String {
    if !normalize {
        let encoded = uri_encode(&percent_decode(path), true);
        return if encoded.is_empty() {
            "/".into()
        } else {
            encoded
        };
    }
    let mut segments: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let trailing = path.ends_with('/') && !segments.is_empty();
    let mut out = String::from("/");
    out.push_str(
        &segments
            .iter()
            .map(|s| uri_encode(&percent_decode(s), false))
            .collect::<Vec<_>>()
            .join("/"),
    );
    if trailing {
        out.push('/');
    }
    out
}

/// The canonical query: each name and value decoded then encoded, sorted by name then value.
pub fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (
                uri_encode(&percent_decode(k), false),
                uri_encode(&percent_decode(v), false),
            )
        })
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// The canonical headers block and the signed-headers list.
pub fn canonical_headers(headers: &[(String, String)]) -> (String, String) {
    let mut merged: Vec<(String, Vec<String>)> = Vec::new();
    for (name, value) in headers {
        let name = name.trim().to_ascii_lowercase();
        let value = value.split_whitespace().collect::<Vec<_>>().join(" ");
        match merged.iter_mut().find(|(n, _)| *n == name) {
            Some((_, values)) => values.push(value),
            None => merged.push((name, vec![value])),
        }
    }
    merged.sort_by(|a, b| a.0.cmp(&b.0));
    let block: String = merged
        .iter()
        .map(|(n, v)| format!("{n}:{}\n", v.join(",")))
        .collect();
    let signed = merged
        .iter()
        .map(|(n, _)| n.as_str())
        .collect::<Vec<_>>()
        .join(";");
    (block, signed)
}

impl Signer {
    pub fn canonical_request(&self, req: &Request<'_>, normalize_path: bool) -> (String, String) {
        let (headers, signed) = canonical_headers(req.headers);
        let creq = format!(
            "{}\n{}\n{}\n{}\n{}\n{}",
            req.method,
            canonical_uri(req.path, normalize_path),
            canonical_query(req.query),
            headers,
            signed,
            req.payload_sha256
        );
        (creq, signed)
    }

    fn scope(&self, amz_date: &str) -> String {
        let day = amz_date.get(..8).unwrap_or(amz_date);
        format!("{day}/{}/{}/aws4_request", self.region, self.service)
    }

    pub fn string_to_sign(&self, amz_date: &str, creq: &str) -> String {
        format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{}\n{}",
            self.scope(amz_date),
            sha256_hex(creq.as_bytes())
        )
    }

    pub fn signature(&self, amz_date: &str, sts: &str) -> String {
        let day = amz_date.get(..8).unwrap_or(amz_date);
        let k_date = hmac(
            format!("AWS4{}", self.secret.expose()).as_bytes(),
            day.as_bytes(),
        );
        let k_region = hmac(&k_date, self.region.as_bytes());
        let k_service = hmac(&k_region, self.service.as_bytes());
        let k_signing = hmac(&k_service, b"aws4_request");
        pop_common::hex::encode(&hmac(&k_signing, sts.as_bytes()))
    }

    /// The `Authorization` header value.
    pub fn authorization(&self, amz_date: &str, req: &Request<'_>, normalize_path: bool) -> String {
        let (creq, signed) = self.canonical_request(req, normalize_path);
        let sts = self.string_to_sign(amz_date, &creq);
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{}, SignedHeaders={signed}, Signature={}",
            self.access_key,
            self.scope(amz_date),
            self.signature(amz_date, &sts)
        )
    }
}

/// `YYYYMMDDTHHMMSSZ` for a Unix time (UTC).
pub fn amz_date(unix_seconds: u64) -> String {
    pop_common::time::basic(unix_seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_formatted_in_utc() {
        assert_eq!(amz_date(0), "19700101T000000Z");
        assert_eq!(amz_date(1_440_938_160), "20150830T123600Z");
        assert_eq!(amz_date(951_782_400), "20000229T000000Z");
    }

    #[test]
    fn s3_paths_are_encoded_once_and_not_normalized() {
        assert_eq!(
            canonical_uri("/bucket/a b/../c", false),
            "/bucket/a%20b/../c"
        );
        assert_eq!(canonical_uri("/bucket/a%20b", false), "/bucket/a%20b");
        assert_eq!(canonical_uri("/a/./b//c/../d/", true), "/a/b/d/");
    }
}
