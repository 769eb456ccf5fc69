//! Web Bot Auth on the real module, with signatures made here with RFC 9421's Ed25519 test key
//! that cover header fields besides `Signature-Agent`: the glue passes the fields a signature
//! names, and their values enter the base as RFC 9421 section 2.1 serialises them (each line
//! trimmed, the lines joined by `, `). A derived component the RFC does not define is refused
//! and counted as such. `Cookie` is never passed, covered or not.

#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey};

use crate::common::*;

const FROM: &str = "198.51.100.20:40000";
/// Within the signatures' window: created 1735689600, expires 1735689900.
const NOW_SECS: u64 = 1_735_689_700;

/// The RFC 9421 test key and its public JWK, from the shared fixtures; `None` (skipped) without
/// them.
fn test_key(test: &str) -> Option<(SigningKey, serde_json::Value)> {
    let shared = testkit::workspace::shared_dir(test)?;
    Some(rfc9421_test_key(&shared.join("fixtures/bots")))
}

/// The key's RFC 7638 thumbprint, as the architecture draft's vectors give it for this key.
const KEYID: &str = "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";

/// A request to `example.com` with `fields`, signed over `components` (their base lines
/// written here by hand, as RFC 9421 section 2.5 lays them out).
fn signed(
    key: &SigningKey,
    components: &str,
    base_lines: &str,
    fields: &[(&str, &str)],
) -> Request {
    let params = format!(
        "({components});created=1735689600;expires=1735689900;keyid=\"{KEYID}\";tag=\"web-bot-auth\""
    );
    let base = format!("{base_lines}\"@signature-params\": {params}");
    let signature =
        base64::engine::general_purpose::STANDARD.encode(key.sign(base.as_bytes()).to_bytes());
    let mut request = Request {
        authority: "example.com".to_owned(),
        ..browser("/", FROM)
    };
    for (name, value) in fields {
        request = request.header(name, value);
    }
    request
        .header("signature-input", &format!("sig1={params}"))
        .header("signature", &format!("sig1=:{signature}:"))
}

fn decision_at_origin(o: &Outcome) -> Option<String> {
    let Outcome::Continue { headers } = o else {
        return None;
    };
    header(headers, "pow-decision").map(str::to_owned)
}

/// Asserts that `request` is challenged (the 8 bits of the test's config), its signature not
/// taken, and that this makes `count` signatures not taken for `reason`.
#[track_caller]
fn assert_unsigned(host: &mut Host, request: Request, reason: &str, count: i64) {
    let o = host.request(request).unwrap();
    assert_eq!(challenge_of(&o).d, 8);
    assert_eq!(
        metric(host, &format!("reason=.={reason};.;pow_signature_unsigned")),
        count
    );
}

#[test]
fn a_signature_covering_other_header_fields_verifies() {
    let test = "a_signature_covering_other_header_fields_verifies";
    let Some((key, jwk)) = test_key(test) else {
        return;
    };
    let config = serde_json::json!({
        "mode": "all", "difficulty": 8,
        "agents": {"testbot": {"keys": {"keys": [jwk]}}},
        "rules": [{"name": "signed", "signed_agent": ["testbot"], "action": "allow"}],
    });
    let Some(mut host) = start_at(test, config.to_string().into_bytes(), NOW_SECS) else {
        return;
    };
    let components = r#""@authority" "content-type" "date" "x-tags""#;
    let lines = "\"@authority\": example.com\n\"content-type\": application/json\n\
                 \"date\": Wed, 01 Jan 2025 00:00:00 GMT\n\"x-tags\": a, b\n";
    let fields = [
        ("content-type", "application/json"),
        ("date", "Wed, 01 Jan 2025 00:00:00 GMT"),
        // Two lines of one field, with spaces around: one value, `a, b`.
        ("x-tags", " a "),
        ("x-tags", "b"),
    ];
    let o = host
        .request(signed(&key, components, lines, &fields))
        .unwrap();
    assert_eq!(
        decision_at_origin(&o).as_deref(),
        Some("rule=signed; action=allowed"),
        "{o:?}"
    );
    assert_eq!(metric(&host, "pow_signature_verified"), 1);
    // Another value for a covered field: the base differs, the signature does not verify.
    let mut changed = fields;
    changed[0].1 = "text/html";
    assert_unsigned(
        &mut host,
        signed(&key, components, lines, &changed),
        "bad_signature",
        1,
    );
    // A covered field the request lacks: malformed.
    let without_date = [fields[0], fields[2], fields[3]];
    assert_unsigned(
        &mut host,
        signed(&key, components, lines, &without_date),
        "malformed",
        1,
    );
    // A signature over `Cookie`: the glue never passes it, so the component is missing and the
    // clearance cookie never enters a signature base, even signed correctly.
    let cookie_lines = "\"@authority\": example.com\n\"cookie\": a=b\n";
    let over_cookie = signed(
        &key,
        r#""@authority" "cookie""#,
        cookie_lines,
        &[("cookie", "a=b")],
    );
    assert_unsigned(&mut host, over_cookie, "malformed", 2);
    // A derived component RFC 9421 does not define: refused, and said so.
    let unknown = "\"@authority\": example.com\n\"@nonsense\": x\n";
    assert_unsigned(
        &mut host,
        signed(&key, r#""@authority" "@nonsense""#, unknown, &[]),
        "unknown_component",
        1,
    );
}
