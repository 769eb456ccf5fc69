//! The requests the bench sends, and the clearance cookies they carry.

use pow_demo as demo;
use proxy_wasm_host::{Host, Outcome, Request};

use crate::{LISTED, UA};

pub fn request(source: &str, cookie: Option<&str>) -> Request {
    let mut request = Request::get("/articles/42")
        .from_address(source)
        .header("user-agent", UA)
        .header("accept", "text/html,application/xhtml+xml")
        .header("accept-language", "en-GB,en;q=0.8");
    request.authority = "edge.example.test".to_owned();
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    request
}

/// The request with another User-Agent.
pub fn with_user_agent(mut request: Request, user_agent: &str) -> Request {
    for (name, value) in &mut request.headers {
        if name == "user-agent" {
            *value = user_agent.to_owned();
        }
    }
    request
}

/// Gets a clearance cookie the honest way: the challenge page, the answer, the Set-Cookie.
pub fn clearance_cookie(host: &mut Host) -> Result<String, String> {
    let page = match host
        .request(request(LISTED, None))
        .map_err(|e| e.to_string())?
    {
        Outcome::Local {
            status: 403, body, ..
        } => String::from_utf8_lossy(&body).into_owned(),
        other => {
            return Err(format!(
                "expected a challenge for the listed address, got {other:?}"
            ));
        }
    };
    let answer = demo::answer_challenge(&page, 1 << 24)
        .ok_or("the challenge page has no solvable challenge")?;
    let mut verify = request(LISTED, None);
    verify.path = answer;
    match host.request(verify).map_err(|e| e.to_string())? {
        Outcome::Local { headers, .. } => headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
            .and_then(|(_, v)| v.split(';').next())
            .map(str::to_owned)
            .ok_or_else(|| "the verify answer set no cookie".to_owned()),
        other => Err(format!("the verify endpoint did not answer: {other:?}")),
    }
}

/// The cookie with its MAC's last hex digit changed: well formed and fresh, but forged.
pub fn forged(cookie: &str) -> String {
    let mut fake = cookie.to_owned();
    let last = fake.pop().unwrap_or('0');
    fake.push(if last == '0' { '1' } else { '0' });
    fake
}
