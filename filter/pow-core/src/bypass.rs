//! Which paths pass without a challenge: ACME's HTTP-01 path, built in, and the configured
//! `bypass_paths`, matched on whole path segments.
//!
//! The check reads the path as Envoy hands it over (Envoy leaves `;` parameters and most
//! percent-encodings alone), while the origin may read it differently: Tomcat, Spring and older
//! Jetty drop `;` parameters and then resolve `..` (`/.well-known/..;/admin` is `/admin` to them),
//! some decode `%2e`, `%2f`, `%3b` or `\` before routing. So a path bypasses only when it is
//! plain: `/` followed by segments of unreserved characters (RFC 3986: letters, digits, `-`, `.`,
//! `_`, `~`), none empty (no `//`) and none `.` or `..`. Such a path means the same to every
//! origin; anything else is challenged like any other path.

/// ACME HTTP-01 (RFC 8555, section 8.3): the only built-in bypass, so that certificates renew
/// whatever the policy.
pub const ACME_PREFIX: &str = "/.well-known/acme-challenge/";

/// Whether `path` (without its query) is plain, as described above. A trailing `/` is allowed.
pub fn is_plain(path: &str) -> bool {
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    if rest.is_empty() {
        return true;
    }
    rest.strip_suffix('/')
        .unwrap_or(rest)
        .split('/')
        .all(|segment| {
            !segment.is_empty()
                && segment != "."
                && segment != ".."
                && segment
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
        })
}

/// Whether `path` is `prefix` or below it, on whole segments: `/healthz` covers `/healthz`,
/// `/healthz/` and `/healthz/live`, not `/healthz-admin`; `/static/` covers what is below
/// `/static/`.
pub fn is_under(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        None => false,
        Some(rest) => prefix.ends_with('/') || rest.is_empty() || rest.starts_with('/'),
    }
}

/// Whether `path` bypasses, given the configured bypass paths.
pub fn bypasses(path: &str, configured: &[String]) -> bool {
    is_plain(path)
        && (path.starts_with(ACME_PREFIX) || configured.iter().any(|p| is_under(path, p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_paths() {
        for p in [
            "/",
            "/a",
            "/a/",
            "/a.b/c-d_e~f",
            "/.well-known/acme-challenge/x",
        ] {
            assert!(is_plain(p), "{p}");
        }
        for p in [
            "", "a", "//", "/a//b", "/a/./b", "/a/../b", "/a/..", "/..;/a", "/a;b", "/a%2e",
            "/a%41", "/a\\b", "/a b", "/a?b", "/a/b#c", "/é",
        ] {
            assert!(!is_plain(p), "{p}");
        }
    }

    #[test]
    fn whole_segments() {
        assert!(is_under("/healthz", "/healthz"));
        assert!(is_under("/healthz/", "/healthz"));
        assert!(is_under("/healthz/live", "/healthz"));
        assert!(!is_under("/healthz-admin", "/healthz"));
        assert!(!is_under("/healthzz/x", "/healthz"));
        assert!(is_under("/static/a.js", "/static/"));
        assert!(!is_under("/static", "/static/"));
        assert!(!is_under("/staticx", "/static/"));
    }

    #[test]
    fn only_acme_is_built_in() {
        assert!(bypasses("/.well-known/acme-challenge/tok_EN-1", &[]));
        assert!(!bypasses("/.well-known/openid-configuration", &[]));
        assert!(!bypasses("/.well-known/..;/admin", &[]));
        assert!(!bypasses("/.well-known/acme-challenge/..;/admin", &[]));
        let configured = ["/healthz".to_owned()];
        assert!(bypasses("/healthz", &configured));
        assert!(!bypasses("/healthz;x", &configured));
        assert!(!bypasses("/healthz/..;/admin", &configured));
        assert!(!bypasses("/healthz-admin", &configured));
    }
}
