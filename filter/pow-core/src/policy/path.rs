//! Paths as the policy matches them: one walk over a path gives whether it is plain and the
//! hashes its prefix entries are looked up by; and the forms a lenient origin may read a path
//! as.

use super::MAX_PATH_SEGMENTS;
use super::index::KeyHash;

/// What a walk over a path found besides its prefixes.
#[derive(Debug, Clone, Copy)]
pub struct Walked {
    /// Plain as [`crate::bypass::is_plain`] says, whatever its length.
    pub plain: bool,
    /// It has ASCII capitals.
    pub upper: bool,
    /// The hash of the whole path.
    pub hash: KeyHash,
}

/// A byte a plain path's segment may hold: letters, digits, `-`, `.`, `_`, `~`.
const PLAIN: u8 = 1;
/// An ASCII capital.
const UPPER: u8 = 2;

/// [`PLAIN`] and [`UPPER`] by byte: one load a byte of the walk.
static BYTES: [u8; 256] = {
    let mut table = [0; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') {
            table[b] = PLAIN;
        }
        if c.is_ascii_uppercase() {
            table[b] |= UPPER;
        }
        b += 1;
    }
    table
};

/// Walks `path` once: calls `prefix` with each of its proper prefixes that end with `/` among
/// its first [`MAX_PATH_SEGMENTS`] slashes (what a prefix entry such as `/static/` is looked up
/// by), and its hash. The root `/` is left out: no rule's path is `/` (the configuration
/// refuses it).
pub fn walk(path: &[u8], mut prefix: impl FnMut(&[u8], KeyHash)) -> Walked {
    let mut hash = KeyHash::START;
    let mut plain = path.first() == Some(&b'/');
    let mut upper = false;
    let mut slashes = 0;
    // Where the segment being walked starts.
    let mut segment = 0;
    for (i, &b) in path.iter().enumerate() {
        hash = hash.add(b);
        if b == b'/' {
            if i > 0 {
                let last = path.get(segment..i).unwrap_or_default();
                plain &= !matches!(last, b"" | b"." | b"..");
                if slashes < MAX_PATH_SEGMENTS
                    && i + 1 < path.len()
                    && let Some(p) = path.get(..=i)
                {
                    prefix(p, hash);
                }
            }
            slashes += 1;
            segment = i + 1;
        } else {
            let class = BYTES.get(usize::from(b)).copied().unwrap_or(0);
            plain &= class & PLAIN != 0;
            upper |= class & UPPER != 0;
        }
    }
    // The last segment may be empty: a trailing `/`.
    let last = path.get(segment..).unwrap_or_default();
    plain &= !matches!(last, b"." | b"..");
    Walked { plain, upper, hash }
}

/// How many times percent-decoding is applied: a double-encoded `%252e` is read as `.` by some
/// stacks (a proxy decoding once, the application again).
const DECODE_ROUNDS: usize = 2;

/// The forms a lenient origin may read `path` as besides itself, each once: percent-decoded
/// (twice over), `\` taken for `/`, `;` parameters dropped from each segment, empty and `.`
/// segments dropped, `..` resolved; and that, ASCII lowercased (servers that fold case). A
/// plain path without capitals has none: it is its own normal form, and the caller, which
/// knows from [`walk`], does not ask.
pub fn lenient_forms(path: &str) -> impl Iterator<Item = String> {
    let normal = normalise(path);
    let folded = normal.to_ascii_lowercase();
    let folded = (folded != path && folded != normal).then_some(folded);
    let normal = (normal != path).then_some(normal);
    normal.into_iter().chain(folded)
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

    /// The prefixes a walk reports.
    fn prefixes(path: &str) -> Vec<String> {
        let mut out = Vec::new();
        walk(path.as_bytes(), |p, hash| {
            assert_eq!(hash, KeyHash::of(p));
            out.push(String::from_utf8(p.to_vec()).unwrap());
        });
        out
    }

    #[test]
    fn prefixes_are_proper_and_end_with_a_slash() {
        assert_eq!(prefixes("/a/b/c"), ["/a/", "/a/b/"]);
        assert_eq!(prefixes("/a/b/"), ["/a/"]);
        assert_eq!(prefixes("/a/"), Vec::<String>::new());
        assert_eq!(prefixes("/"), Vec::<String>::new());
        assert_eq!(prefixes("a/b/c"), ["a/", "a/b/"]);
        // The root among the first slashes counted, not reported.
        let deep = "/a".repeat(100);
        assert_eq!(prefixes(&deep).len(), MAX_PATH_SEGMENTS - 1);
        assert_eq!(
            walk(deep.as_bytes(), |_, _| ()).hash,
            KeyHash::of(deep.as_bytes())
        );
    }

    #[test]
    fn a_walk_finds_a_path_plain_as_bypass_paths_do() {
        for path in [
            "",
            "/",
            "//",
            "/a",
            "/a/",
            "/a//",
            "/a//b",
            "/.",
            "/./",
            "/..",
            "/a/..",
            "/a/../b",
            "/.a",
            "/a.",
            "/...",
            "/a;b",
            "/a%2e",
            "a",
            "a/",
            "/A/b",
            "/a-b_c~d.e/f",
            "\\a",
            "/a/b/c/",
            "/é",
            "/a b",
            "/a?b",
        ] {
            let walked = walk(path.as_bytes(), |_, _| ());
            assert_eq!(walked.plain, crate::bypass::is_plain(path), "{path:?}");
            assert_eq!(
                walked.upper,
                path.bytes().any(|b| b.is_ascii_uppercase()),
                "{path:?}"
            );
        }
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
        assert_eq!(forms("/A/b"), ["/a/b"]);
        assert_eq!(forms("/A//b"), ["/A/b", "/a/b"]);
        assert_eq!(forms("/a"), Vec::<String>::new());
    }
}
