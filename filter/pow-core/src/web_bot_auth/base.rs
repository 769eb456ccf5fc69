//! The signature base (RFC 9421 section 2.5): one line per covered component, then the
//! `@signature-params` line, LF between them and none at the end. The derived components of
//! section 2.2 that a request has and that need no parameter are supported: `@method`,
//! `@target-uri`, `@authority`, `@scheme`, `@request-target`, `@path` and `@query`. Header
//! fields are supported whole (section 2.1) or as one dictionary member (`;key`, section
//! 2.1.2). Any other component parameter (`sf`, `bs`, `req`, `tr`, `name`) and any other
//! derived component of section 2.2 (`@query-param`, `@status`) is refused as unsupported, and
//! one it does not define as unknown, never guessed at.

use std::borrow::Cow;

use super::sf::{self, Bare, Item, Params};
use super::{MAX_FIELD_LEN, SignedRequest, Unsigned};

/// The longest signature base built: more than a base of a few covered components, each up to
/// [`MAX_FIELD_LEN`], ever needs.
pub const MAX_BASE_LEN: usize = 8 * 1024;
/// The most lines of one header field combined (RFC 9110 section 5.3).
const MAX_FIELD_LINES: usize = 8;

/// The value of a header field, its lines trimmed and joined by `", "` (RFC 9421 section 2.1),
/// or `None` when the request has no such field. More than [`MAX_FIELD_LEN`] bytes in all, or
/// more than a few lines, is malformed: nothing this module reads is that long.
pub fn field_value<'r>(
    req: &SignedRequest<'r>,
    name: &str,
) -> Result<Option<Cow<'r, str>>, Unsigned> {
    let mut lines = req
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_ref().trim_matches([' ', '\t']));
    let Some(first) = lines.next() else {
        return Ok(None);
    };
    let mut value = Cow::Borrowed(first);
    for (count, line) in lines.enumerate() {
        if count.saturating_add(2) > MAX_FIELD_LINES || value.len() > MAX_FIELD_LEN {
            return Err(Unsigned::Malformed);
        }
        let joined = value.to_mut();
        joined.push_str(", ");
        joined.push_str(line);
    }
    if value.len() > MAX_FIELD_LEN {
        return Err(Unsigned::Malformed);
    }
    Ok(Some(value))
}

/// The signature base of `components` with `params` (an inner list of Signature-Input) for
/// `req`. A component the request lacks, one repeated, or `@signature-params` among them, is
/// malformed (RFC 9421 section 2.5 steps 2.1 and 2.3 say fail).
pub fn signature_base(
    req: &SignedRequest<'_>,
    components: &[Item<'_>],
    params: &Params<'_>,
) -> Result<String, Unsigned> {
    let mut base = String::with_capacity(512);
    for (i, component) in components.iter().enumerate() {
        if components
            .iter()
            .take(i)
            .any(|earlier| earlier == component)
        {
            return Err(Unsigned::Malformed);
        }
        let Bare::String(name) = &component.bare else {
            return Err(Unsigned::Malformed);
        };
        let value = component_value(req, name, &component.params)?;
        if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
            // A line break would add a line of the sender's choosing to the base.
            return Err(Unsigned::Malformed);
        }
        sf::write_item(&mut base, component);
        base.push_str(": ");
        base.push_str(&value);
        base.push('\n');
        if base.len() > MAX_BASE_LEN {
            return Err(Unsigned::Malformed);
        }
    }
    base.push_str("\"@signature-params\": ");
    sf::write_inner_list(&mut base, components, params);
    if base.len() > MAX_BASE_LEN {
        return Err(Unsigned::Malformed);
    }
    Ok(base)
}

/// One component's value (RFC 9421 sections 2.1 and 2.2).
fn component_value<'r>(
    req: &SignedRequest<'r>,
    name: &str,
    params: &Params<'_>,
) -> Result<Cow<'r, str>, Unsigned> {
    if let Some(derived) = name.strip_prefix('@') {
        if !params.is_empty() {
            return Err(Unsigned::Unsupported);
        }
        return derived_value(req, derived);
    }
    if !is_field_name(name) {
        return Err(Unsigned::Malformed);
    }
    let key = match params.as_slice() {
        [] => None,
        [("key", Bare::String(key))] => Some(key),
        _ => return Err(Unsigned::Unsupported),
    };
    let value = field_value(req, name)?.ok_or(Unsigned::Malformed)?;
    let Some(key) = key else {
        return Ok(value);
    };
    // Section 2.1.2: the member's value, serialized; a field that is not a dictionary, or
    // lacks the member, fails.
    let dict = sf::parse_dictionary(&value).map_err(|_| Unsigned::Malformed)?;
    let member = sf::member(&dict, key).ok_or(Unsigned::Malformed)?;
    let mut text = String::new();
    sf::write_member(&mut text, member);
    Ok(Cow::Owned(text))
}

/// Section 2.1: the component name of a field is its name (a token), lowercased.
pub fn is_field_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| sf::is_tchar(b) && !b.is_ascii_uppercase())
}

fn derived_value<'r>(req: &SignedRequest<'r>, derived: &str) -> Result<Cow<'r, str>, Unsigned> {
    let (path, query) = match req.path.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (req.path, None),
    };
    let value = match derived {
        // Section 2.2.1: as sent, case preserved.
        "method" => Cow::Borrowed(req.method),
        // Section 2.2.2: the target URI (RFC 9110 section 7.1), rebuilt from its parts.
        "target-uri" => Cow::Owned(format!(
            "{}://{}{}",
            req.scheme.to_ascii_lowercase(),
            authority(req),
            req.path
        )),
        "authority" => authority(req),
        // Section 2.2.4: lowercase.
        "scheme" => Cow::Owned(req.scheme.to_ascii_lowercase()),
        // Section 2.2.5: the request target as sent (`:path` in HTTP/2 and 3).
        "request-target" => Cow::Borrowed(req.path),
        // Section 2.2.6: an empty path is `/`.
        "path" => Cow::Borrowed(if path.is_empty() { "/" } else { path }),
        // Section 2.2.7: `?` and the query, or `?` alone when there is none.
        "query" => Cow::Owned(format!("?{}", query.unwrap_or(""))),
        // `@signature-params` is not a component one can cover (section 2.3).
        "signature-params" => return Err(Unsigned::Malformed),
        // `@query-param` needs `;name`, `@status` is a response's: defined, not supported.
        "query-param" | "status" => return Err(Unsigned::Unsupported),
        // Anything else RFC 9421 does not define: refused, never guessed at.
        _ => return Err(Unsigned::UnknownComponent),
    };
    Ok(value)
}

/// Section 2.2.3: the authority, normalized as RFC 9110 section 4.2.3 says: lowercase, no
/// default port (443 for https, 80 for http), no empty port.
pub fn authority<'r>(req: &SignedRequest<'r>) -> Cow<'r, str> {
    let raw = req.authority;
    // The port's colon: after the closing bracket of an IPv6 literal, else the only one.
    let host_end = match raw.rfind(']') {
        Some(bracket) => raw
            .get(bracket..)
            .and_then(|rest| rest.find(':'))
            .map(|i| bracket.saturating_add(i)),
        None => raw.rfind(':'),
    };
    let host = match host_end.and_then(|colon| Some((raw.get(..colon)?, raw.get(colon..)?))) {
        Some((host, port)) => {
            let default = match req.scheme.to_ascii_lowercase().as_str() {
                "https" => ":443",
                "http" => ":80",
                _ => "",
            };
            if port == ":" || port == default {
                host
            } else {
                raw
            }
        }
        None => raw,
    };
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn req<'a>(
        scheme: &'a str,
        authority: &'a str,
        path: &'a str,
        headers: &'a [(Cow<'a, str>, Cow<'a, str>)],
    ) -> SignedRequest<'a> {
        SignedRequest {
            method: "POST",
            scheme,
            authority,
            path,
            headers,
        }
    }

    #[test]
    fn authority_is_normalized() {
        for (scheme, raw, normal) in [
            ("https", "Example.COM", "example.com"),
            ("https", "example.com:443", "example.com"),
            ("HTTPS", "example.com:443", "example.com"),
            ("http", "example.com:80", "example.com"),
            ("http", "example.com:443", "example.com:443"),
            ("https", "example.com:8443", "example.com:8443"),
            ("https", "example.com:", "example.com"),
            ("https", "[2001:DB8::1]:443", "[2001:db8::1]"),
            ("https", "[2001:db8::1]", "[2001:db8::1]"),
            ("https", "[2001:db8::1]:8443", "[2001:db8::1]:8443"),
            ("https", "", ""),
        ] {
            assert_eq!(authority(&req(scheme, raw, "/", &[])), normal, "{raw}");
        }
    }

    #[test]
    fn derived_components_of_rfc_9421_section_2_2() {
        let r = req("https", "www.example.com", "/path?param=value&foo=bar", &[]);
        for (name, value) in [
            ("method", "POST"),
            (
                "target-uri",
                "https://www.example.com/path?param=value&foo=bar",
            ),
            ("authority", "www.example.com"),
            ("scheme", "https"),
            ("request-target", "/path?param=value&foo=bar"),
            ("path", "/path"),
            ("query", "?param=value&foo=bar"),
        ] {
            assert_eq!(derived_value(&r, name).unwrap(), value, "{name}");
        }
        let r = req("https", "www.example.com", "", &[]);
        assert_eq!(derived_value(&r, "path").unwrap(), "/");
        assert_eq!(derived_value(&r, "query").unwrap(), "?");
        assert_eq!(derived_value(&r, "status"), Err(Unsigned::Unsupported));
        assert_eq!(derived_value(&r, "query-param"), Err(Unsigned::Unsupported));
        for unknown in ["status-code", "authority-x", "", "Method"] {
            assert_eq!(
                derived_value(&r, unknown),
                Err(Unsigned::UnknownComponent),
                "{unknown}"
            );
        }
        assert_eq!(
            derived_value(&r, "signature-params"),
            Err(Unsigned::Malformed)
        );
    }

    #[test]
    fn field_lines_are_trimmed_and_joined() {
        let headers = [
            ("X-A".into(), " one ".into()),
            ("other".into(), "x".into()),
            ("x-a".into(), "\ttwo".into()),
        ];
        let r = req("https", "h", "/", &headers);
        assert_eq!(field_value(&r, "x-a").unwrap().unwrap(), "one, two");
        assert_eq!(field_value(&r, "x-b").unwrap(), None);
        let long = "a".repeat(MAX_FIELD_LEN + 1);
        let headers = [("x-a".into(), long.as_str().into())];
        assert_eq!(
            field_value(&req("https", "h", "/", &headers), "x-a"),
            Err(Unsigned::Malformed)
        );
        let many: Vec<(Cow<'_, str>, Cow<'_, str>)> = (0..=MAX_FIELD_LINES)
            .map(|_| ("x-a".into(), "v".into()))
            .collect();
        assert_eq!(
            field_value(&req("https", "h", "/", &many), "x-a"),
            Err(Unsigned::Malformed)
        );
    }

    #[test]
    fn component_parameters_other_than_key_are_refused() {
        let headers = [("d".into(), "a=1, b=(2 3);x".into())];
        let r = req("https", "h", "/", &headers);
        let input = |s: &str| {
            let dict = sf::parse_dictionary(s).unwrap();
            match dict.into_iter().next().unwrap().1 {
                sf::Member::InnerList(items, params) => signature_base(&r, &items, &params),
                sf::Member::Item(_) => unreachable!(),
            }
        };
        assert_eq!(
            input(r#"s=("d";key="b");created=1"#).unwrap(),
            "\"d\";key=\"b\": (2 3);x\n\"@signature-params\": (\"d\";key=\"b\");created=1"
        );
        assert_eq!(input(r#"s=("d";key="c")"#), Err(Unsigned::Malformed));
        assert_eq!(input(r#"s=("d";sf)"#), Err(Unsigned::Unsupported));
        assert_eq!(input(r#"s=("d";key="a";bs)"#), Err(Unsigned::Unsupported));
        assert_eq!(input(r#"s=("@authority";req)"#), Err(Unsigned::Unsupported));
        assert_eq!(input(r#"s=("D")"#), Err(Unsigned::Malformed));
        assert_eq!(input(r#"s=("missing")"#), Err(Unsigned::Malformed));
        assert_eq!(input(r#"s=("d" "d")"#), Err(Unsigned::Malformed));
        assert_eq!(input(r#"s=(d)"#), Err(Unsigned::Malformed));
        assert_eq!(
            input(r#"s=("@signature-params")"#),
            Err(Unsigned::Malformed)
        );
    }

    #[test]
    fn a_line_break_in_a_value_is_refused() {
        let headers = [("d".into(), "a\nb".into())];
        let r = req("https", "h", "/", &headers);
        let dict = sf::parse_dictionary(r#"s=("d")"#).unwrap();
        let Some(sf::Member::InnerList(items, params)) = sf::member(&dict, "s") else {
            unreachable!()
        };
        assert_eq!(signature_base(&r, items, params), Err(Unsigned::Malformed));
    }
}
