//! The ratios the bench has goals for, from one run's medians.

use std::fmt::Write as _;

use crate::{Scenario, median};

/// One ratio: what, its value in this run, its goal (`(figure)`: none) and whether it was met.
type Row = (String, f64, &'static str, bool);

/// The median of the first scenario whose label starts with `label` (on a copy: the samples
/// stay in round order, for the ratios that pair rounds).
fn median_of(scenarios: &[Scenario], label: &str) -> Result<f64, String> {
    scenarios
        .iter()
        .find(|s| s.label.starts_with(label))
        .map(|s| median(&mut s.samples.clone()))
        .ok_or_else(|| format!("no scenario {label}"))
}

/// A row whose goal is `value <= limit`.
fn at_most(label: &str, value: f64, goal: &'static str, limit: f64) -> Row {
    (label.to_owned(), value, goal, value <= limit)
}

/// A row shown with no goal.
fn figure(label: &str, value: f64) -> Row {
    (label.to_owned(), value, "(figure)", true)
}

/// Every ratio the bench has a goal for, from this run's medians, with whether it was met.
/// `partial`: a group of rows that did not run is left out, not an error.
pub fn ratios(
    scenarios: &mut [Scenario],
    floor_ns: f64,
    native_verify_ns: Option<&[f64]>,
    partial: bool,
) -> Result<String, String> {
    let mut rows = Vec::new();
    let groups = [
        cookie_rows(scenarios, floor_ns),
        header_size_rows(scenarios),
        policy_rows(scenarios, floor_ns),
        web_bot_auth_rows(scenarios, native_verify_ns),
    ];
    for group in groups {
        match group {
            Ok(group) => rows.extend(group),
            Err(_) if partial => {}
            Err(e) => return Err(e),
        }
    }
    let mut out =
        String::from("\n| ratio (this run) | value | goal | met |\n| --- | ---: | --- | --- |\n");
    for (label, value, goal, met) in rows {
        let met = match (goal, met) {
            ("(figure)", _) => "",
            (_, true) => "yes",
            (_, false) => "NO",
        };
        let _ = writeln!(out, "| {label} | {value:.3} | {goal} | {met} |");
    }
    out.push('\n');
    Ok(out)
}

/// The samples of the first scenario whose label starts with `label`, in round order.
fn samples_of(scenarios: &[Scenario], label: &str) -> Result<Vec<f64>, String> {
    scenarios
        .iter()
        .find(|s| s.label.starts_with(label))
        .map(|s| s.samples.clone())
        .ok_or_else(|| format!("no scenario {label}"))
}

/// The median of each round's `numerator / denominator`: the two rows of a round ran one after
/// the other, so a change of the machine's speed between rounds moves them alike, where a ratio
/// of two medians would take each from another round.
fn paired_ratio(scenarios: &[Scenario], numerator: &str, denominator: &str) -> Result<f64, String> {
    let above = samples_of(scenarios, numerator)?;
    let below = samples_of(scenarios, denominator)?;
    let mut per_round: Vec<f64> = above.iter().zip(&below).map(|(a, b)| a / b).collect();
    if per_round.is_empty() {
        return Err(format!("no round of {numerator} measured"));
    }
    Ok(median(&mut per_round))
}

/// One Web Bot Auth verification in the module (the signed request above the unsigned one)
/// against the same verification natively, and the native figure itself in microseconds. The
/// ratio is the median of each round's own ratio: both sides of a round ran one after the other,
/// so a change of the machine's speed between rounds moves them alike.
fn web_bot_auth_rows(
    scenarios: &mut [Scenario],
    native_verify_ns: Option<&[f64]>,
) -> Result<Vec<Row>, String> {
    let native = native_verify_ns.ok_or("no native verification measured")?;
    let mut signed = samples_of(scenarios, crate::wba::SIGNED)?;
    let mut unsigned = samples_of(scenarios, crate::wba::UNSIGNED)?;
    let mut per_round: Vec<f64> = signed
        .iter()
        .zip(&unsigned)
        .zip(native)
        .map(|((s, u), n)| (s - u).max(0.0) / n)
        .collect();
    if per_round.is_empty() {
        return Err("no Web Bot Auth round measured".into());
    }
    let ratio = median(&mut per_round);
    let in_module = (median(&mut signed) - median(&mut unsigned)).max(0.0);
    let native = median(&mut native.to_vec());
    Ok(vec![
        at_most(
            "one Web Bot Auth verification, module / native (median of the rounds' ratios)",
            ratio,
            "<= 3",
            3.0,
        ),
        figure(
            "one Web Bot Auth verification in the module, us",
            in_module / 1000.0,
        ),
        figure("one Web Bot Auth verification native, us", native / 1000.0),
    ])
}

/// The cookie pass against the floor and across list sizes, and forged cookies.
fn cookie_rows(scenarios: &mut [Scenario], floor_ns: f64) -> Result<Vec<Row>, String> {
    let pass = |size: &str| format!("cookie pass (listed address, valid cookie), {size}");
    let pass_1k = median_of(scenarios, &pass("1k"))?;
    let pass_100k = median_of(scenarios, &pass("100k"))?;
    let pass_1m = median_of(scenarios, &pass("1M"))?;
    let page = median_of(scenarios, "listed address: challenge page, 1k")?;
    let fake_page = median_of(scenarios, "fake cookies: 675 forged")?;
    let fake_pass = median_of(scenarios, "fake cookies: valid cookie then")?;
    let same_size = median_of(scenarios, "60 KiB of other cookies")?;
    Ok(vec![
        at_most(
            "cookie pass / floor, 1k prefixes",
            pass_1k / floor_ns,
            "<= 1.15",
            1.15,
        ),
        at_most(
            "cookie pass / floor, 100k prefixes",
            pass_100k / floor_ns,
            "<= 1.15",
            1.15,
        ),
        at_most(
            "cookie pass / floor, 1M prefixes",
            pass_1m / floor_ns,
            "<= 1.15",
            1.15,
        ),
        at_most(
            "cookie pass 1M / 1k prefixes (flat)",
            pass_1m / pass_1k,
            "<= 1.10",
            1.10,
        ),
        at_most(
            "valid cookie then 675 forged / cookie pass",
            fake_pass / pass_1k,
            "<= 2",
            2.0,
        ),
        figure(
            "675 forged then a challenge / challenge page",
            fake_page / page,
        ),
        at_most(
            "valid cookie then 675 forged / 60 KiB of other cookies",
            fake_pass / same_size,
            "<= 1.10",
            1.10,
        ),
    ])
}

/// What the filter itself does with 58 KiB in a header: the time above carrying the same bytes
/// in a header it ignores (which the proxy copies into the VM all the same), against a
/// challenge; the long return path against the plain challenge page.
fn header_size_rows(scenarios: &mut [Scenario]) -> Result<Vec<Row>, String> {
    let sizes: Vec<String> = scenarios
        .iter()
        .map(|s| s.label.clone())
        .filter(|l| l.starts_with("header sizes: 58") || l.starts_with("header sizes: 2 KiB"))
        .collect();
    let challenge = median_of(scenarios, "header sizes: plain challenge page")?;
    let ignored = median_of(
        scenarios,
        "header sizes: 58 KiB in a header the filter ignores",
    )?;
    let mut rows = Vec::new();
    for label in sizes {
        if label.contains("ignores") {
            continue;
        }
        let row = median_of(scenarios, &label)?;
        let (reference, against) = if label.contains("2 KiB") {
            (challenge, "- the plain challenge page")
        } else {
            (ignored, "- the same bytes in an ignored header")
        };
        let ratio = (row - reference).max(0.0) / challenge;
        let name = label.trim_start_matches("header sizes: ");
        rows.push(at_most(
            &format!("({name} {against}) / challenge page"),
            ratio,
            "<= 2",
            2.0,
        ));
    }
    Ok(rows)
}

/// The policy: its rules compiled into indexes, so the decision costs no more with more rules.
fn policy_rows(scenarios: &mut [Scenario], floor_ns: f64) -> Result<Vec<Row>, String> {
    let paired = paired_ratio(
        scenarios,
        "policy: cookie pass, 100 rules",
        "policy: cookie pass, the short form",
    )?;
    let policy_pass = median_of(scenarios, "policy: cookie pass, 100 rules")?;
    let mut rows = vec![
        at_most(
            "cookie pass, 100 rules / the short form (median of the rounds' ratios)",
            paired,
            "<= 1.05",
            1.05,
        ),
        figure("cookie pass, 100 rules / floor", policy_pass / floor_ns),
    ];
    let one = median_of(scenarios, "policy: unlisted address, 1 rule")?;
    let same_visitor = median_of(scenarios, "policy: unlisted address, 100 rules")?;
    let visitors = median_of(
        scenarios,
        &format!(
            "policy: unlisted address, 100 rules, {} hosts and User-Agents",
            crate::scenarios::VISITORS
        ),
    )?;
    rows.push(figure(
        "unlisted address, 100 rules: a new host and User-Agent each request / the same",
        visitors / same_visitor,
    ));
    // A figure, not a goal: a new visitor costs the automaton and a host hash that the 1-rule
    // row, its values remembered, does not, besides the number of rules.
    rows.push(figure(
        "unlisted address, 100 rules, a new host and User-Agent each request / 1 rule",
        visitors / one,
    ));
    for count in ["100", "1000"] {
        let many = median_of(
            scenarios,
            &format!("policy: unlisted address, {count} rules"),
        )?;
        rows.push(at_most(
            &format!("unlisted address, {count} rules / 1 rule"),
            many / one,
            "<= 1.2",
            1.2,
        ));
    }
    Ok(rows)
}
