//! The scenarios besides the lists' own: header sizes and the policy's rules.

use proxy_wasm_host::Host;

use crate::lists::{listed_config, prefixes};
use crate::requests::{clearance_cookie, forged, request, with_user_agent};
use crate::{BIG, LISTED, PREVIOUS_SECRET, Rows, UA, UNLISTED, vm_config};

/// How many hosts and User-Agents the row of new visitors sends in turn: more than the filter
/// remembers.
pub const VISITORS: usize = 64;

/// The header-size rows: 58 KiB in each header the filter reads, on a VM with two keys (so a
/// forged cookie costs a MAC per key), all challenged; and the same bytes in a header it
/// ignores. Their reference is this VM's plain challenge page.
pub fn header_size_scenarios(rows: &mut Rows) -> Result<(), String> {
    let mut env = rows.env.to_vec();
    env.push((
        "POW_HMAC_SECRET_PREVIOUS".to_owned(),
        PREVIOUS_SECRET.as_bytes().to_vec(),
    ));
    let mut host = Host::load(rows.filter, vm_config(listed_config(&prefixes(1_000)), env))
        .map_err(|e| format!("two keys: {e}"))?;
    let forged_cookie = forged(&clearance_cookie(&mut host)?);
    let index = rows.add_host(host);
    let cases = header_size_cases(&forged_cookie);
    for (label, request) in cases {
        rows.add(label, index, vec![request], true);
    }
    Ok(())
}

/// The header-size requests, each with its label: 58 KiB in each header the filter reads (the
/// host with three forged cookies), a 2 KiB return path, and 58 KiB in a header it ignores.
fn header_size_cases(forged_cookie: &str) -> Vec<(&'static str, proxy_wasm_host::Request)> {
    let big = |c: char| c.to_string().repeat(BIG);
    let three = [forged_cookie; 3].join("; ");
    let mut long_host = request(LISTED, Some(&three));
    long_host.authority = format!("{}.example.test", big('a'));
    let with = |name: &str, value: &str| {
        let mut r = request(LISTED, None);
        r.headers.retain(|(n, _)| n != name);
        r.headers.push((name.to_owned(), value.to_owned()));
        r
    };
    let mut long_path = request(LISTED, None);
    long_path.path = format!("/{}", big('a'));
    let mut long_return = request(LISTED, None);
    long_return.path = format!("/{}", "a".repeat(2046));
    vec![
        (
            "header sizes: plain challenge page (2 keys)",
            request(LISTED, None),
        ),
        (
            "header sizes: 58 KiB :authority + 3 forged cookies",
            long_host,
        ),
        (
            "header sizes: 58 KiB of commas in Accept-Language",
            with("accept-language", &big(',')),
        ),
        (
            "header sizes: 58 KiB of commas in Accept",
            with("accept", &format!("{}text/html", big(','))),
        ),
        (
            "header sizes: 58 KiB X-Forwarded-For",
            with("x-forwarded-for", &"192.0.2.1, ".repeat(BIG / 11)),
        ),
        (
            "header sizes: 58 KiB User-Agent",
            with("user-agent", &big('M')),
        ),
        ("header sizes: 58 KiB path", long_path),
        ("header sizes: 2 KiB return path in the page", long_return),
        (
            "header sizes: 58 KiB in a header the filter ignores",
            with("x-ignored", &big('a')),
        ),
    ]
}

/// `count` rules of the kinds a site writes (User-Agent, path, host and header conditions, each
/// rule its own values), none of which the bench's requests meet: every index is consulted.
fn rules(count: usize) -> serde_json::Value {
    let rules: Vec<serde_json::Value> = (0..count)
        .map(|i| match i % 4 {
            0 => serde_json::json!({"name": format!("r{i}"), "user_agent": [format!("agent-{i}/")], "action": "deny"}),
            1 => serde_json::json!({"name": format!("r{i}"), "path": [format!("/area-{i}/")], "action": "challenge", "difficulty": 12}),
            2 => serde_json::json!({"name": format!("r{i}"), "host": [format!("site-{i}.example")], "action": "allow"}),
            _ => serde_json::json!({"name": format!("r{i}"), "header": {"x-api-key": format!("key-{i}")}, "action": "allow"}),
        })
        .collect();
    serde_json::Value::Array(rules)
}

/// The policy rows: a cookie pass under the short form and under 100 rules (1k prefixes each),
/// an unlisted address decided under 1, 100 and 1,000 rules, and under 100 rules with a new
/// host and User-Agent each request.
pub fn policy_scenarios(rows: &mut Rows) -> Result<(), String> {
    let set = prefixes(1_000);
    let (filter, env) = (rows.filter, rows.env);
    let with_rules = |count: Option<usize>| -> Result<Host, String> {
        let mut config: serde_json::Value =
            serde_json::from_slice(&listed_config(&set)).map_err(|e| e.to_string())?;
        if let Some(count) = count {
            config["rules"] = rules(count);
        }
        Host::load(
            filter,
            vm_config(config.to_string().into_bytes(), env.to_vec()),
        )
        .map_err(|e| format!("{count:?} rules: {e}"))
    };
    for (label, count) in [("the short form", None), ("100 rules", Some(100))] {
        let mut host = with_rules(count)?;
        let cookie = clearance_cookie(&mut host)?;
        let index = rows.add_host(host);
        rows.add(
            format!("policy: cookie pass, {label}"),
            index,
            vec![request(LISTED, Some(&cookie))],
            false,
        );
    }
    for count in [1, 100, 1000] {
        let index = rows.add_host(with_rules(Some(count))?);
        rows.add(
            format!(
                "policy: unlisted address, {count} rule{}",
                if count == 1 { "" } else { "s" }
            ),
            index,
            vec![request(UNLISTED, None)],
            false,
        );
    }
    // The filter remembers what the last 16 hosts and User-Agents let through: 64 of each in
    // turn, each of the same length as the others and differing in its last bytes, so that
    // every request misses and compares itself to every one remembered (what a crowd of new
    // visitors, or a scan of made-up hosts, costs).
    let index = rows.add_host(with_rules(Some(100))?);
    rows.add(
        format!("policy: unlisted address, 100 rules, {VISITORS} hosts and User-Agents in turn"),
        index,
        (0..VISITORS)
            .map(|i| {
                let mut r = with_user_agent(request(UNLISTED, None), &format!("{UA}/{i:02}"));
                r.authority = format!("{}{i:02}", r.authority);
                r
            })
            .collect(),
        false,
    );
    Ok(())
}
