//! Metric names (counters unless noted), and the tags of the labelled ones. A labelled
//! metric's name carries its tags as Istio's stats plugin wrote them (`tag=.=value;.;` before
//! the name: istio/proxy 1.17.0 `extensions/stats/plugin.h` 54-55, `plugin.h` 208-218), which
//! the tag extraction Istio renders for each ProxyConfig `extraStatTags` entry takes out as a
//! label (istio/istio 1.30.3 `tools/packaging/common/envoy_bootstrap.json` 121-126): so
//! `rule=.=tor;.;action=.=challenged;.;pow_decisions` is scraped as
//! `pow_decisions{rule="tor",action="challenged"}`. [`TAGS`] is the one list of those tags, which
//! render-edge renders as the gateway's `extraStatTags`.

pub const CHALLENGES_ISSUED: &str = "pow_challenges_issued";
pub const CHALLENGES_SOLVED: &str = "pow_challenges_solved";
pub const PASSED_COOKIE: &str = "pow_passed_cookie";
pub const PASSED_POLICY: &str = "pow_passed_policy";
pub const COOKIE_INVALID: &str = "pow_cookie_invalid";
pub const BYPASSED: &str = "pow_bypassed";
pub const FAIL_OPEN: &str = "pow_fail_open";
/// Requests whose `source.address` was missing or not an address: challenged, each bound
/// to one shared "no address" network.
pub const ADDRESS_UNUSABLE: &str = "pow_address_unusable";
/// Web Bot Auth: a signature of a trusted agent verified.
pub const SIGNATURE_VERIFIED: &str = "pow_signature_verified";
/// Requests that had to pay but whose host is longer than a DNS name can be: answered 400.
pub const HOST_OVERLONG: &str = "pow_host_overlong";
/// Requests passed unchallenged because the secret is missing or too short.
pub const UNPROTECTED: &str = "pow_unprotected";
pub const CONFIG_REJECTED: &str = "pow_config_rejected";
/// Unexpired spent challenges dropped from a full seen-set shard to record a new one.
pub const SEEN_EVICTED: &str = "pow_seen_evicted";
/// Solutions let through without being recorded as spent (the shared data failed or
/// stayed busy).
pub const SEEN_UNRECORDED: &str = "pow_seen_unrecorded";
/// Requests let through signed by a trusted agent (Web Bot Auth).
pub const SIGNED_AGENTS_PASSED: &str = "pow_signed_agents_passed";

/// Labelled counters: each request decided by a rule, by `rule` and `action` (`allowed`,
/// `cleared`, `denied`, `challenged`).
pub const DECISIONS: &str = "pow_decisions";
/// Refused solutions, by `reason`.
pub const VERIFY_FAILED: &str = "pow_verify_failed";
/// Challenged requests from an address in a list, by `list`.
pub const LIST_MATCHES: &str = "pow_list_matches";
/// Web Bot Auth signatures that did not verify, by `reason` (no signature: not counted).
pub const SIGNATURE_UNSIGNED: &str = "pow_signature_unsigned";
/// Verified crawlers let through, by the crawler's `list`.
pub const CRAWLERS_PASSED: &str = "pow_crawlers_passed";

/// Histogram: seconds from a challenge's issue to its accepted solution.
pub const SOLVE_SECONDS: &str = "pow_solve_seconds";

/// Gauges.
pub const SECRET_MISSING: &str = "pow_secret_missing";
pub const LISTS_VERSION: &str = "pow_lists_version";
pub const LISTS_GENERATED_AT: &str = "pow_lists_generated_at_seconds";
pub const LISTS_AGE: &str = "pow_lists_age_seconds";
pub const LISTS_PREFIXES: &str = "pow_lists_prefixes";
/// Prefixes kept per list, by `list`.
pub const LIST_PREFIXES: &str = "pow_list_prefixes";

/// Every metric name above, as Prometheus names it (a histogram adds `_bucket`, `_sum` and
/// `_count`): what the dashboard and the alerts may read.
pub const FAMILIES: &[&str] = &[
    CHALLENGES_ISSUED,
    CHALLENGES_SOLVED,
    PASSED_COOKIE,
    PASSED_POLICY,
    COOKIE_INVALID,
    BYPASSED,
    FAIL_OPEN,
    ADDRESS_UNUSABLE,
    SIGNATURE_VERIFIED,
    HOST_OVERLONG,
    UNPROTECTED,
    CONFIG_REJECTED,
    SEEN_EVICTED,
    SEEN_UNRECORDED,
    SIGNED_AGENTS_PASSED,
    DECISIONS,
    VERIFY_FAILED,
    LIST_MATCHES,
    SIGNATURE_UNSIGNED,
    CRAWLERS_PASSED,
    SOLVE_SECONDS,
    SECRET_MISSING,
    LISTS_VERSION,
    LISTS_GENERATED_AT,
    LISTS_AGE,
    LISTS_PREFIXES,
    LIST_PREFIXES,
];

/// Where an Istio gateway's pod serves its metrics, Envoy's merged with its agent's: the
/// container port `metrics` and the scrape annotations of istiod's gateway template
/// (istio/istio 1.30.3 `manifests/charts/istio-control/istio-discovery/files/
/// kube-gateway.yaml` 53-57 and 109-111; `pilot/cmd/pilot-agent/status/server.go` 398).
/// The demo serves its metrics on the same path and, by default, port.
pub const METRICS_PORT: u16 = 15020;
pub const METRICS_PATH: &str = "/stats/prometheus";

pub const RULE: &str = "rule";
pub const ACTION: &str = "action";
pub const LIST: &str = "list";
pub const REASON: &str = "reason";
/// Every tag a metric name carries: the gateway's `extraStatTags`, in this order.
pub const TAGS: [&str; 4] = [RULE, ACTION, LIST, REASON];
/// Between a tag and its value, and after the value (Istio's `=.=` and `;.;`).
pub const VALUE_SEPARATOR: &str = "=.=";
pub const FIELD_SEPARATOR: &str = ";.;";

/// The name of `family` with these tags (each one of [`TAGS`]).
pub fn tagged(family: &str, tags: &[(&str, &str)]) -> String {
    let mut name = String::with_capacity(
        family.len()
            + tags
                .iter()
                .map(|(t, v)| t.len() + v.len() + 6)
                .sum::<usize>(),
    );
    for (tag, value) in tags {
        name.push_str(tag);
        name.push_str(VALUE_SEPARATOR);
        name.push_str(value);
        name.push_str(FIELD_SEPARATOR);
    }
    name.push_str(family);
    name
}
