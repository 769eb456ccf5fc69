//! Paths as the policy matches them: the `/`-ended prefixes a prefix entry is looked up by, and
//! the forms a lenient origin may read a path as.

use super::MAX_PATH_SEGMENTS;

/// The proper prefixes of `path` that end with `/`, shortest first, at most
/// [`MAX_PATH_SEGMENTS`]: what a prefix entry (`/static/`) is looked up by.
pub fn segment_prefixes(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/')
        .take(MAX_PATH_SEGMENTS)
        .filter_map(move |(i, _)| path.get(..=i).filter(|p| p.len() < path.len()))
}

/// How many times percent-decoding is applied: a double-encoded `%252e` is read as `.` by some
/// stacks (a proxy decoding once, the application again).
const DECODE_ROUNDS: usize = 2;

/// The path, then the forms a lenient origin may read it as, each once: percent-decoded (twice
/// over), `\` taken for `/`, `;` parameters dropped from each segment, empty and `.` segments
/// dropped, `..` resolved; and that, ASCII lowercased (servers that fold case).
pub fn lenient_forms(path: &str) -> impl Iterator<Item = std::borrow::Cow<'_, str>> {
    use std::borrow::Cow;
    let mut others: [Option<String>; 2] = [None, None];
    // A plain path without capitals is its own normal form: nothing to allocate (most
    // requests).
    if !crate::bypass::is_plain(path) || path.bytes().any(|b| b.is_ascii_uppercase()) {
        let normal = normalise(path);
        let folded = normal.to_ascii_lowercase();
        if folded != path && folded != normal {
            others[1] = Some(folded);
        }
        if normal != path {
            others[0] = Some(normal);
        }
    }
    std::iter::once(Cow::Borrowed(path)).chain(others.into_iter().flatten().map(Cow::Owned))
}

fn normalise(path: &str) -> String {
    let mut bytes = path.as_bytes().to_vec();
    for _ in 0..DECODE_ROUNDS {
        bytes = crate::redirect::percent_decode(&bytes);
    }
    let text = String::from_utf8_lossy(&bytes).replace('\\', "/");
    let trailing = text.ends_with('/');
    let mut segments: Vec<&str> = Vec::new();
    for segment in text.split('/') {
        let segment = segment.split(';').next().unwrap_or("");
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let mut out = String::with_capacity(text.len() + 1);
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    if trailing || out.is_empty() {
        out.push('/');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_proper_and_end_with_a_slash() {
        assert_eq!(
            segment_prefixes("/a/b/c").collect::<Vec<_>>(),
            ["/", "/a/", "/a/b/"]
        );
        assert_eq!(segment_prefixes("/a/").collect::<Vec<_>>(), ["/"]);
        assert_eq!(segment_prefixes("/").count(), 0);
        let deep = "/a".repeat(100);
        assert_eq!(segment_prefixes(&deep).count(), MAX_PATH_SEGMENTS);
    }

    #[test]
    fn lenient_forms_cover_what_origins_read() {
        for (path, normal) in [
            ("/admin/x", "/admin/x"),
            ("/%61dmin/x", "/admin/x"),
            ("/%2561dmin/x", "/admin/x"),
            ("/admin;jsessionid=1/x", "/admin/x"),
            ("/static/../admin/x", "/admin/x"),
            ("/./admin//x", "/admin/x"),
            ("\\admin\\x", "/admin/x"),
            ("/admin%2fx", "/admin/x"),
            ("/a/", "/a/"),
            ("/..", "/"),
            ("", "/"),
        ] {
            assert_eq!(normalise(path), normal, "{path}");
        }
        let forms = |path: &'static str| lenient_forms(path).collect::<Vec<_>>();
        assert_eq!(forms("/A/b"), ["/A/b", "/a/b"]);
        assert_eq!(forms("/a"), ["/a"]);
    }
}
