//! Which requests pass without a challenge: GET and HEAD (reading, never changing anything) of
//! ACME's HTTP-01 token path, built in, and of the configured `bypass_paths`. A configured path
//! is that path exactly (`/robots.txt` is not `/robots.txt/x`), or, when it ends with `/`,
//! every path below it (`/static/` covers `/static/app.js`).
//!
//! The check reads the path as Envoy hands it over (Envoy leaves `;` parameters and most
//! percent-encodings alone), while the origin may read it differently: Tomcat, Spring and older
//! Jetty drop `;` parameters and then resolve `..` (`/.well-known/..;/admin` is `/admin` to them),
//! some decode `%2e`, `%2f`, `%3b` or `\` before routing. So a path bypasses only when it is
//! plain: `/` followed by segments of unreserved characters (RFC 3986: letters, digits, `-`, `.`,
//! `_`, `~`), none empty (no `//`) and none `.` or `..`. Such a path means the same to every
//! origin; anything else is challenged like any other path.

/// ACME HTTP-01 (RFC 8555, section 8.3): the only built-in bypass, so that certificates renew
/// whatever the policy: this prefix and one token segment, nothing deeper.
pub const ACME_PREFIX: &str = "/.well-known/acme-challenge/";

/// The longest path that can bypass: ACME tokens and the usual bypassed files are far shorter,
/// and checking a longer one would cost more than it is worth.
pub const MAX_BYPASS_PATH: usize = 2048;

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

/// Whether `path` matches a configured bypass path: that path exactly, or below it when the
/// entry ends with `/` (whole segments).
pub fn matches(path: &str, entry: &str) -> bool {
    if entry.ends_with('/') {
        path.len() > entry.len() && path.starts_with(entry)
    } else {
        path == entry
    }
}

/// Whether `path` is an ACME HTTP-01 token path: the prefix and one non-empty segment.
pub fn is_acme(path: &str) -> bool {
    path.strip_prefix(ACME_PREFIX)
        .is_some_and(|token| !token.is_empty() && !token.contains('/'))
}

/// Whether a request with this method and path (without its query) bypasses, given the
/// configured bypass paths.
pub fn bypasses(method: &str, path: &str, configured: &[String]) -> bool {
    bypasses_acme(method, path) || bypasses_configured(method, path, configured)
}

/// Whether it is a read of an ACME HTTP-01 token: the built-in bypass, before any rule.
pub fn bypasses_acme(method: &str, path: &str) -> bool {
    // The cheap tests first: most paths are no bypass path, and are never scanned whole.
    matches!(method, "GET" | "HEAD")
        && path.len() <= MAX_BYPASS_PATH
        && is_acme(path)
        && is_plain(path)
}

/// Whether it is a read of one of the configured bypass paths.
pub fn bypasses_configured(method: &str, path: &str, configured: &[String]) -> bool {
    matches!(method, "GET" | "HEAD")
        && path.len() <= MAX_BYPASS_PATH
        && configured.iter().any(|p| matches(path, p))
        && is_plain(path)
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
    fn exact_paths_and_subtrees() {
        assert!(matches("/healthz", "/healthz"));
        assert!(!matches("/healthz/", "/healthz"));
        assert!(!matches("/healthz/live", "/healthz"));
        assert!(!matches("/healthz-admin", "/healthz"));
        assert!(matches("/static/a.js", "/static/"));
        assert!(matches("/static/a/b.js", "/static/"));
        assert!(!matches("/static/", "/static/"));
        assert!(!matches("/static", "/static/"));
        assert!(!matches("/staticx", "/static/"));
    }

    #[test]
    fn only_acme_tokens_are_built_in_and_only_for_reading() {
        assert!(bypasses("GET", "/.well-known/acme-challenge/tok_EN-1", &[]));
        assert!(bypasses(
            "HEAD",
            "/.well-known/acme-challenge/tok_EN-1",
            &[]
        ));
        for method in ["POST", "PUT", "DELETE", "OPTIONS", "get", ""] {
            assert!(!bypasses(method, "/.well-known/acme-challenge/tok", &[]));
        }
        for path in [
            "/.well-known/acme-challenge/",
            "/.well-known/acme-challenge",
            "/.well-known/acme-challenge/a/b",
            "/.well-known/openid-configuration",
            "/.well-known/..;/admin",
            "/.well-known/acme-challenge/..;/admin",
        ] {
            assert!(!bypasses("GET", path, &[]), "{path}");
        }
        let configured = ["/robots.txt".to_owned(), "/static/".to_owned()];
        assert!(bypasses("GET", "/robots.txt", &configured));
        assert!(bypasses("GET", "/static/app.js", &configured));
        for path in [
            "/robots.txt/x",
            "/robots.txt;x",
            "/static/../admin",
            "/robots.txtx",
        ] {
            assert!(!bypasses("GET", path, &configured), "{path}");
        }
        let long = format!("/static/{}", "a".repeat(MAX_BYPASS_PATH));
        assert!(!bypasses("GET", &long, &configured));
    }
}
