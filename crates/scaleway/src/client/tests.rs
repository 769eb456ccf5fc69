#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use std::cell::RefCell;
use std::collections::VecDeque;
use std::time::Duration;

use super::*;
use crate::http::TransportError;

#[derive(Debug, Default)]
struct Script {
    answers: RefCell<VecDeque<Result<HttpResponse, TransportError>>>,
    seen: RefCell<Vec<HttpRequest>>,
}

impl Transport for Script {
    fn send(&self, request: &HttpRequest) -> Result<HttpResponse, TransportError> {
        self.seen.borrow_mut().push(request.clone());
        self.answers
            .borrow_mut()
            .pop_front()
            .expect("more calls than scripted")
    }
}

impl Script {
    /// The same answer `times` over, each made by `answer` (a transport error is not `Clone`).
    fn answer_times(
        &self,
        times: usize,
        answer: impl Fn() -> Result<HttpResponse, TransportError>,
    ) {
        self.answers
            .borrow_mut()
            .extend((0..times).map(|_| answer()));
    }
}

#[derive(Debug, Default)]
struct Recorder(RefCell<Vec<Duration>>);
impl Sleeper for Recorder {
    fn sleep(&self, d: Duration) {
        self.0.borrow_mut().push(d);
    }
}

fn answer(
    status: u16,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<HttpResponse, TransportError> {
    Ok(HttpResponse {
        status,
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        body: body.as_bytes().to_vec(),
    })
}

const PROJECT: &str = "11111111-1111-4111-8111-111111111111";

fn client<'a>(script: &'a Script, sleeps: &'a Recorder) -> Client<'a> {
    Client::new(
        script,
        sleeps,
        "http://127.0.0.1:1/",
        SecretKey::new("s3cr3t"),
        PROJECT,
    )
}

#[test]
fn a_429_then_503_are_retried_honouring_retry_after() {
    let script = Script::default();
    script.answers.borrow_mut().extend([
        answer(429, &[("retry-after", "7")], ""),
        answer(503, &[], "oops"),
        answer(200, &[], r#"{"ok": true}"#),
    ]);
    let sleeps = Recorder::default();
    let c = client(&script, &sleeps);
    let v: Value = c.get("/x", &[]).unwrap();
    assert_eq!(v["ok"], true);
    let waits = sleeps.0.borrow().clone();
    assert_eq!(waits.len(), 2);
    assert!(waits[0] >= Duration::from_secs(7), "{waits:?}");
    assert!(waits[1] >= Duration::from_millis(500) && waits[1] <= Duration::from_secs(1));
    assert_eq!(c.counts().retries, 2);
    // The token is sent, as a header only.
    let seen = script.seen.borrow();
    assert!(
        seen[0]
            .headers
            .contains(&("X-Auth-Token".into(), "s3cr3t".into()))
    );
    assert!(!format!("{:?}", seen[0]).contains("s3cr3t"));
}

#[test]
fn retries_are_bounded() {
    let script = Script::default();
    script.answer_times(6, || answer(503, &[], "{}"));
    let sleeps = Recorder::default();
    let err = client(&script, &sleeps)
        .get::<Value>("/x", &[])
        .unwrap_err();
    assert_eq!(err.status(), Some(503));
    assert_eq!(script.seen.borrow().len(), 6);
    assert_eq!(sleeps.0.borrow().len(), 5);
    assert!(
        sleeps
            .0
            .borrow()
            .iter()
            .all(|d| *d <= Duration::from_secs(30))
    );
}

#[test]
fn the_backoff_grows_and_is_capped() {
    let p = RetryPolicy::default();
    assert_eq!(p.delay(0, None, 0), Duration::from_millis(250));
    assert_eq!(p.delay(3, None, 0), Duration::from_secs(2));
    assert_eq!(p.delay(30, None, 15_000), Duration::from_secs(30));
    assert!(p.delay(30, None, u64::MAX) <= Duration::from_secs(30));
    assert_eq!(
        p.delay(0, Some(Duration::from_secs(3600)), 0),
        Duration::from_secs(30)
    );
}

#[test]
fn a_transient_state_is_waited_out() {
    let script = Script::default();
    script.answers.borrow_mut().extend([
        answer(409, &[], r#"{"type": "transient_state", "message": "resource is in a transient state", "resource": "instance_server", "resource_id": "x", "current_state": "starting"}"#),
        answer(204, &[], ""),
    ]);
    let sleeps = Recorder::default();
    let c = client(&script, &sleeps);
    c.delete("/x").unwrap();
    assert_eq!(sleeps.0.borrow().len(), 1);
}

#[test]
fn a_cut_post_is_not_repeated_but_a_cut_get_is() {
    let script = Script::default();
    script.answers.borrow_mut().extend([
        Err(TransportError::connection("connection reset")),
        Err(TransportError::connection("connection reset")),
        answer(200, &[], "{}"),
    ]);
    let sleeps = Recorder::default();
    let c = client(&script, &sleeps);
    let err = c
        .send::<_, Value>(Method::Post, "/x", &serde_json::json!({}))
        .unwrap_err();
    assert!(
        matches!(err, ApiError::Transport { attempts: 1, .. }),
        "{err}"
    );
    let _: Value = c.get("/x", &[]).unwrap();
}

#[test]
fn a_4xx_shows_scaleway_s_error_body() {
    let script = Script::default();
    script.answers.borrow_mut().push_back(answer(
        400,
        &[],
        r#"{"type": "invalid_arguments", "message": "invalid argument(s)", "details": [{"argument_name": "image", "reason": "required", "help_message": "required key not provided"}]}"#,
    ));
    let sleeps = Recorder::default();
    let err = client(&script, &sleeps)
        .get::<Value>("/x", &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("HTTP 400") && err.contains("invalid_arguments"),
        "{err}"
    );
    assert!(
        err.contains("argument_name") && err.contains("required key not provided"),
        "{err}"
    );
    assert!(sleeps.0.borrow().is_empty(), "a 4xx is not retried");
}

#[test]
fn pages_are_followed_by_x_total_count_and_by_total_count() {
    let script = Script::default();
    script.answers.borrow_mut().extend([
        answer(
            200,
            &[("x-total-count", "3")],
            r#"{"servers": [{"id": "a"}, {"id": "b"}]}"#,
        ),
        answer(
            200,
            &[("x-total-count", "3")],
            r#"{"servers": [{"id": "c"}]}"#,
        ),
        answer(200, &[], r#"{"total_count": 1, "ssh_keys": [{"id": "k"}]}"#),
    ]);
    let sleeps = Recorder::default();
    let c = client(&script, &sleeps);
    let servers: Vec<Value> = c
        .list("/s", &[("tags", "a=b".into())], "servers", "per_page")
        .unwrap();
    assert_eq!(servers.len(), 3);
    let keys: Vec<Value> = c.list("/k", &[], "ssh_keys", "page_size").unwrap();
    assert_eq!(keys.len(), 1);
    let seen = script.seen.borrow();
    assert_eq!(
        seen[0].url,
        "http://127.0.0.1:1/s?tags=a%3Db&page=1&per_page=100"
    );
    assert!(seen[1].url.ends_with("page=2&per_page=100"));
    assert!(seen[2].url.ends_with("page=1&page_size=100"));
}

fn posts(script: &Script) -> usize {
    script
        .seen
        .borrow()
        .iter()
        .filter(|r| r.method == "POST")
        .count()
}

#[test]
fn a_post_is_retried_on_429_but_never_blindly_on_a_5xx() {
    let script = Script::default();
    script.answers.borrow_mut().extend([
        answer(429, &[("retry-after", "0")], ""),
        answer(201, &[], r#"{"id": "a"}"#),
        answer(502, &[], "bad gateway"),
    ]);
    let sleeps = Recorder::default();
    let c = client(&script, &sleeps);
    let made: Value = c.send(Method::Post, "/x", &serde_json::json!({})).unwrap();
    assert_eq!(made["id"], "a");
    assert_eq!(posts(&script), 2, "the 429 was a refusal: sent again");
    let err = c
        .send::<_, Value>(Method::Post, "/x", &serde_json::json!({}))
        .unwrap_err();
    assert_eq!(err.status(), Some(502));
    assert!(err.outcome_unknown());
    assert_eq!(posts(&script), 3, "the 502 was not repeated");
}

#[test]
fn a_post_answered_502_that_took_effect_is_sent_once() {
    let script = Script::default();
    script.answers.borrow_mut().extend([
        answer(502, &[], "bad gateway"),
        // What would come next: a second server.
        answer(201, &[], r#"{"id": "second"}"#),
    ]);
    let sleeps = Recorder::default();
    let c = client(&script, &sleeps);
    let looked = Cell::new(0);
    let made: Value = c
        .post_checked("/servers", &serde_json::json!({"tags": ["t"]}), &|| {
            looked.set(looked.get() + 1);
            Ok(Some(serde_json::json!({"id": "first"})))
        })
        .unwrap();
    assert_eq!(made["id"], "first", "what the look found");
    assert_eq!(posts(&script), 1);
    assert_eq!(looked.get(), 1);
}

#[test]
fn a_post_answered_502_that_did_not_take_effect_is_sent_again_within_the_bound() {
    let script = Script::default();
    script.answers.borrow_mut().extend([
        answer(502, &[], ""),
        Err(TransportError::connection("connection reset")),
        answer(201, &[], r#"{"id": "made"}"#),
    ]);
    let sleeps = Recorder::default();
    let c = client(&script, &sleeps);
    let made: Value = c
        .post_checked("/servers", &serde_json::json!({}), &|| Ok(None))
        .unwrap();
    assert_eq!(made["id"], "made");
    assert_eq!(posts(&script), 3);
    assert_eq!(sleeps.0.borrow().len(), 2);

    let script = Script::default();
    script.answer_times(6, || answer(503, &[], ""));
    let c = client(&script, &sleeps).with_policy(RetryPolicy {
        attempts: 3,
        ..RetryPolicy::default()
    });
    let err = c
        .post_checked::<_, Value>("/servers", &serde_json::json!({}), &|| Ok(None))
        .unwrap_err();
    assert_eq!(err.status(), Some(503));
    assert_eq!(posts(&script), 3, "bounded by the policy's attempts");
}

#[derive(Debug)]
struct Thing {
    id: String,
    project: String,
}

crate::owned!(Thing: "thing");

#[test]
fn an_object_of_another_project_is_never_returned() {
    let script = Script::default();
    let sleeps = Recorder::default();
    let c = client(&script, &sleeps);
    let thing = |id: &str, project: &str| Thing {
        id: id.into(),
        project: project.into(),
    };
    let other = "22222222-2222-4222-8222-222222222222";
    let err = c.mine(thing("x", other)).unwrap_err().to_string();
    assert!(err.contains(other) && err.contains("not ours"), "{err}");
    assert_eq!(c.mine(thing("y", PROJECT)).unwrap().id, "y");
    let kept = c.only_mine(vec![thing("a", other), thing("b", PROJECT)]);
    assert_eq!(
        kept.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["b"]
    );
}

#[test]
fn a_name_that_does_not_resolve_is_not_retried_and_the_error_names_the_host() {
    let script = Script::default();
    script
        .answers
        .borrow_mut()
        .push_back(Err(TransportError::resolve(
            "io: failed to lookup address information: Name or service not known",
        )));
    let sleeps = Recorder::default();
    let c = Client::new(
        &script,
        &sleeps,
        "https://api.scaleway.com",
        SecretKey::new("s3cr3t"),
        PROJECT,
    );
    let err = c
        .get::<Value>("/instance/v1/zones/fr-par-1/servers", &[])
        .unwrap_err();
    assert_eq!(script.seen.borrow().len(), 1, "sent again: {err}");
    assert!(
        sleeps.0.borrow().is_empty(),
        "waited: {:?}",
        sleeps.0.borrow()
    );
    let text = err.to_string();
    assert!(
        text.starts_with("GET https://api.scaleway.com/instance/v1/zones/fr-par-1/servers: ")
            && text.contains("cannot resolve the host api.scaleway.com")
            && text.contains("not retried"),
        "{text}"
    );
    // Nothing was sent: a POST that met it did not take effect.
    assert!(!err.outcome_unknown());
    assert_eq!(c.counts().retries, 0);
}

#[test]
fn a_refused_connection_is_retried_and_the_error_names_the_host() {
    let script = Script::default();
    script.answer_times(3, || {
        Err(TransportError::connection("io: Connection refused"))
    });
    let sleeps = Recorder::default();
    let c = client(&script, &sleeps).with_policy(RetryPolicy {
        attempts: 3,
        ..RetryPolicy::default()
    });
    let err = c.get::<Value>("/x", &[]).unwrap_err().to_string();
    assert_eq!(script.seen.borrow().len(), 3);
    assert_eq!(sleeps.0.borrow().len(), 2);
    assert_eq!(
        err,
        "GET http://127.0.0.1:1/x: io: Connection refused (gave up after 3 attempts)"
    );
    assert_eq!(c.counts().retries, 2);
}
