//! The challenge page (HTML for browsers, a short text for other clients) and its headers.
//!
//! The page is self-contained: inline CSS and one inline script, both allowed by their SHA-256
//! in the Content-Security-Policy, no external request; the workers are made from a `blob:`
//! URL (`worker-src blob:`). The solver is a synchronous pure-JS SHA-256: words 0-8 of the
//! single 64-byte block are fixed per worker, so the state after round 8 is computed once and
//! each attempt runs rounds 9-63 fully unrolled on Int32 locals (the unrolled code is generated
//! here, see [`rounds_js`]). French or English by Accept-Language; semantic HTML, a polite live
//! region, a `<noscript>` explanation, light and dark.

use std::sync::OnceLock;

use crate::crypto::sha256;

const TEMPLATE: &str = include_str!("page/page.html");
const STYLE: &str = include_str!("page/page.css");
const SOLVER: &str = include_str!("page/solver.js");

/// The page's language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    En,
    Fr,
}

impl Lang {
    pub fn tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Fr => "fr",
        }
    }
}

/// The bytes of Accept and Accept-Language read: browsers send a few dozen.
pub const MAX_NEGOTIATED: usize = 1024;
/// The items of Accept and Accept-Language read.
pub const MAX_ITEMS: usize = 16;

/// The first [`MAX_ITEMS`] items of the first [`MAX_NEGOTIATED`] bytes of a header: what
/// negotiation reads, so that a header of 60 KiB costs no more than one of 60 bytes.
fn first_items(header: Option<&str>) -> impl Iterator<Item = &str> {
    let header = header.unwrap_or("");
    let mut end = header.len().min(MAX_NEGOTIATED);
    while !header.is_char_boundary(end) {
        end -= 1;
    }
    header[..end].split(',').take(MAX_ITEMS)
}

/// Picks French or English from an Accept-Language header (highest q wins, the first listed on
/// a tie, English by default).
pub fn negotiate(accept_language: Option<&str>) -> Lang {
    let mut best: Option<(Lang, u32)> = None;
    for item in first_items(accept_language) {
        let mut parts = item.split(';');
        let tag = parts.next().unwrap_or("").trim();
        let primary = tag.split('-').next().unwrap_or("");
        let lang = if primary.eq_ignore_ascii_case("fr") {
            Lang::Fr
        } else if primary.eq_ignore_ascii_case("en") {
            Lang::En
        } else {
            continue;
        };
        let q = parts
            .find_map(|p| p.trim().strip_prefix("q="))
            .map_or(1000, parse_q);
        if q > 0 && best.is_none_or(|(_, bq)| q > bq) {
            best = Some((lang, q));
        }
    }
    best.map_or(Lang::En, |(l, _)| l)
}

/// q-value in thousandths; malformed counts as 0.
fn parse_q(s: &str) -> u32 {
    let s = s.trim();
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return 0;
    }
    let frac_val = format!("{frac:0<3}").parse::<u32>().unwrap_or(0);
    match int {
        "1" => 1000,
        "0" => frac_val,
        _ => 0,
    }
}

/// Whether the client takes HTML (a browser) rather than a short text.
pub fn wants_html(accept: Option<&str>) -> bool {
    first_items(accept).any(|item| {
        let mut parts = item.split(';');
        let media = parts.next().unwrap_or("").trim();
        let q = parts
            .find_map(|p| p.trim().strip_prefix("q="))
            .map_or(1000, parse_q);
        q > 0
            && (media.eq_ignore_ascii_case("text/html")
                || media.eq_ignore_ascii_case("application/xhtml+xml"))
    })
}

struct Strings {
    title: &'static str,
    heading: &'static str,
    explain: &'static str,
    progress: &'static str,
    starting: &'static str,
    noscript: &'static str,
    why: &'static str,
    working0: &'static str,
    working: &'static str,
    detail: &'static str,
    done: &'static str,
    plain: &'static str,
    failed_title: &'static str,
    failed: &'static str,
    retry: &'static str,
    refresh_heading: &'static str,
    refresh_explain: &'static str,
    refresh_plain: &'static str,
}

const EN: Strings = Strings {
    title: "Checking your browser…",
    heading: "One moment: your browser is doing a small proof of work",
    explain: "This site asks some visitors to solve a small computation before letting them in. \
              It keeps abusive automated traffic away, needs no personal data and takes a few \
              seconds. You will then be taken to the page you asked for.",
    progress: "Proof-of-work progress",
    starting: "Starting…",
    noscript: "This check needs JavaScript, which is turned off in your browser. Turn it on for \
               this site and reload the page, or come back with another browser.",
    why: "Why? Your network address or this site's settings call for a check. Once it is done, a \
          cookie spares you the check for a while.",
    working0: "Working…",
    working: "Working: about {eta} s left.",
    detail: "{n} attempts, {rate} per second on {w} threads; about {eta} s expected in all.",
    done: "Done. Taking you to the page…",
    plain: "Proof of work required: this site asks for a small computation that a web browser \
            with JavaScript does by itself. Open this address in a browser.\n",
    failed_title: "The check did not succeed",
    failed: "The proof of work could not be verified (it may have expired). A new check starts \
             in a few seconds.",
    retry: "Start again now",
    refresh_heading: "One moment: this site checks visitors",
    refresh_explain: "You will be taken to the page you asked for in {delay} seconds. This short \
                      wait keeps abusive automated traffic away; it needs no JavaScript and no \
                      personal data.",
    refresh_plain: "This site asks clients to wait: after {delay} seconds, GET {url} (a cookie \
                    then spares you the wait for a while).\n",
};

const FR: Strings = Strings {
    title: "Vérification de votre navigateur…",
    heading: "Un instant : votre navigateur fait une petite preuve de travail",
    explain: "Ce site demande à certains visiteurs de résoudre un petit calcul avant de les \
              laisser entrer. Cela tient à l'écart le trafic automatisé abusif, ne demande aucune \
              donnée personnelle et prend quelques secondes. Vous serez ensuite conduit à la page \
              demandée.",
    progress: "Progression de la preuve de travail",
    starting: "Démarrage…",
    noscript: "Cette vérification a besoin de JavaScript, désactivé dans votre navigateur. \
               Activez-le pour ce site et rechargez la page, ou revenez avec un autre navigateur.",
    why: "Pourquoi ? Votre adresse réseau ou les réglages de ce site demandent une vérification. \
          Une fois faite, un cookie vous en dispense pendant un temps.",
    working0: "Calcul en cours…",
    working: "Calcul en cours : encore environ {eta} s.",
    detail: "{n} essais, {rate} par seconde sur {w} fils ; environ {eta} s attendues au total.",
    done: "Terminé. Redirection vers la page…",
    plain: "Preuve de travail exigée : ce site demande un petit calcul qu'un navigateur web avec \
            JavaScript fait tout seul. Ouvrez cette adresse dans un navigateur.\n",
    failed_title: "La vérification a échoué",
    failed: "La preuve de travail n'a pas pu être vérifiée (elle a peut-être expiré). Une \
             nouvelle vérification démarre dans quelques secondes.",
    retry: "Recommencer maintenant",
    refresh_heading: "Un instant : ce site vérifie ses visiteurs",
    refresh_explain: "Vous serez conduit à la page demandée dans {delay} secondes. Cette courte \
                      attente tient à l'écart le trafic automatisé abusif ; elle ne demande ni \
                      JavaScript ni donnée personnelle.",
    refresh_plain: "Ce site demande aux clients d'attendre : après {delay} secondes, faites GET \
                    {url} (un cookie vous dispense ensuite de l'attente pendant un temps).\n",
};

fn strings(lang: Lang) -> &'static Strings {
    match lang {
        Lang::En => &EN,
        Lang::Fr => &FR,
    }
}

/// What the page needs to solve and come back.
#[derive(Debug, Clone)]
pub struct PageData<'a> {
    pub challenge_hex: &'a str,
    pub salt_hex: &'a str,
    pub issued: u64,
    pub expiry: u64,
    pub difficulty: u8,
    pub return_to: &'a str,
    pub verify_path: &'a str,
}

/// The script and its CSP hashes, built once.
struct Assets {
    script: String,
    csp: String,
}

fn assets() -> &'static Assets {
    static ASSETS: OnceLock<Assets> = OnceLock::new();
    ASSETS.get_or_init(|| {
        let (rounds, last) = rounds_js();
        let script = SOLVER
            .replace(
                "/*K: SHA-256's round constants, from page.rs*/",
                &constants_js(),
            )
            .replace("/*ROUNDS*/", &rounds)
            .replace("/*FINAL*/a", last);
        let csp = format!(
            "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; \
             worker-src blob:; child-src blob:; img-src data:; connect-src 'none'; \
             base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            base64(&sha256(script.as_bytes())),
            base64(&sha256(STYLE.as_bytes())),
        );
        Assets { script, csp }
    })
}

/// The Content-Security-Policy of the challenge page.
pub fn csp() -> &'static str {
    &assets().csp
}

/// The CSP of the small pages without script (verify failures).
pub const CSP_NO_SCRIPT: &str =
    "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The challenge page.
pub fn render_html(lang: Lang, data: &PageData<'_>) -> String {
    let s = strings(lang);
    let json = serde_json::json!({
        "c": data.challenge_hex,
        "s": data.salt_hex,
        "i": data.issued,
        "e": data.expiry,
        "d": data.difficulty,
        "r": data.return_to,
        "v": data.verify_path,
        "t": {
            "working0": s.working0,
            "working": s.working,
            "detail": s.detail,
            "done": s.done,
        },
    });
    let json = script_safe(&json.to_string());
    fill(
        TEMPLATE,
        &[
            ("lang", lang.tag()),
            ("title", s.title),
            ("style", STYLE),
            ("heading", s.heading),
            ("explain", s.explain),
            ("progress", s.progress),
            ("starting", s.starting),
            ("noscript", s.noscript),
            ("why", s.why),
            ("data", &json),
            ("script", &assets().script),
        ],
    )
}

/// The short text for clients that do not take HTML.
pub fn render_plain(lang: Lang) -> &'static str {
    strings(lang).plain
}

/// The page after a failed verification: says so, and goes to `/` after a few seconds, where a
/// new challenge starts if one is needed. Never to the return path of the request: that came
/// from the URL, which anybody can write, and the page's refresh is a same-site navigation
/// that would carry `SameSite=Strict` cookies a cross-site link did not.
pub fn render_failure(lang: Lang) -> String {
    let s = strings(lang);
    let href = "/";
    format!(
        "<!doctype html>\n<html lang=\"{lang}\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta name=\"color-scheme\" content=\"light dark\">\
         <meta http-equiv=\"refresh\" content=\"3;url={href}\"><title>{title}</title></head>\
         <body><main><h1>{title}</h1><p role=\"status\">{failed}</p>\
         <p><a href=\"{href}\">{retry}</a></p></main></body></html>\n",
        lang = lang.tag(),
        title = s.failed_title,
        failed = s.failed,
        retry = s.retry,
    )
}

/// The challenge without script: the page goes on to `verify_url` (a same-origin path and
/// query) after `delay` seconds by itself, which any browser does with JavaScript turned off.
pub fn render_refresh(lang: Lang, delay: u64, verify_url: &str) -> String {
    let s = strings(lang);
    let delay_text = delay.to_string();
    let explain = fill(s.refresh_explain, &[("delay", &delay_text)]);
    format!(
        "<!doctype html>\n<html lang=\"{lang}\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
         <meta name=\"color-scheme\" content=\"light dark\">\
         <meta name=\"robots\" content=\"noindex,nofollow\">\
         <meta http-equiv=\"refresh\" content=\"{delay};url={url}\"><title>{title}</title></head>\
         <body><main><h1>{heading}</h1><p role=\"status\">{explain}</p></main></body></html>\n",
        lang = lang.tag(),
        url = html_attribute(verify_url),
        title = s.title,
        heading = s.refresh_heading,
    )
}

/// [`render_refresh`] for clients that do not take HTML: what they may do.
pub fn render_refresh_plain(lang: Lang, delay: u64, verify_url: &str) -> String {
    fill(
        strings(lang).refresh_plain,
        &[("delay", &delay.to_string()), ("url", verify_url)],
    )
}

/// Text safe inside a double-quoted HTML attribute.
fn html_attribute(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// Replaces `{name}` in the template (never in the values).
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out =
        String::with_capacity(template.len() + values.iter().map(|(_, v)| v.len()).sum::<usize>());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}').map(|close| (&after[..close], close)) {
            Some((name, close)) if let Some((_, v)) = values.iter().find(|(n, _)| *n == name) => {
                out.push_str(v);
                rest = &after[close + 1..];
            }
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// JSON that cannot close its `<script>` element (one pass).
fn script_safe(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + 16);
    let mut rest = json;
    while let Some(at) = rest.bytes().position(|b| matches!(b, b'<' | b'>' | b'&')) {
        out.push_str(&rest[..at]);
        out.push_str(match rest.as_bytes()[at] {
            b'<' => "\\u003c",
            b'>' => "\\u003e",
            _ => "\\u0026",
        });
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
    out
}

/// Standard base64 with padding (for CSP hashes).
pub fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(A[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// SHA-256's round constants (FIPS 180-4, section 4.2.2): the solver's table ([`constants_js`])
/// and the constants folded into its unrolled rounds ([`rounds_js`]).
const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// [`K`] as the solver's `K` array holds it: eight per line, the lines indented by four.
fn constants_js() -> String {
    K.chunks(8)
        .map(|line| {
            let words: Vec<String> = line.iter().map(|k| format!("{k:#010x}")).collect();
            format!("    {}", words.join(", "))
        })
        .collect::<Vec<_>>()
        .join(",\n")
}

/// Rounds 9-63 of SHA-256 on one block whose words are `c0`-`c7` (challenge), `c8` (nonce
/// high word), `lo` (nonce low word), then the fixed padding of a 40-byte message; the schedule
/// words are locals `wN`, constants folded. Returns the code and the name of the variable that
/// holds the working variable `a` after round 63.
pub fn rounds_js() -> (String, &'static str) {
    const NAMES: [&str; 8] = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let word = |i: usize| -> String {
        match i {
            0..=8 => format!("c{i}"),
            9 => "lo".to_owned(),
            10 => "-2147483648".to_owned(),
            11..=14 => "0".to_owned(),
            15 => "320".to_owned(),
            _ => format!("w{i}"),
        }
    };
    let mut js = String::with_capacity(16 * 1024);
    for (i, &k) in K.iter().enumerate().skip(9) {
        let j = i - 9;
        let v = |k: usize| NAMES[(k + 8 - j % 8) % 8];
        let (a, b, c, d, e, f, g, h) = (v(0), v(1), v(2), v(3), v(4), v(5), v(6), v(7));
        if i >= 16 {
            let mut terms: Vec<String> = Vec::new();
            let (x, y) = (word(i - 2), word(i - 15));
            if x != "0" {
                terms.push(format!("({x}>>>17|{x}<<15)^({x}>>>19|{x}<<13)^{x}>>>10"));
            }
            if word(i - 7) != "0" {
                terms.push(word(i - 7));
            }
            if y != "0" {
                terms.push(format!("(({y}>>>7|{y}<<25)^({y}>>>18|{y}<<14)^{y}>>>3)"));
            }
            if word(i - 16) != "0" {
                terms.push(word(i - 16));
            }
            // The σ1 term is first and has the lowest precedence (^): wrap it.
            if let Some(first) = terms.first_mut()
                && x != "0"
            {
                *first = format!("({first})");
            }
            js.push_str(&format!("var w{i}=({})|0;\n", terms.join("+")));
        }
        let k = k as i32;
        let w = word(i);
        let kw = if w == "0" {
            format!("{k}")
        } else {
            format!("{k}+{w}")
        };
        js.push_str(&format!(
            "t=({h}+(({e}>>>6|{e}<<26)^({e}>>>11|{e}<<21)^({e}>>>25|{e}<<7))+({g}^({e}&({f}^{g})))+{kw})|0;\
             {d}=({d}+t)|0;\
             {h}=(t+((({a}>>>2|{a}<<30)^({a}>>>13|{a}<<19)^({a}>>>22|{a}<<10))+(({a}&{b})|({c}&({a}|{b})))))|0;\n"
        ));
    }
    // After round 63 (j = 54), `a` is what that round wrote as its `h`: NAMES[(15 - 54 % 8) % 8].
    (js, NAMES[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> PageData<'static> {
        PageData {
            challenge_hex: "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
            salt_hex: "0000000000000001",
            issued: 1_795_972_320,
            expiry: 1_795_972_620,
            difficulty: 12,
            return_to: "/a?b=</script><script>alert(1)</script>&c",
            verify_path: "/.pow/verify",
        }
    }

    #[test]
    fn languages() {
        assert_eq!(negotiate(None), Lang::En);
        assert_eq!(negotiate(Some("fr-FR,fr;q=0.9,en;q=0.8")), Lang::Fr);
        assert_eq!(negotiate(Some("en-GB,fr;q=0.5")), Lang::En);
        assert_eq!(negotiate(Some("de-DE, fr;q=0.7, en;q=0.3")), Lang::Fr);
        assert_eq!(negotiate(Some("de, en;q=0.1, fr;q=0.2")), Lang::Fr);
        assert_eq!(negotiate(Some("fr;q=0, en")), Lang::En);
        assert_eq!(negotiate(Some("de")), Lang::En);
        assert_eq!(negotiate(Some("FR-ca")), Lang::Fr);
    }

    #[test]
    fn html_or_plain() {
        assert!(wants_html(Some(
            "text/html,application/xhtml+xml,*/*;q=0.8"
        )));
        assert!(wants_html(Some("application/xhtml+xml")));
        assert!(!wants_html(Some("*/*")));
        assert!(!wants_html(Some("application/json")));
        assert!(!wants_html(Some("text/html;q=0")));
        assert!(!wants_html(None));
    }

    #[test]
    fn page_is_small_self_contained_and_safe() {
        for lang in [Lang::En, Lang::Fr] {
            let html = render_html(lang, &data());
            assert!(html.len() < 32 * 1024, "{} bytes", html.len());
            assert!(html.contains(&format!("<html lang=\"{}\">", lang.tag())));
            // No external request: no URL with a scheme or a network path in the markup.
            for needle in ["http://", "https://", "src=", "//cdn", "@import", "url("] {
                assert!(!html.contains(needle), "{needle}");
            }
            // The only link: an empty inline icon, so that browsers do not fetch /favicon.ico.
            assert_eq!(html.matches("href=").count(), 1);
            assert!(html.contains(r#"<link rel="icon" href="data:,">"#));
            // The return path cannot close the data block.
            assert!(!html.contains("</script><script>alert"));
            assert_eq!(html.matches("</script>").count(), 2);
            assert!(html.contains("<noscript>"));
            assert!(html.contains("aria-live=\"polite\""));
            assert!(html.contains("<progress"));
            assert!(!html.contains("/*ROUNDS*/") && !html.contains("/*FINAL*/"));
        }
        assert!(render_html(Lang::Fr, &data()).contains("preuve de travail"));
    }

    /// The text of the page's first inline `<tag>` element.
    fn inline<'a>(html: &'a str, tag: &str) -> &'a str {
        let open = format!("<{tag}>");
        let start = html.find(&open).unwrap() + open.len();
        let end = html[start..].find(&format!("</{tag}>")).unwrap();
        &html[start..start + end]
    }

    #[test]
    fn csp_hashes_match_the_inline_code() {
        let html = render_html(Lang::En, &data());
        let script = inline(&html, "script");
        let style = inline(&html, "style");
        let csp = csp();
        assert!(csp.contains(&format!("'sha256-{}'", base64(&sha256(script.as_bytes())))));
        assert!(csp.contains(&format!("'sha256-{}'", base64(&sha256(style.as_bytes())))));
        assert!(csp.contains("worker-src blob:"));
        assert!(!csp.contains("unsafe"));
    }

    #[test]
    fn base64_vectors() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn the_failure_page_goes_to_the_root() {
        let page = render_failure(Lang::En);
        assert!(page.contains("content=\"3;url=/\""), "{page}");
        assert!(page.contains("<a href=\"/\">"), "{page}");
    }

    #[test]
    fn negotiation_reads_the_first_items_only() {
        let many = format!("{}fr", ",".repeat(10_000));
        assert_eq!(negotiate(Some(&many)), Lang::En);
        assert!(!wants_html(Some(&format!("{}text/html", "a,".repeat(20)))));
        assert!(wants_html(Some("TEXT/HTML;q=0.5")));
        assert_eq!(negotiate(Some("en;q=0.5, FR-ca")), Lang::Fr);
        // A cut in the middle of a character is moved back to its start.
        let cut = format!("{}é", "a".repeat(MAX_NEGOTIATED - 1));
        assert_eq!(negotiate(Some(&cut)), Lang::En);
    }

    #[test]
    fn fill_leaves_unknown_braces() {
        assert_eq!(fill("a{x}b{y}{", &[("x", "{y}")]), "a{y}b{y}{");
    }

    /// The page's solver, run by Node.js when it is installed, finds what the Rust verifier
    /// accepts: the same block layout, the same bit order.
    #[test]
    fn the_page_solver_agrees_with_the_verifier() {
        let node = std::process::Command::new("node").arg("--version").output();
        if node.is_err() {
            testkit::skip_or_fail("the_page_solver_agrees_with_the_verifier", "node");
            return;
        }
        let html = render_html(Lang::En, &data());
        let script = inline(&html, "script");
        let lib = &script[..script.find("(function () {\n  var el").unwrap()];
        let challenge: [u8; 32] = core::array::from_fn(|i| (i * 7 + 3) as u8);
        let words: Vec<String> = challenge
            .chunks(4)
            .map(|w| (u32::from_be_bytes([w[0], w[1], w[2], w[3]]) as i32).to_string())
            .collect();
        let harness = format!(
            "{lib}\nvar make = powLib(null);\nvar out = [];\n\
             for (var d of [1, 8, 13, 16]) {{ var r = make([{w}], 3, 1, d)(1 << 22); out.push(r[0] + ':' + r[1]); }}\n\
             var r2 = make([{w}], 0xffffffff | 0, 5, 10)(1 << 20); out.push(r2[0] + ':' + r2[1]);\n\
             console.log(out.join(' '));\n",
            w = words.join(",")
        );
        let dir = std::env::temp_dir().join(format!("pow-solver-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("solver.js");
        std::fs::write(&file, harness).unwrap();
        let out = std::process::Command::new("node")
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let results: Vec<(u64, u64)> = text
            .split_whitespace()
            .map(|p| {
                let (h, l) = p.split_once(':').unwrap();
                (h.parse().unwrap(), l.parse().unwrap())
            })
            .collect();
        assert_eq!(results.len(), 5);
        for (&(hi, lo), d) in results.iter().zip([1u8, 8, 13, 16, 10]) {
            let nonce = hi << 32 | lo;
            assert!(
                crate::crypto::check_work(&challenge, nonce, d),
                "d={d} nonce={nonce:x}"
            );
            // And the first such nonce for that worker: no solution skipped.
            if hi == 3 {
                let first =
                    (0..=lo).find(|&l| crate::crypto::check_work(&challenge, 3 << 32 | l, d));
                assert_eq!(first, Some(lo), "d={d}");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
