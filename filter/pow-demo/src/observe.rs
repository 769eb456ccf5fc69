//! The demo's metrics, on a loopback port of their own: `/stats/prometheus`, the text an Istio
//! gateway's pod serves (`proxy_wasm_host::envoy_stats`, with the tags the edge renders as
//! `extraStatTags`), and `/`, a small live page of the same numbers, rendered from that text.

use std::sync::{Arc, Mutex};

use pow_core::filter::metric;
use proxy_wasm_host::Response;
use proxy_wasm_host::envoy_stats::IstioStats;

use crate::Edge;
use crate::http1::{HttpRequest, text as text_response};

/// The content type of Prometheus's text format, as Envoy's admin serves it.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The stats setup of the edge's gateway: Istio's, with the filter's tags extracted.
pub(crate) fn gateway_stats() -> Option<IstioStats> {
    IstioStats::new(&metric::TAGS).ok()
}

/// Serves the metrics endpoint and the live page from the edge's VM.
pub(crate) fn serve(edge: &Arc<Mutex<Edge>>, stats: &IstioStats, req: &HttpRequest) -> Response {
    let path = req.target.split('?').next().unwrap_or("");
    let text = match edge.lock() {
        Ok(edge) => edge.host.prometheus(stats),
        Err(_) => return text_response(502, "the filter failed earlier\n"),
    };
    match path {
        metric::METRICS_PATH => Response {
            status: 200,
            headers: vec![("content-type".to_owned(), PROMETHEUS_TEXT.to_owned())],
            body: text.into_bytes(),
        },
        "/" => Response {
            status: 200,
            headers: vec![
                (
                    "content-type".to_owned(),
                    "text/html; charset=utf-8".to_owned(),
                ),
                ("cache-control".to_owned(), "no-store".to_owned()),
                (
                    "content-security-policy".to_owned(),
                    "default-src 'none'; style-src 'unsafe-inline'".to_owned(),
                ),
            ],
            body: live_page(&samples(&text)).into_bytes(),
        },
        _ => text_response(404, "not found: try / or /stats/prometheus\n"),
    }
}

/// One line of the text: the metric's name, its labels as written, its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: String,
    pub value: f64,
}

impl Sample {
    /// `name{labels}`, as the text writes it: what the page marks each number with.
    pub fn series(&self) -> String {
        format!("{}{{{}}}", self.name, self.labels)
    }
}

/// The samples of a Prometheus text (comments and blank lines skipped).
pub fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|line| {
            let open = line.find('{')?;
            let close = line.rfind('}')?;
            Some(Sample {
                name: line.get(..open)?.to_owned(),
                labels: line.get(open + 1..close)?.to_owned(),
                value: line.get(close + 1..)?.trim().parse().ok()?,
            })
        })
        .collect()
}

/// The sections of the page: a title and the metrics shown under it.
const SECTIONS: &[(&str, &[&str])] = &[
    (
        "Challenges",
        &[
            metric::CHALLENGES_ISSUED,
            metric::CHALLENGES_SOLVED,
            "pow_solve_seconds_count",
            "pow_solve_seconds_sum",
        ],
    ),
    ("Decisions", &[metric::DECISIONS]),
    ("Refused solutions", &[metric::VERIFY_FAILED]),
    (
        "Health",
        &[
            metric::FAIL_OPEN,
            metric::UNPROTECTED,
            metric::SECRET_MISSING,
            metric::CONFIG_REJECTED,
        ],
    ),
    (
        "Lists",
        &[
            metric::LIST_PREFIXES,
            metric::LIST_MATCHES,
            metric::LISTS_AGE,
        ],
    ),
    (
        "Crawlers and signed agents let through",
        &[metric::CRAWLERS_PASSED, metric::SIGNED_AGENTS_PASSED],
    ),
];

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The live page: each section's samples as rows, each number marked with its series.
pub fn live_page(samples: &[Sample]) -> String {
    let mut body = String::new();
    for (title, names) in SECTIONS {
        let rows: Vec<&Sample> = samples
            .iter()
            .filter(|s| names.contains(&s.name.as_str()))
            .collect();
        if rows.is_empty() {
            continue;
        }
        body.push_str(&format!("<h2>{}</h2>\n<table>\n", escape(title)));
        for s in rows {
            body.push_str(&format!(
                "<tr><th>{}</th><td>{}</td><td class=\"n\" data-series=\"{}\">{}</td></tr>\n",
                escape(&s.name),
                escape(&s.labels.replace(',', ", ")),
                escape(&s.series()),
                s.value
            ));
        }
        body.push_str("</table>\n");
    }
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="2">
<title>edgepop demo: the filter's numbers</title>
<style>
  body {{ font-family: system-ui, sans-serif; margin: 1.5rem; color: #1d2a33; }}
  h1 {{ font-size: 1.3rem; }} h2 {{ font-size: 1rem; margin: 1.2rem 0 .3rem; }}
  table {{ border-collapse: collapse; min-width: 32rem; }}
  th, td {{ text-align: left; padding: .15rem .6rem; border-bottom: 1px solid #e3e8ec; font-weight: normal; }}
  th {{ font-family: monospace; }} td.n {{ text-align: right; font-variant-numeric: tabular-nums; }}
</style></head>
<body>
<h1>The filter's numbers, live</h1>
<p>What <a href="{path}">{path}</a> serves, as Prometheus scrapes it; this page reloads every 2 s.</p>
{body}</body></html>
"#,
        path = metric::METRICS_PATH
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_shows_each_sample_marked_with_its_series() {
        let text = "# TYPE pow_decisions counter\n\
                    pow_decisions{rule=\"list.tor\",action=\"challenged\"} 3\n\
                    \n\
                    # TYPE pow_fail_open counter\n\
                    pow_fail_open{} 0\n";
        let samples = samples(text);
        assert_eq!(samples.len(), 2);
        assert_eq!(
            samples[0].series(),
            "pow_decisions{rule=\"list.tor\",action=\"challenged\"}"
        );
        let page = live_page(&samples);
        assert!(page.contains(
            "data-series=\"pow_decisions{rule=&quot;list.tor&quot;,action=&quot;challenged&quot;}\">3<"
        ));
        assert!(page.contains("data-series=\"pow_fail_open{}\">0<"));
    }
}
