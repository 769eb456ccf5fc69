//! What Envoy makes of the metrics a Wasm module defines, up to the text an Istio gateway serves
//! on `/stats/prometheus`: the stand-in the tests and the demo scrape, since Envoy cannot run
//! here. Read in the sources Istio 1.30 ships: istio/istio 1.30.3, Envoy at the stored commits
//! named below (istio/proxy 1.30.3 pins Envoy `4f1e006e`, which is not readable here; the code
//! cited has the same shape in every stored version from 2023 on).
//!
//! 1. The name: `proxy_define_metric` makes the stat `wasmcustom.<name>`
//!    (`source/extensions/common/wasm/context.cc`, `Context::defineMetric` at `b40935ac`: the
//!    scope's `custom_stat_namespace_`, then the module's name).
//! 2. Kept or not: Istio's bootstrap keeps only the stats its `stats_matcher` includes
//!    (`tools/packaging/common/envoy_bootstrap.json` 159-194): the prefixes `reporter=`,
//!    `component`, `istio` and those of `pkg/bootstrap/config.go` 64
//!    (`cluster_manager,listener_manager,server,cluster.xds-grpc,wasm`, plus ProxyConfig's
//!    `proxyStatsMatcher`), the suffixes of line 66, the regex of line 71. `wasm` covers
//!    `wasmcustom.`: a module's metrics pass with no `proxyStatsMatcher`.
//! 3. Tags: every `stats_tags` entry of the bootstrap (`envoy_bootstrap.json` 84-156, one per
//!    ProxyConfig `extraStatTags` entry at 121-126: `(<tag>=\.=(.*?);\.;)`) is searched in the
//!    stat's name (`std::regex_search`: `TagExtractorImplBase::createTagExtractor` defaults to
//!    `Regex::Type::StdRegex`, `source/common/stats/tag_extractor_impl.h`); a match adds the tag,
//!    valued by the second group, and removes the first group from the name
//!    (`tag_extractor_impl.cc`, `TagExtractorStdRegexImpl::extractTag`;
//!    `tag_producer_impl.cc`, `produceTags`, in the configuration's order).
//! 4. The text (`source/server/admin/prometheus_stats.cc`, `outputStatType`, and
//!    `prometheus_stats_formatter.cc` at `de620cf5`): stats grouped by their tag-extracted
//!    name, a `# TYPE` line per group (counters, then gauges, then histograms), each sample as
//!    `name{tags} value` (`{}` when there is none), a blank line after each group; a name in a
//!    registered custom namespace loses it and gets no `envoy_` prefix, every character but
//!    `[a-zA-Z0-9_]` becomes `_`, and a name that would start with a digit is left out; tag
//!    values escape `\`, newline and `"`. Histograms use Envoy's default buckets
//!    (`source/common/stats/histogram_impl.cc`, `HistogramSettingsImpl::defaultBuckets`: Istio
//!    sets `histogram_bucket_settings` only from an annotation), `le` printed as `%.32g`.
//!
//! What differs: Envoy updates a histogram's buckets at each stats flush (every 5 s in Istio);
//! here a sample counts at once, and values are kept exactly (Envoy's log-linear histogram
//! keeps two significant digits, which integers below 100 fit). Of Envoy's own stats, only
//! `server.live` is served (the one the alerts read); the agent's metrics, merged on the same
//! port, are left out.

use regex::Regex;

use crate::abi::metric;
use crate::state::Metric;

/// The namespace Envoy puts a Wasm module's metrics in (`stats_handler.h`,
/// `CustomStatNamespace`), which the Prometheus text strips.
pub const CUSTOM_NAMESPACE: &str = "wasmcustom";

/// Envoy's gauge of a server that is live (1 once it serves: `source/server/server.h`,
/// `ALL_SERVER_STATS`, `GAUGE(live, NeverImport)` at `001692b8`), kept by the stats matcher's
/// `server` prefix (which Istio requires for its readiness checks, `pkg/bootstrap/config.go`
/// 63-64) and served as `envoy_server_live`, outside the custom namespace.
pub const SERVER_LIVE: &str = "server.live";

/// Envoy's default histogram buckets.
pub const DEFAULT_BUCKETS: [f64; 19] = [
    0.5, 1.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0,
    60000.0, 300000.0, 600000.0, 1800000.0, 3600000.0,
];

/// Istio's `stats_tags` before the `extraStatTags` (`envoy_bootstrap.json` 85-120), then after
/// them (127-156), as `(tag name, regex)`. Left out: `http_conn_manager_listener_prefix`, whose
/// look-ahead Rust's regex has not; it is anchored at `^listener`, which no `wasmcustom.` name
/// starts with.
const ISTIO_TAGS_BEFORE: &[(&str, &str)] = &[
    ("cluster_name", r"^cluster(\.(.+);)"),
    (
        "http_conn_manager_prefix",
        r"^http\.(((?:[_.[:digit:]\w]*|[_\[\]aAbBcCdDeEfF[:digit:]\w\:]*));\.)",
    ),
    ("thread_name", r"^server(\.(.+))\.watchdog"),
    ("tcp_prefix", r"^tcp\.((.*?)\.)\w+?$"),
    ("response_code", r"_rq(_(\d{3}))$"),
    ("response_code_class", r"_rq(_(\dxx))$"),
    (
        "listener_address",
        r"^listener\.(((?:[_.[:digit:]]*|[_\[\]aAbBcCdDeEfF[:digit:]]*))\.)",
    ),
    (
        "mongo_prefix",
        r"^mongo\.(.+?)\.(collection|cmd|cx_|op_|delays_|decoding_)(.*?)$",
    ),
];
const ISTIO_TAGS_AFTER: &[(&str, &str)] = &[
    ("cache", r"(cache\.(.+?)\.)"),
    ("component", r"(component\.(.+?)\.)"),
    ("tag", r"(tag\.(.+?);\.)"),
    ("wasm_filter", r"(wasm_filter\.(.+?)\.)"),
    ("authz_enforce_result", r"rbac(\.(allowed|denied))"),
    ("authz_dry_run_action", r"(\.istio_dry_run_(allow|deny)_)"),
    ("authz_dry_run_result", r"(\.shadow_(allowed|denied))"),
];

/// The stats matcher's inclusion list, as Istio renders it with no annotation and no
/// `proxyStatsMatcher` (`envoy_bootstrap.json` 159-194, `pkg/bootstrap/config.go` 64-71).
const INCLUDED_PREFIXES: &[&str] = &[
    "reporter=",
    "cluster_manager",
    "listener_manager",
    "server",
    "cluster.xds-grpc",
    "wasm",
    "component",
    "istio",
];
const INCLUDED_SUFFIXES: &[&str] = &[
    "rbac.allowed",
    "rbac.denied",
    "shadow_allowed",
    "shadow_denied",
];
const INCLUDED_REGEX: &str = r"^vhost\..*\.route\..*$";

/// Envoy's tag extraction and stats matcher as an Istio gateway's bootstrap sets them up.
#[derive(Debug)]
pub struct IstioStats {
    extractors: Vec<(String, Regex)>,
    included: Regex,
}

/// A `stats_tags` regex that does not compile: a bug of this table.
#[derive(Debug, thiserror::Error)]
#[error("the stats_tags regex of {tag} does not compile: {message}")]
pub struct TagError {
    tag: String,
    message: String,
}

impl IstioStats {
    /// With these ProxyConfig `extraStatTags`, in their order.
    pub fn new(extra_stat_tags: &[&str]) -> Result<IstioStats, TagError> {
        let extra: Vec<(String, String)> = extra_stat_tags
            .iter()
            .map(|tag| ((*tag).to_owned(), format!(r"({tag}=\.=(.*?);\.;)")))
            .collect();
        let fixed = |list: &[(&str, &str)]| -> Vec<(String, String)> {
            list.iter()
                .map(|(t, r)| ((*t).to_owned(), (*r).to_owned()))
                .collect()
        };
        let mut extractors = Vec::new();
        for (tag, pattern) in fixed(ISTIO_TAGS_BEFORE)
            .into_iter()
            .chain(extra)
            .chain(fixed(ISTIO_TAGS_AFTER))
        {
            let regex = Regex::new(&pattern).map_err(|e| TagError {
                tag: tag.clone(),
                message: e.to_string(),
            })?;
            extractors.push((tag, regex));
        }
        let included = Regex::new(INCLUDED_REGEX).map_err(|e| TagError {
            tag: "stats_matcher".to_owned(),
            message: e.to_string(),
        })?;
        Ok(IstioStats {
            extractors,
            included,
        })
    }

    /// Whether the stats matcher keeps a stat of this full name.
    pub fn included(&self, full_name: &str) -> bool {
        INCLUDED_PREFIXES.iter().any(|p| full_name.starts_with(p))
            || INCLUDED_SUFFIXES.iter().any(|s| full_name.ends_with(s))
            || self.included.is_match(full_name)
    }

    /// The tags and the tag-extracted name of a stat.
    pub fn extract(&self, full_name: &str) -> (Vec<(String, String)>, String) {
        let mut tags = Vec::new();
        let mut removed: Vec<(usize, usize)> = Vec::new();
        for (tag, regex) in &self.extractors {
            let Some(caps) = regex.captures(full_name) else {
                continue;
            };
            let Some(remove) = caps.get(1) else { continue };
            let value = caps.get(2).unwrap_or(remove);
            tags.push((tag.clone(), value.as_str().to_owned()));
            removed.push((remove.start(), remove.end()));
        }
        let name: String = full_name
            .char_indices()
            .filter(|(i, _)| !removed.iter().any(|(s, e)| (*s..*e).contains(i)))
            .map(|(_, c)| c)
            .collect();
        (tags, name)
    }

    /// The `/stats/prometheus` text of these metrics, each defined by the module as `name`,
    /// after Envoy's own [`SERVER_LIVE`] (of all of Envoy's stats, the one the alerts read).
    pub fn prometheus(&self, metrics: &[Metric]) -> String {
        let live = Metric {
            name: SERVER_LIVE.to_owned(),
            kind: metric::GAUGE,
            value: 1,
            histogram: None,
        };
        let mut samples: Vec<Sample<'_>> = Vec::new();
        if self.included(SERVER_LIVE) {
            samples.push(Sample {
                metric: &live,
                full: SERVER_LIVE.to_owned(),
                name: format!("envoy_{}", sanitize(SERVER_LIVE)),
                tags: Vec::new(),
            });
        }
        for m in metrics {
            let full = format!("{CUSTOM_NAMESPACE}.{}", m.name);
            if !self.included(&full) {
                continue;
            }
            let (tags, extracted) = self.extract(&full);
            let Some(name) = metric_name(&extracted) else {
                continue;
            };
            samples.push(Sample {
                metric: m,
                full,
                name,
                tags,
            });
        }
        let mut out = String::new();
        for (kind, type_name) in [
            (metric::COUNTER, "counter"),
            (metric::GAUGE, "gauge"),
            (metric::HISTOGRAM, "histogram"),
        ] {
            let mut of_kind: Vec<&Sample<'_>> =
                samples.iter().filter(|s| s.metric.kind == kind).collect();
            of_kind.sort_by(|a, b| (&a.name, &a.full).cmp(&(&b.name, &b.full)));
            let mut previous: Option<&str> = None;
            for sample in of_kind {
                if previous != Some(sample.name.as_str()) {
                    if previous.is_some() {
                        out.push('\n');
                    }
                    out.push_str(&format!("# TYPE {} {type_name}\n", sample.name));
                    previous = Some(&sample.name);
                }
                sample.write(&mut out);
            }
            if previous.is_some() {
                out.push('\n');
            }
        }
        out
    }
}

/// One stat on its way to the text.
struct Sample<'m> {
    metric: &'m Metric,
    full: String,
    name: String,
    tags: Vec<(String, String)>,
}

impl Sample<'_> {
    fn write(&self, out: &mut String) {
        let tags = formatted_tags(&self.tags);
        let Some(histogram) = &self.metric.histogram else {
            out.push_str(&format!("{}{{{tags}}} {}\n", self.name, self.metric.value));
            return;
        };
        let prefix = if tags.is_empty() {
            String::new()
        } else {
            format!("{tags},")
        };
        for (bound, count) in DEFAULT_BUCKETS.iter().zip(&histogram.cumulative) {
            out.push_str(&format!(
                "{}_bucket{{{prefix}le=\"{bound}\"}} {count}\n",
                self.name
            ));
        }
        out.push_str(&format!(
            "{}_bucket{{{prefix}le=\"+Inf\"}} {}\n",
            self.name, histogram.count
        ));
        out.push_str(&format!("{}_sum{{{tags}}} {}\n", self.name, histogram.sum));
        out.push_str(&format!(
            "{}_count{{{tags}}} {}\n",
            self.name, histogram.count
        ));
    }
}

/// `PrometheusStatsFormatter::metricName` for a name in the custom namespace.
fn metric_name(extracted: &str) -> Option<String> {
    let stripped = extracted.strip_prefix(&format!("{CUSTOM_NAMESPACE}."))?;
    let name = sanitize(stripped);
    (!name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit())).then_some(name)
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn formatted_tags(tags: &[(String, String)]) -> String {
    tags.iter()
        .map(|(name, value)| {
            let value = value
                .replace('\\', r"\\")
                .replace('\n', r"\n")
                .replace('"', "\\\"");
            format!("{}=\"{value}\"", sanitize(name))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// A histogram's samples as Envoy exports them: how many are at most each default bucket, their
/// sum and their count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    pub cumulative: Vec<u64>,
    pub sum: u64,
    pub count: u64,
}

impl Histogram {
    pub fn record(&mut self, value: u64) {
        if self.cumulative.is_empty() {
            self.cumulative = vec![0; DEFAULT_BUCKETS.len()];
        }
        for (bound, count) in DEFAULT_BUCKETS.iter().zip(self.cumulative.iter_mut()) {
            if value as f64 <= *bound {
                *count += 1;
            }
        }
        self.sum = self.sum.saturating_add(value);
        self.count += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(name: &str, value: i64) -> Metric {
        Metric {
            name: name.to_owned(),
            kind: metric::COUNTER,
            value,
            histogram: None,
        }
    }

    #[test]
    fn tags_come_out_of_the_name_in_the_extra_stat_tags_order() {
        let stats = IstioStats::new(&["rule", "action"]).unwrap();
        let text = stats.prometheus(&[
            counter("rule=.=list.tor;.;action=.=challenged;.;pow_decisions", 3),
            counter("action=.=allowed;.;rule=.=default;.;pow_decisions", 5),
            counter("pow_fail_open", 0),
        ]);
        assert_eq!(
            text,
            "# TYPE pow_decisions counter\n\
             pow_decisions{rule=\"default\",action=\"allowed\"} 5\n\
             pow_decisions{rule=\"list.tor\",action=\"challenged\"} 3\n\
             \n\
             # TYPE pow_fail_open counter\n\
             pow_fail_open{} 0\n\
             \n\
             # TYPE envoy_server_live gauge\n\
             envoy_server_live{} 1\n\
             \n"
        );
    }

    #[test]
    fn a_tag_not_listed_stays_in_the_name_sanitised() {
        let stats = IstioStats::new(&["rule"]).unwrap();
        let text = stats.prometheus(&[counter("reason=.=mac;.;pow_verify_failed", 1)]);
        assert!(
            text.contains("reason___mac___pow_verify_failed{} 1"),
            "{text}"
        );
    }

    #[test]
    fn istio_own_extractors_never_take_a_part_of_a_value() {
        let stats = IstioStats::new(&["rule", "list"]).unwrap();
        // Names Istio's own extractors look for: `=.=` and `;.;` keep a `.` from touching them.
        for value in [
            "shadow_allowed",
            "istio_dry_run_allow_x",
            "cache",
            "list.component",
        ] {
            let full = format!("wasmcustom.rule=.={value};.;pow_decisions");
            let (tags, name) = stats.extract(&full);
            assert_eq!(name, "wasmcustom.pow_decisions", "{value}");
            assert_eq!(tags, [("rule".to_owned(), value.to_owned())]);
        }
    }

    #[test]
    fn a_histogram_has_envoys_default_buckets() {
        let mut histogram = Histogram::default();
        for v in [1, 3, 40] {
            histogram.record(v);
        }
        let stats = IstioStats::new(&[]).unwrap();
        let text = stats.prometheus(&[Metric {
            name: "pow_solve_seconds".to_owned(),
            kind: metric::HISTOGRAM,
            value: 0,
            histogram: Some(histogram),
        }]);
        assert!(
            text.contains("\n\n# TYPE pow_solve_seconds histogram\n"),
            "{text}"
        );
        assert!(
            text.contains("pow_solve_seconds_bucket{le=\"0.5\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("pow_solve_seconds_bucket{le=\"5\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("pow_solve_seconds_bucket{le=\"50\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("pow_solve_seconds_bucket{le=\"3600000\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("pow_solve_seconds_bucket{le=\"+Inf\"} 3\n"),
            "{text}"
        );
        assert!(text.contains("pow_solve_seconds_sum{} 44\npow_solve_seconds_count{} 3\n"));
    }

    #[test]
    fn only_what_the_stats_matcher_includes_is_served() {
        let stats = IstioStats::new(&[]).unwrap();
        assert!(stats.included("wasmcustom.pow_fail_open"));
        assert!(stats.included("vhost.x.route.y"));
        assert!(!stats.included("http.inbound.downstream_rq_total"));
    }
}
