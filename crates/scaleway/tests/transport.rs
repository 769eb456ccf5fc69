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

/// A client of the API at `url` through the real transport, 3 attempts at most.
fn client_at<'a>(transport: &'a UreqTransport, url: &str) -> Client<'a> {
    Client::new(transport, &NoSleep, url, SecretKey::new(SECRET), PROJECT).with_policy(
        RetryPolicy {
            attempts: 3,
            ..RetryPolicy::default()
        },
    )
}

#[test]
fn a_name_that_does_not_resolve_is_tried_once_and_named() {
    // RFC 6761: `.invalid` names never resolve.
    let transport = UreqTransport::new(Duration::from_secs(10));
    let client = client_at(&transport, "https://api.edgepop-test.invalid");
    let err = client
        .get::<serde_json::Value>("/instance/v1/zones/fr-par-1/servers", &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(
            "GET https://api.edgepop-test.invalid/instance/v1/zones/fr-par-1/servers: "
        ) && err.contains("cannot resolve the host api.edgepop-test.invalid"),
        "{err}"
    );
    assert_eq!(client.counts().reads, 1, "{err}");

    let uploads = UreqTransport::for_uploads(Duration::from_secs(10), 1);
    let s3 = scaleway::s3::S3::new(
        &uploads,
        &NoSleep,
        "https://s3.edgepop-test.invalid",
        "fr-par",
        "SCWTESTTESTTESTTESTT",
        SecretKey::new(SECRET),
        RetryPolicy {
            attempts: 3,
            ..RetryPolicy::default()
        },
    );
    let err = s3.bucket_exists("bucket").unwrap_err().to_string();
    assert!(
        err.starts_with("S3 HEAD https://s3.edgepop-test.invalid/bucket: ")
            && err.contains("cannot resolve the host s3.edgepop-test.invalid"),
        "{err}"
    );
    assert_eq!((s3.counts().reads, s3.counts().retries), (1, 0), "{err}");
}

#[test]
fn a_refused_connection_is_retried_and_named() {
    // A loopback port nothing listens on any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let transport = UreqTransport::new(Duration::from_secs(10));
    let url = format!("http://127.0.0.1:{port}");
    let client = client_at(&transport, &url);
    let err = client
        .get::<serde_json::Value>("/instance/v1/zones/fr-par-1/servers", &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with(&format!("GET {url}/instance/v1/zones/fr-par-1/servers: "))
            && err.ends_with("(gave up after 3 attempts)"),
        "{err}"
    );
    assert_eq!((client.counts().reads, client.counts().retries), (3, 2));
}
