//! Web Bot Auth verification against the RFC 9421 and Web Bot Auth draft test vectors
//! (`tests/data/bots/`, each with the outcome its EXPECTED file gives), then one change at a
//! time to a request signed here with the RFC's test key, each refused for its own reason.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // a failure here is a failed test

use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ed25519_dalek::{Signer as _, SigningKey};
use pow_core::web_bot_auth::{
    self, KeyDirectory, MAX_FIELD_LEN, SignedRequest, TrustedAgents, Unsigned, checked_base,
    decode_x, signature_base, thumbprint,
};
use pow_core::{PluginConfig, Request};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/bots");

fn fixture(path: &str) -> String {
    std::fs::read_to_string(format!("{DATA}/{path}")).unwrap()
}

/// The RFC 9421 test key's `x`, and its RFC 7638 thumbprint as computed independently with
/// Python's hashlib and base64 (one-off, not by the tests):
/// `base64.urlsafe_b64encode(hashlib.sha256(b'{"crv":"Ed25519","kty":"OKP","x":"JrQL...0bs"}')
/// .digest()).rstrip(b'=')`, which b26-expected-outcome.txt also gives.
const TEST_X: &str = "JrQLj5P_89iXES9-vFgrIy29clF9CC_oPPsw3c5D0bs";
const TEST_THUMBPRINT: &str = "poqkLGiymh_W0uP6PZFw-dvez3QJT5SolqXBCW38r0U";
/// The directory examples' `kid`: SHA-256 of the key's SubjectPublicKeyInfo, not its thumbprint.
const DRAFT_KID: &str = "NFcWBst6DXG-N35nHdzMrioWntdzNZghQSkjHNMMSjw";
/// 2026-01-01, a "now" for the vectors whose window is open (sig1 and the dictionary case).
const NOW_2026: u64 = 1_767_225_600;
/// Inside the legacy vector's window (created 1735689600, expires 1735693200).
const IN_LEGACY_WINDOW: u64 = 1_735_690_000;

fn test_signing_key() -> SigningKey {
    let jwk: serde_json::Value =
        serde_json::from_str(&fixture("rfc9421/test-key-ed25519.jwk.json")).unwrap();
    let d = URL_SAFE_NO_PAD.decode(jwk["d"].as_str().unwrap()).unwrap();
    SigningKey::from_bytes(&d.try_into().unwrap())
}

/// The fixture directory (dir-05's example: the RFC test key, with its SPKI-hash `kid`).
fn directory() -> KeyDirectory {
    KeyDirectory::from_json(fixture("web-bot-auth-drafts/dir05-key-directory.json").as_bytes())
        .unwrap()
}

fn agents(max_age_secs: u64) -> TrustedAgents {
    let dir = directory();
    TrustedAgents::new([("testbot", &dir)], max_age_secs).unwrap()
}

/// `Name: value` lines as lowercase (name, value) pairs.
fn headers(text: &str) -> Vec<(Cow<'static, str>, Cow<'static, str>)> {
    text.lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(n, v)| (n.to_ascii_lowercase().into(), v.to_owned().into()))
        .collect()
}

fn request<'a>(headers: &'a [(Cow<'a, str>, Cow<'a, str>)]) -> SignedRequest<'a> {
    SignedRequest {
        method: "GET",
        scheme: "https",
        authority: "example.com",
        path: "/",
        headers,
    }
}

fn vector(name: &str) -> Vec<(Cow<'static, str>, Cow<'static, str>)> {
    headers(&fixture(&format!("web-bot-auth-drafts/{name}.headers.txt")))
}

#[test]
fn the_thumbprint_of_the_test_key_is_the_independently_computed_one() {
    assert_eq!(thumbprint(&decode_x(TEST_X).unwrap()), TEST_THUMBPRINT);
    let (keys, skipped) = directory().ed25519_keys().unwrap();
    assert_eq!(skipped, 0);
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0].thumbprint, TEST_THUMBPRINT);
    assert_ne!(keys[0].thumbprint, DRAFT_KID);
    assert_eq!(
        keys[0].key.as_bytes(),
        test_signing_key().verifying_key().as_bytes()
    );
}

#[test]
fn key_directory_fixtures() {
    // dir-05's exchange: the response body is the directory (no blank line before it, as
    // printed), the same as dir05-key-directory.json.
    let exchange = fixture("web-bot-auth-drafts/dir05-key-directory-exchange.http");
    let body = &exchange[exchange.rfind("\n{").unwrap()..];
    assert_eq!(
        KeyDirectory::from_json(body.as_bytes()).unwrap(),
        directory()
    );
    // arch-05's example has `keys` as an object, not a JWK Set's array: refused.
    let arch = fixture("web-bot-auth-drafts/arch05-key-directory-example.json");
    assert!(KeyDirectory::from_json(arch.as_bytes()).is_err());
    // The data: URI Signature-Agent of dir-05 carries the same key inline (not followed by the
    // filter; parsed here to show it is the same directory).
    let data_uri = fixture("web-bot-auth-drafts/dir05-request-signature-agent-data-uri.http");
    let value = data_uri
        .lines()
        .find_map(|l| l.strip_prefix("Signature-Agent: my_test="))
        .unwrap();
    let text = format!("my_test={value}");
    let dict = web_bot_auth::sf::parse_dictionary(&text)
        .unwrap()
        .remove(0)
        .1;
    let web_bot_auth::sf::Member::Item(item) = dict else {
        panic!()
    };
    let web_bot_auth::sf::Bare::String(uri) = item.bare else {
        panic!()
    };
    let json = uri.split_once(',').unwrap().1;
    let (keys, _) = KeyDirectory::from_json(json.as_bytes())
        .unwrap()
        .ed25519_keys()
        .unwrap();
    assert_eq!(keys[0].thumbprint, TEST_THUMBPRINT);
}

#[test]
fn the_config_takes_agents_and_names_the_field_of_what_it_refuses() {
    let dir = fixture("web-bot-auth-drafts/dir05-key-directory.json");
    let config = PluginConfig::from_json(
        format!(r#"{{"agents": {{"testbot": {{"keys": {dir}}}}}}}"#).as_bytes(),
    )
    .unwrap();
    assert_eq!(config.signature_max_age_secs, 300);
    let agents = TrustedAgents::from_config(&config).unwrap();
    assert_eq!(agents.names(), ["testbot".to_owned()]);
    assert_eq!(agents.skipped_keys(), 0);
    let arch = fixture("web-bot-auth-drafts/arch05-key-directory-example.json");
    let rsa = r#"{"kty": "RSA", "n": "0vx7", "e": "AQAB"}"#;
    let ed = format!(r#"{{"kty": "OKP", "crv": "Ed25519", "x": "{TEST_X}"}}"#);
    let cases: Vec<(String, &str)> = vec![
        (format!(r#"{{"agents": {{"Bot": {{"keys": {dir}}}}}}}"#), "agents.Bot"),
        (format!(r#"{{"agents": {{"bot": {{"keys": {arch}}}}}}}"#), "agents.bot.keys.keys"),
        (format!(r#"{{"agents": {{"bot": {{"keys": {{"keys": [{rsa}]}}}}}}}}"#), "agents.bot.keys"),
        (
            r#"{"agents": {"bot": {"keys": {"keys": [{"kty": "OKP", "crv": "Ed25519", "x": "AA"}]}}}}"#
                .to_owned(),
            "agents.bot.keys.keys[0].x",
        ),
        (
            format!(r#"{{"agents": {{"a": {{"keys": {{"keys": [{ed}]}}}}, "b": {{"keys": {{"keys": [{ed}]}}}}}}}}"#),
            "agents.b.keys",
        ),
        (format!(r#"{{"agents": {{"bot": {{"keys": {dir}, "url": 1}}}}}}"#), "agents.bot.url"),
        (r#"{"signature_max_age_secs": 0}"#.to_owned(), "signature_max_age_secs"),
        (r#"{"signature_max_age_secs": 86401}"#.to_owned(), "signature_max_age_secs"),
    ];
    for (json, field) in cases {
        let e = PluginConfig::from_json(json.as_bytes()).unwrap_err();
        assert_eq!(e.field, field, "{json}: {e}");
    }
    // Other keys are skipped and counted.
    let json = format!(r#"{{"agents": {{"bot": {{"keys": {{"keys": [{rsa}, {ed}]}}}}}}}}"#);
    let config = PluginConfig::from_json(json.as_bytes()).unwrap();
    assert_eq!(
        TrustedAgents::from_config(&config).unwrap().skipped_keys(),
        1
    );
    // And the whole configuration survives a round trip, as the fuzz target checks.
    let again = PluginConfig::from_json(&serde_json::to_vec(&config).unwrap()).unwrap();
    assert_eq!(again, config);
}

#[test]
fn rfc_9421_b26_base_rebuilt_and_verified() {
    // test-request.http: POST /foo?param=Value&Pet=dog to example.com.
    let message = fixture("rfc9421/test-request.http");
    let (head, _body) = message.split_once("\n\n").unwrap();
    let mut fields = headers(head);
    let input = fixture("rfc9421/b26-signature-input.txt");
    let signature = fixture("rfc9421/b26-signature.txt");
    fields.push(("signature-input".into(), input.clone().into()));
    fields.push(("signature".into(), signature.clone().into()));
    let req = SignedRequest {
        method: "POST",
        scheme: "https",
        authority: "example.com",
        path: "/foo?param=Value&Pet=dog",
        headers: &fields,
    };
    let dict = web_bot_auth::sf::parse_dictionary(&input).unwrap();
    let Some(web_bot_auth::sf::Member::InnerList(items, params)) =
        web_bot_auth::sf::member(&dict, "sig-b26")
    else {
        panic!()
    };
    // Expected outcome 1: the base is rebuilt byte for byte.
    let base = signature_base(&req, items, params).unwrap();
    assert_eq!(base, fixture("rfc9421/b26-signature-base.txt"));
    // 2: the signature verifies; 3: signing is deterministic.
    let sig = signature
        .strip_prefix("sig-b26=:")
        .unwrap()
        .trim_end_matches(':');
    let sig: [u8; 64] = STANDARD.decode(sig).unwrap().try_into().unwrap();
    let key = decode_x(TEST_X).unwrap();
    key.verify_strict(base.as_bytes(), &ed25519_dalek::Signature::from_bytes(&sig))
        .unwrap();
    assert_eq!(test_signing_key().sign(base.as_bytes()).to_bytes(), sig);
    // Not a Web Bot Auth signature: no tag, no expires.
    assert_eq!(
        agents(86_400).verify(&req, NOW_2026),
        Err(Unsigned::NotWebBotAuth)
    );
}

#[test]
fn arch05_sig1_without_signature_agent() {
    let fields = vector("arch05-ed25519-sig1-no-signature-agent");
    let req = request(&fields);
    let (keyid, base, _) = checked_base(&req, NOW_2026, u64::MAX).unwrap();
    assert_eq!(keyid, TEST_THUMBPRINT);
    assert_eq!(
        base,
        fixture("web-bot-auth-drafts/arch05-ed25519-sig1-no-signature-agent.signature-base.txt")
    );
    // EXPECTED: VALID. Its window is a century, which only a verifier without a bound takes.
    assert_eq!(agents(u64::MAX).verify(&req, NOW_2026), Ok("testbot"));
    assert_eq!(
        agents(86_400).verify(&req, NOW_2026),
        Err(Unsigned::TooLong)
    );
    // Another authority than the one signed.
    let other = SignedRequest {
        authority: "example.org",
        ..req
    };
    assert_eq!(
        agents(u64::MAX).verify(&other, NOW_2026),
        Err(Unsigned::BadSignature)
    );
    // example.com:443 over https is example.com.
    let port = SignedRequest {
        authority: "EXAMPLE.com:443",
        ..req
    };
    assert_eq!(agents(u64::MAX).verify(&port, NOW_2026), Ok("testbot"));
}

#[test]
fn arch05_sig2_legacy_string_signature_agent() {
    let fields = vector("arch05-ed25519-sig2-signature-agent-legacy-string");
    let req = request(&fields);
    let (_, base, _) = checked_base(&req, IN_LEGACY_WINDOW, 3600).unwrap();
    assert_eq!(
        base,
        fixture(
            "web-bot-auth-drafts/arch05-ed25519-sig2-signature-agent-legacy-string.signature-base.txt"
        )
    );
    // EXPECTED: VALID with the clock inside created..expires, expired against a real clock.
    assert_eq!(agents(3600).verify(&req, IN_LEGACY_WINDOW), Ok("testbot"));
    assert_eq!(agents(3600).verify(&req, NOW_2026), Err(Unsigned::Expired));
    // Its one-hour window is over the default bound.
    assert_eq!(
        agents(300).verify(&req, IN_LEGACY_WINDOW),
        Err(Unsigned::TooLong)
    );
    // The covered Signature-Agent changed.
    let mut changed = fields.clone();
    changed[0].1 = r#""https://another-agent.test""#.into();
    assert_eq!(
        agents(3600).verify(&request(&changed), IN_LEGACY_WINDOW),
        Err(Unsigned::BadSignature)
    );
}

#[test]
fn arch05_sig2_dictionary_signature_agent_does_not_verify_as_printed() {
    let fields = vector("arch05-ed25519-sig2-signature-agent-dictionary");
    let req = request(&fields);
    let (_, base, sig) = checked_base(&req, NOW_2026, u64::MAX).unwrap();
    // RFC 9421 section 2.1.2: the member's value serialized, quotes included, as the draft
    // prints the base...
    let printed = fixture(
        "web-bot-auth-drafts/arch05-ed25519-sig2-signature-agent-dictionary.signature-base.txt",
    );
    assert_eq!(base, printed);
    // ...over which the printed signature does not verify (EXPECTED: known-bad).
    assert_eq!(
        agents(u64::MAX).verify(&req, NOW_2026),
        Err(Unsigned::BadSignature)
    );
    // It was made over the member without its quotes, which is not RFC 9421's base.
    let unquoted = printed.replace(
        r#"key="agent2": "https://signature-agent.test""#,
        r#"key="agent2": https://signature-agent.test"#,
    );
    let key = decode_x(TEST_X).unwrap();
    let sig = ed25519_dalek::Signature::from_bytes(&sig);
    assert!(key.verify_strict(unquoted.as_bytes(), &sig).is_ok());
    // Signed over the right base, the same request verifies.
    let mut fixed = fields.clone();
    let good = test_signing_key().sign(printed.as_bytes()).to_bytes();
    fixed[2].1 = format!("sig2=:{}:", STANDARD.encode(good)).into();
    assert_eq!(
        agents(u64::MAX).verify(&request(&fixed), NOW_2026),
        Ok("testbot")
    );
}

/// A request signed here with the test key: `Signature-Input: <label>=<input>` (the test
/// writes the inner list and its parameters), the given extra headers, then a Signature over
/// the base `checked_base` builds (so a case that only breaks the checks still has a good
/// signature, and fails for that reason alone).
struct Signed {
    fields: Vec<(Cow<'static, str>, Cow<'static, str>)>,
}

const T: u64 = 1_800_000_000;
const AGENT: &str = r#"agent1="https://bot.example""#;

fn sign_with(key: &SigningKey, input: &str, extra: &[(&str, &str)]) -> Signed {
    let mut fields: Vec<(Cow<'static, str>, Cow<'static, str>)> = extra
        .iter()
        .map(|(n, v)| ((*n).to_owned().into(), (*v).to_owned().into()))
        .collect();
    fields.push(("signature-input".into(), input.to_owned().into()));
    fields.push((
        "signature".into(),
        format!("sig1=:{}:", STANDARD.encode([0u8; 64])).into(),
    ));
    let req = SignedRequest {
        method: "GET",
        scheme: "https",
        authority: "example.com",
        path: "/page?q=1",
        headers: &fields,
    };
    // The base as verify would build it; when the checks refuse the request at T, the base of
    // the parse alone; when there is none (a component refused), the zero signature stays.
    let base = match checked_base(&req, T, u64::MAX) {
        Ok((_, base, _)) => Some(base),
        Err(_) => {
            let value = input.split_once('=').unwrap().1;
            let text = format!("sig1={value}");
            let dict = web_bot_auth::sf::parse_dictionary(&text).unwrap();
            let Some(web_bot_auth::sf::Member::InnerList(items, params)) =
                web_bot_auth::sf::member(&dict, "sig1")
            else {
                panic!("{input}")
            };
            signature_base(&req, items, params).ok()
        }
    };
    let Some(base) = base else {
        return Signed { fields };
    };
    let sig = key.sign(base.as_bytes()).to_bytes();
    let last = fields.len() - 1;
    fields[last].1 = format!("sig1=:{}:", STANDARD.encode(sig)).into();
    Signed { fields }
}

fn sign(input: &str, extra: &[(&str, &str)]) -> Signed {
    sign_with(&test_signing_key(), input, extra)
}

impl Signed {
    fn req(&self) -> SignedRequest<'_> {
        SignedRequest {
            method: "GET",
            scheme: "https",
            authority: "example.com",
            path: "/page?q=1",
            headers: &self.fields,
        }
    }

    fn verify(&self) -> Result<String, Unsigned> {
        agents(300).verify(&self.req(), T).map(str::to_owned)
    }

    fn set(mut self, name: &str, value: String) -> Self {
        let field = self.fields.iter_mut().find(|(n, _)| n == name).unwrap();
        field.1 = value.into();
        self
    }
}

fn input(components: &str, params: &str) -> String {
    format!(
        r#"sig1=({components});created={};expires={};keyid="{TEST_THUMBPRINT}";tag="web-bot-auth"{params}"#,
        T - 10,
        T + 200
    )
}

#[test]
fn a_request_signed_here_verifies_and_each_change_has_its_reason() {
    let components = r#""@authority" "signature-agent";key="agent1" "@method" "@path" "@query""#;
    let good = || {
        sign(
            &input(components, r#";alg="ed25519";nonce="n""#),
            &[("signature-agent", AGENT)],
        )
    };
    assert_eq!(good().verify(), Ok("testbot".to_owned()));

    // One byte of the signature changed.
    let signed = good();
    let sig = signed.fields.last().unwrap().1.to_string();
    let mut bytes = STANDARD
        .decode(sig.trim_start_matches("sig1=:").trim_end_matches(':'))
        .unwrap();
    bytes[10] ^= 1;
    let tampered = signed.set("signature", format!("sig1=:{}:", STANDARD.encode(&bytes)));
    assert_eq!(tampered.verify(), Err(Unsigned::BadSignature));

    // A covered header changed.
    let other_agent = good().set("signature-agent", r#"agent1="https://evil.example""#.into());
    assert_eq!(other_agent.verify(), Err(Unsigned::BadSignature));
    // An uncovered member added to it changes nothing covered.
    let more = good().set(
        "signature-agent",
        format!(r#"{AGENT}, agent9="https://other.example""#),
    );
    assert_eq!(more.verify(), Ok("testbot".to_owned()));

    // Another @authority, @path or @query.
    let signed = good();
    let req = signed.req();
    for changed in [
        SignedRequest {
            authority: "example.net",
            ..req
        },
        SignedRequest {
            path: "/other?q=1",
            ..req
        },
        SignedRequest {
            path: "/page?q=2",
            ..req
        },
        SignedRequest {
            method: "POST",
            ..req
        },
    ] {
        assert_eq!(agents(300).verify(&changed, T), Err(Unsigned::BadSignature));
    }

    // Expired, and created in the future (beyond the 60 s skew; within it is fine).
    assert_eq!(agents(300).verify(&req, T + 201), Err(Unsigned::Expired));
    assert_eq!(agents(300).verify(&req, T + 200), Ok("testbot"));
    assert_eq!(agents(300).verify(&req, T - 71), Err(Unsigned::NotYetValid));
    assert_eq!(agents(300).verify(&req, T - 70), Ok("testbot"));
}

#[test]
fn time_parameters() {
    let at = |created: u64, expires: u64, params: &str| {
        let input = format!(
            r#"sig1=("@authority");created={created};expires={expires};keyid="{TEST_THUMBPRINT}";tag="web-bot-auth"{params}"#
        );
        sign(&input, &[]).verify()
    };
    assert_eq!(at(T, T + 300, ""), Ok("testbot".to_owned()));
    assert_eq!(at(T, T + 301, ""), Err(Unsigned::TooLong));
    assert_eq!(at(T + 10, T + 5, ""), Err(Unsigned::TooLong));
    assert_eq!(at(T + 61, T + 100, ""), Err(Unsigned::NotYetValid));
    assert_eq!(at(T + 60, T + 100, ""), Ok("testbot".to_owned()));
    assert_eq!(at(T - 100, T - 1, ""), Err(Unsigned::Expired));
    for input in [
        // created or expires missing, negative, or not an integer.
        format!(
            r#"sig1=("@authority");expires={};keyid="{TEST_THUMBPRINT}";tag="web-bot-auth""#,
            T + 1
        ),
        format!(r#"sig1=("@authority");created={T};keyid="{TEST_THUMBPRINT}";tag="web-bot-auth""#),
        format!(
            r#"sig1=("@authority");created=-1;expires={};keyid="{TEST_THUMBPRINT}";tag="web-bot-auth""#,
            T + 1
        ),
        format!(
            r#"sig1=("@authority");created="{T}";expires={};keyid="{TEST_THUMBPRINT}";tag="web-bot-auth""#,
            T + 1
        ),
        // keyid missing or a token.
        format!(
            r#"sig1=("@authority");created={T};expires={};tag="web-bot-auth""#,
            T + 1
        ),
        format!(
            r#"sig1=("@authority");created={T};expires={};keyid=abc;tag="web-bot-auth""#,
            T + 1
        ),
    ] {
        assert_eq!(
            sign(&input, &[]).verify(),
            Err(Unsigned::Malformed),
            "{input}"
        );
    }
}

#[test]
fn keys_tags_algorithms_and_coverage() {
    // Unknown key: signed by another key, named by its own thumbprint.
    let other = SigningKey::from_bytes(&[9; 32]);
    let other_thumbprint = thumbprint(&other.verifying_key());
    let input_other = input(r#""@authority""#, "").replace(TEST_THUMBPRINT, &other_thumbprint);
    assert_eq!(
        sign_with(&other, &input_other, &[]).verify(),
        Err(Unsigned::UnknownKey)
    );
    // The draft's kid instead of the thumbprint.
    let kid = input(r#""@authority""#, "").replace(TEST_THUMBPRINT, DRAFT_KID);
    assert_eq!(sign(&kid, &[]).verify(), Err(Unsigned::UnknownKey));
    // The right keyid, the wrong key's signature.
    assert_eq!(
        sign_with(&other, &input(r#""@authority""#, ""), &[]).verify(),
        Err(Unsigned::BadSignature)
    );

    // Tag missing, or another.
    let untagged = input(r#""@authority""#, "").replace(r#";tag="web-bot-auth""#, "");
    assert_eq!(sign(&untagged, &[]).verify(), Err(Unsigned::NotWebBotAuth));
    let other_tag =
        input(r#""@authority""#, "").replace("web-bot-auth", "http-message-signatures-directory");
    assert_eq!(sign(&other_tag, &[]).verify(), Err(Unsigned::NotWebBotAuth));
    let token_tag = input(r#""@authority""#, "").replace(r#""web-bot-auth""#, "web-bot-auth");
    assert_eq!(sign(&token_tag, &[]).verify(), Err(Unsigned::NotWebBotAuth));

    // alg: ed25519 or absent.
    let rsa = input(r#""@authority""#, r#";alg="rsa-pss-sha512""#);
    assert_eq!(sign(&rsa, &[]).verify(), Err(Unsigned::Unsupported));
    let token_alg = input(r#""@authority""#, ";alg=ed25519");
    assert_eq!(sign(&token_alg, &[]).verify(), Err(Unsigned::Malformed));
}

#[test]
fn coverage_and_components() {
    // Coverage: @authority or @target-uri; Signature-Agent when sent.
    assert_eq!(
        sign(&input(r#""@target-uri""#, ""), &[]).verify(),
        Ok("testbot".to_owned())
    );
    assert_eq!(
        sign(&input(r#""@method" "@path""#, ""), &[]).verify(),
        Err(Unsigned::NotCovered)
    );
    let agent = [("signature-agent", AGENT)];
    assert_eq!(
        sign(&input(r#""@authority""#, ""), &agent).verify(),
        Err(Unsigned::NotCovered)
    );
    assert_eq!(
        sign(&input(r#""@authority" "signature-agent""#, ""), &agent).verify(),
        Ok("testbot".to_owned())
    );
    // A covered member the dictionary lacks, `;key` on the legacy string form, a Signature-Agent
    // that is neither form.
    assert_eq!(
        sign(
            &input(r#""@authority" "signature-agent";key="agent2""#, ""),
            &agent
        )
        .verify(),
        Err(Unsigned::Malformed)
    );
    let legacy = [("signature-agent", r#""https://bot.example""#)];
    assert_eq!(
        sign(
            &input(r#""@authority" "signature-agent";key="agent1""#, ""),
            &legacy
        )
        .verify(),
        Err(Unsigned::Malformed)
    );
    let neither = [("signature-agent", "agent1=token")];
    assert_eq!(
        sign(&input(r#""@authority" "signature-agent""#, ""), &neither).verify(),
        Err(Unsigned::Malformed)
    );
    // Unsupported component parameters and components.
    for components in [
        r#""@authority" "signature-agent";sf"#,
        r#""@authority" "signature-agent" "@query-param";name="q""#,
        r#""@authority" "signature-agent" "@status""#,
    ] {
        assert_eq!(
            sign(&input(components, ""), &agent).verify(),
            Err(Unsigned::Unsupported),
            "{components}"
        );
    }
    // A derived component RFC 9421 does not define: refused, counted apart.
    assert_eq!(
        sign(&input(r#""@authority" "@nonsense""#, ""), &[]).verify(),
        Err(Unsigned::UnknownComponent)
    );
    // A covered header the request lacks.
    assert_eq!(
        sign(&input(r#""@authority" "content-type""#, ""), &[]).verify(),
        Err(Unsigned::Malformed)
    );
    // The data: URI Signature-Agent of dir-05, covered: a long dictionary member verifies.
    let data_uri = fixture("web-bot-auth-drafts/dir05-request-signature-agent-data-uri.http");
    let value = data_uri
        .lines()
        .find_map(|l| l.strip_prefix("Signature-Agent: "))
        .unwrap();
    assert_eq!(
        sign(
            &input(r#""@authority" "signature-agent";key="my_test""#, ""),
            &[("signature-agent", value)]
        )
        .verify(),
        Ok("testbot".to_owned())
    );
}

#[test]
fn one_signature_is_checked_the_first_tagged_one() {
    let mine = input(r#""@authority""#, "");
    let tagged_second = format!(
        r#"other=("@authority");created={T};expires={};keyid="x";tag="elsewhere", {}"#,
        T + 1,
        mine
    );
    let signed = sign(&tagged_second, &[]);
    // The Signature header has only sig1: the other label's signature is not needed.
    assert_eq!(signed.verify(), Ok("testbot".to_owned()));
    // A first web-bot-auth member that fails is the one checked, whatever follows it.
    let bad_first = format!(
        r#"sig0=("@authority");created={T};expires={};keyid="{DRAFT_KID}";tag="web-bot-auth", {}"#,
        T + 1,
        mine
    );
    let signed = sign(&mine, &[]);
    let sig = signed.fields.last().unwrap().1.to_string();
    let both = signed.set("signature-input", bad_first).set(
        "signature",
        format!("sig0=:{}:, {sig}", STANDARD.encode([1u8; 64])),
    );
    assert_eq!(both.verify(), Err(Unsigned::UnknownKey));
}

#[test]
fn malformed_and_missing_fields() {
    let signed = sign(&input(r#""@authority""#, ""), &[]);
    let req = signed.req();
    assert_eq!(
        agents(300).verify(&request(&[]), T),
        Err(Unsigned::NoSignature)
    );
    let only_input = [signed.fields[0].clone()];
    assert_eq!(
        agents(300).verify(&request(&only_input), T),
        Err(Unsigned::Malformed)
    );
    let only_signature = [signed.fields[1].clone()];
    assert_eq!(
        agents(300).verify(&request(&only_signature), T),
        Err(Unsigned::Malformed)
    );
    let sig = signed.fields[1].1.to_string();
    for (name, value) in [
        ("signature", sig.replace("sig1=", "sig2=")),
        ("signature", "sig1=:AAAA:".to_owned()),
        ("signature", sig.replace(':', "")),
        ("signature", format!("{sig}, {}", "x".repeat(MAX_FIELD_LEN))),
        (
            "signature-input",
            signed.fields[0]
                .1
                .replace("sig1=(", "sig1=(\"@authority\" "),
        ),
        ("signature-input", signed.fields[0].1.replace('(', "")),
        ("signature-input", format!("{},", signed.fields[0].1)),
    ] {
        let changed = sign(&input(r#""@authority""#, ""), &[]).set(name, value.clone());
        assert_eq!(
            changed.verify(),
            Err(Unsigned::Malformed),
            "{name}: {value}"
        );
    }
    // A Signature-Input split over two lines is one dictionary.
    let (a, b) = signed.fields[0].1.split_once(";keyid").unwrap();
    let split = [
        ("signature-input".into(), "other=();tag=\"x\"".into()),
        ("signature-input".into(), format!("{a};keyid{b}").into()),
        signed.fields[1].clone(),
    ];
    let split_req = SignedRequest {
        headers: &split,
        ..req
    };
    assert_eq!(agents(300).verify(&split_req, T), Ok("testbot"));
}

#[test]
fn the_filter_request_is_read_as_envoy_gives_it() {
    let signed = sign(&input(r#""@authority" "@method" "@path""#, ""), &[]);
    let mut headers: Vec<(Cow<'_, str>, Cow<'_, str>)> = vec![
        (":method".into(), "GET".into()),
        (":scheme".into(), "https".into()),
        (":authority".into(), "example.com".into()),
        (":path".into(), "/page?q=1".into()),
    ];
    headers.extend(signed.fields.iter().cloned());
    let req = Request {
        headers,
        cookies: Vec::new(),
        source_address: None,
    };
    assert_eq!(
        agents(300).verify(&SignedRequest::from_request(&req), T),
        Ok("testbot")
    );
}

#[test]
fn every_reason_has_a_metric_name() {
    let names: Vec<&str> = Unsigned::ALL.iter().map(|r| r.name()).collect();
    for (i, name) in names.iter().enumerate() {
        assert!(pow_core::config::valid_list_name(name), "{name}");
        assert!(!names[..i].contains(name), "{name}");
    }
}

#[test]
fn the_fields_a_signature_covers_are_named_for_the_glue() {
    let covered = |components: &str| web_bot_auth::covered_fields(&input(components, ""));
    assert_eq!(
        covered(r#""@authority" "content-type" "date" "signature-agent";key="a""#),
        ["content-type", "date", "signature-agent"]
    );
    // Derived components are no fields; a name that is no field name is left out.
    assert!(covered(r#""@authority" "@method" "Content-Type" ":path""#).is_empty());
    // Only the member tagged web-bot-auth counts, and nothing when the field does not parse.
    let other = r#"a=("x-first");tag="other", sig1=("x-second");tag="web-bot-auth""#;
    assert_eq!(web_bot_auth::covered_fields(other), ["x-second"]);
    assert!(web_bot_auth::covered_fields("sig1=(").is_empty());
    // A covered field of several lines is one value, its lines trimmed and joined.
    let signed = sign(
        &input(r#""@authority" "x-tags""#, ""),
        &[("x-tags", " a "), ("x-tags", "b")],
    );
    assert_eq!(signed.verify(), Ok("testbot".to_owned()));
}
