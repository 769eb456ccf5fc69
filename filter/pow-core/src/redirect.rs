//! The verify endpoint's return target: a same-origin relative path, or nothing.
//!
//! Refused: anything that does not start with exactly one `/` (`//host`, `/\host`, a scheme,
//! a relative path), any backslash, any control character or space (browsers strip tabs and
//! newlines, so `/\t/host` becomes `//host`), any byte outside printable ASCII, and the same
//! forms once or more percent-decoded (`/%2F%2Fhost`, `/%5Chost`, `/%09/host`, `%252F`...),
//! and the verify endpoint itself. Every refusal is an `Err` with a reason.

/// The longest return target accepted.
pub const MAX_TARGET_LEN: usize = 2048;

/// Checks a return target and returns it unchanged if it is safe for `Location:`. The raw
/// target is read in one pass; only one that holds a `%` is decoded further.
pub fn check_target<'a>(target: &'a str, verify_path: &str) -> Result<&'a str, &'static str> {
    if target.is_empty() || target.len() > MAX_TARGET_LEN {
        return Err("empty or too long");
    }
    let raw = target.as_bytes();
    match raw {
        [b'/', b'/' | b'\\', ..] => return Err("network-path reference"),
        [b'/', ..] => {}
        _ => return Err("not an absolute path"),
    }
    let mut encoded = false;
    let mut path_end = raw.len();
    for (i, &c) in raw.iter().enumerate() {
        match c {
            b'\\' => return Err("backslash"),
            0..0x20 | 0x7f => return Err("control character"),
            b' ' | 0x80.. => return Err("space or non-ASCII byte"),
            b'%' => encoded = true,
            b'?' | b'#' if path_end == raw.len() => path_end = i,
            _ => {}
        }
    }
    if encoded {
        // Decode up to 4 layers of percent-encoding; every layer must be harmless (a decoded
        // layer may hold spaces and UTF-8, as `/caf%C3%A9` or `/a%20b` legitimately do).
        let mut layer = raw.to_vec();
        for _ in 0..4 {
            let decoded = percent_decode(&layer);
            if decoded == layer {
                break;
            }
            check_layer(&decoded)?;
            layer = decoded;
        }
        if layer.contains(&b'%') && percent_decode(&layer) != layer {
            return Err("too many layers of percent-encoding");
        }
    }
    if &raw[..path_end] == verify_path.as_bytes() {
        return Err("the verify endpoint");
    }
    Ok(target)
}

fn check_layer(b: &[u8]) -> Result<(), &'static str> {
    match b {
        [b'/', b'/' | b'\\', ..] => return Err("network-path reference"),
        [b'/', ..] => {}
        _ => return Err("not an absolute path"),
    }
    if b.contains(&b'\\') {
        return Err("backslash");
    }
    if b.iter().any(|&c| c < 0x20 || c == 0x7f) {
        return Err("control character");
    }
    Ok(())
}

/// Decodes `%XX` escapes; a malformed escape is kept as it is.
pub fn percent_decode(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (
                b.get(i + 1).and_then(|c| hex_val(*c)),
                b.get(i + 2).and_then(|c| hex_val(*c)),
            )
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: &str = "/.pow/verify";

    #[test]
    fn same_origin_paths_pass() {
        for ok in [
            "/",
            "/a/b?c=d&e=%2F",
            "/search?q=caf%C3%A9",
            "/path#frag",
            "/a%20b",
            "/caf%C3%A9",
            "/.well-known/x",
            "/a//b",
            "/~user/",
        ] {
            assert_eq!(check_target(ok, V), Ok(ok), "{ok}");
        }
    }

    #[test]
    fn every_redirect_form_is_refused() {
        for bad in [
            "",
            "//evil.example",
            "//evil.example/path",
            "/\\evil.example",
            "\\\\evil.example",
            "\\/evil.example",
            "https://evil.example",
            "http:evil.example",
            "javascript:alert(1)",
            "data:text/html,x",
            "evil.example",
            "./x",
            "?x",
            "#x",
            "/\t/evil.example",
            "/\n/evil.example",
            "/\r\nSet-Cookie: x=y",
            "/ /evil.example",
            "/a\u{0}b",
            "/a\u{7f}",
            "/caf\u{e9}",
            "/a\\b",
            // percent-encoded variants
            "/%2Fevil.example",
            "/%2fevil.example",
            "%2F%2Fevil.example",
            "/%5Cevil.example",
            "/%5cevil.example",
            "/%09/evil.example",
            "/%0d%0aSet-Cookie:x",
            "/%00",
            "/%252F%252Fevil.example",
            "/%25252F/evil.example",
            "%68ttps://evil.example",
            "/.pow/verify",
            "/.pow/verify?c=1",
        ] {
            assert!(check_target(bad, V).is_err(), "accepted {bad:?}");
        }
        let long = format!("/{}", "a".repeat(MAX_TARGET_LEN));
        assert!(check_target(&long, V).is_err());
    }

    #[test]
    fn decoding() {
        assert_eq!(percent_decode(b"/a%2Fb%zz%4"), b"/a/b%zz%4");
    }
}
