//! The real transport (ureq) against loopback servers: a credential never follows a redirect.
//! ureq follows redirects by default and strips only `Authorization` on the way (its
//! `redirect_auth_headers`), so Scaleway's `X-Auth-Token` would reach whatever host a redirect
//! names; the transport follows none.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use pop_common::wait::Sleeper;
use scaleway::{Client, RetryPolicy, SecretKey, UreqTransport};
use testkit::http::{Reply, Server};

const SECRET: &str = "5d0c1f4e-8a3b-4c2d-9e1f-0a1b2c3d4e5f";
const PROJECT: &str = "11111111-1111-4111-8111-111111111111";

#[derive(Debug)]
struct NoSleep;
impl Sleeper for NoSleep {
    fn sleep(&self, _: Duration) {}
}

#[test]
fn a_redirect_to_another_host_receives_no_token() {
    // The host a redirect points to: it would answer, and records what reaches it.
    let elsewhere = Server::start(vec![
        Reply::json(200, r#"{"servers": []}"#),
        Reply::json(200, r#"{"ip": {}}"#),
    ])
    .unwrap();
    let api = Server::start(vec![
        Reply::Redirect {
            status: 302,
            location: format!("{}/instance/v1/zones/fr-par-1/servers", elsewhere.url),
        },
        Reply::Redirect {
            status: 307,
            location: format!("{}/instance/v1/zones/fr-par-1/ips", elsewhere.url),
        },
    ])
    .unwrap();
    let transport = UreqTransport::new(Duration::from_secs(10));
    let client = Client::new(
        &transport,
        &NoSleep,
        &api.url,
        SecretKey::new(SECRET),
        PROJECT,
    )
    .with_policy(RetryPolicy {
        attempts: 1,
        ..RetryPolicy::default()
    });

    let err = client
        .get::<serde_json::Value>("/instance/v1/zones/fr-par-1/servers", &[])
        .unwrap_err();
    assert_eq!(err.status(), Some(302), "{err}");
    // A 307 keeps the method and the body: a POST would be sent again, elsewhere.
    let err = client
        .send::<_, serde_json::Value>(
            scaleway::Method::Post,
            "/instance/v1/zones/fr-par-1/ips",
            &serde_json::json!({"project": PROJECT}),
        )
        .unwrap_err();
    assert_eq!(err.status(), Some(307), "{err}");

    let reached = elsewhere.requests();
    assert!(
        reached.is_empty(),
        "the redirect was followed: {:?}",
        reached
            .iter()
            .map(|r| (&r.method, &r.target, r.header("x-auth-token")))
            .collect::<Vec<_>>()
    );
    let sent = api.requests();
    assert_eq!(sent.len(), 2);
    assert!(
        sent.iter()
            .all(|r| r.header("x-auth-token") == Some(SECRET))
    );
}
