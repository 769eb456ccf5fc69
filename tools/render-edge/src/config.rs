//! The edge config (`--config`), and its resolution with the platform inputs into a [`Plan`].
//!
//! Decoding refuses unknown keys (a typo must not pass silently); [`resolve`] then checks every
//! rule that decoding cannot express and names the field and the file when one is broken.

use std::path::{Path, PathBuf};

use lists_core::records::{
    AgentSource, DEFAULT_MAX_SHRINK_PERCENT, DEFAULT_TIMEOUT_SECONDS, ListGenerator, ListSource,
    ListSources,
};
use pop_common::input::{InputError, read_json};
use pop_common::records::{Digest, EdgeNode, PlatformInputs, PublishedImages};
use serde::Deserialize;
use serde_json::{Map, Value};

mod hostnames;
mod lists;

/// The edge layer's settings, as written by the operator (`config/edge.json`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeConfig {
    /// Not where the edge's names are declared: those are the infra config's `edge_hostnames`,
    /// which get the DNS records and reach this tool through the platform inputs. Read only to
    /// refuse a list that differs from them, by name, rather than as an unknown field.
    #[serde(default)]
    pub hostnames: Option<Vec<String>>,
    /// The Let's Encrypt issuer.
    #[serde(default)]
    pub acme: AcmeConfig,
    /// The demo origin behind the gateway.
    #[serde(default)]
    pub origin: OriginConfig,
    /// Whether the proof-of-work filter runs in the gateway. Off by default.
    #[serde(default)]
    pub pow_enabled: bool,
    /// The filter's module and settings; required when `pow_enabled` is true.
    #[serde(default)]
    pub pow: Option<PowConfig>,
    /// Where the edge's images are published, and the record of what was.
    #[serde(default)]
    pub images: Option<ImagesConfig>,
    /// How the cluster's Prometheus finds the gateway's metrics.
    #[serde(default)]
    pub monitoring: Monitoring,
}

/// How the cluster's Prometheus finds the gateway's metrics: by the scrape annotations istiod
/// puts on the gateway's pods (nothing rendered), or, on a cluster that serves the Prometheus
/// Operator's `monitoring.coreos.com` API, by a PodMonitor, with the alerts as a
/// PrometheusRule. Nothing is installed either way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Monitoring {
    #[default]
    Annotations,
    PrometheusOperator,
}

/// The registry the images are pushed to, and the record `make publish-images` wrote.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImagesConfig {
    /// `host/namespace`, such as `rg.fr-par.scw.cloud/edgepop` (read by `oci-image publish`).
    pub registry: String,
    /// The PublishedImages record, relative to this config file's directory.
    #[serde(default)]
    pub published: Option<PathBuf>,
}

pub use pop_common::acme::{AcmeConfig, AcmeServer};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OriginConfig {
    #[serde(default = "default_replicas")]
    pub replicas: u32,
    /// The text the demo origin answers with.
    #[serde(default = "default_origin_text")]
    pub text: String,
}

impl Default for OriginConfig {
    fn default() -> Self {
        OriginConfig {
            replicas: default_replicas(),
            text: default_origin_text(),
        }
    }
}

fn default_replicas() -> u32 {
    2
}

fn default_origin_text() -> String {
    "You reached the origin behind the edgepop gateway.".to_string()
}

/// The proof-of-work filter: where its module is, and its settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowConfig {
    /// Where the gateway fetches the module, instead of the published image: a digest-pinned
    /// `oci://host/repo@sha256:<hex>`, or an `https://` URL of the .wasm file.
    pub url: Option<String>,
    /// With an `https://` url, the module's sha256 as `make filter` prints it; with `oci://`,
    /// the manifest digest (optional: taken from the url).
    pub sha256: Option<String>,
    /// The Secret holding the HMAC keys (`current`, `previous`), created at apply time.
    #[serde(default = "default_secret_name")]
    pub secret_name: String,
    /// The filter's pluginConfig (mode, difficulties, bypass paths, ...). The `lists` key is
    /// written by the hourly refresh and `demo_secret` is for the local demo only: both are
    /// refused here.
    #[serde(default)]
    pub plugin_config: Map<String, Value>,
    /// Which policy lists the hourly refresh regenerates, and from where.
    #[serde(default)]
    pub lists: ListsConfig,
    /// The Web Bot Auth agents trusted, each by its key directory's https URL (or its keys
    /// inline): the hourly refresh fetches the directories and delivers the keys with the lists.
    #[serde(default)]
    pub agents: Vec<AgentSource>,
}

/// The policy lists' sources (rendered into the `lists-sources` ConfigMap the CronJob reads).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListsConfig {
    #[serde(default = "default_max_shrink_percent")]
    pub max_shrink_percent: u8,
    #[serde(default = "default_timeout_seconds")]
    pub timeout_seconds: u32,
    #[serde(default = "default_lists")]
    pub sources: Vec<ListSource>,
}

impl Default for ListsConfig {
    fn default() -> Self {
        ListsConfig {
            max_shrink_percent: default_max_shrink_percent(),
            timeout_seconds: default_timeout_seconds(),
            sources: default_lists(),
        }
    }
}

// The defaults are ListSources' own (lists-core owns them): the same values whether the
// config, the CronJob's record or a generator's flag leaves them out.
fn default_max_shrink_percent() -> u8 {
    DEFAULT_MAX_SHRINK_PERCENT
}

fn default_timeout_seconds() -> u32 {
    DEFAULT_TIMEOUT_SECONDS
}

/// Tor exits from the Tor Project's bulk list, and the hosting providers whose address space
/// serves most scrapers (OVH, Linode, DigitalOcean, Google Cloud, Amazon, Facebook, Microsoft,
/// DigitalOcean's second AS, Vultr, Cloudflare), from iptoasn's daily dataset.
fn default_lists() -> Vec<ListSource> {
    vec![
        ListSource {
            name: "tor".to_string(),
            generator: ListGenerator::Tor,
            sources: vec!["https://check.torproject.org/torbulkexitlist".to_string()],
            format: None,
            asns: Vec::new(),
            tokens: Vec::new(),
        },
        ListSource {
            name: "hosting".to_string(),
            generator: ListGenerator::Asn,
            sources: vec!["https://iptoasn.com/data/ip2asn-combined.tsv.gz".to_string()],
            format: None,
            tokens: Vec::new(),
            asns: vec![
                16276, 24940, 14061, 12876, 16509, 396982, 8075, 63949, 20473, 13335,
            ],
        },
    ]
}

fn default_secret_name() -> String {
    "pow-hmac".to_string()
}

/// The most hostnames the edge serves (the platform inputs' own limit, where it is explained).
pub const MAX_HOSTNAMES: usize = pop_common::records::MAX_EDGE_HOSTNAMES;
/// The longest name of a Kubernetes object or of a Gateway listener: a DNS subdomain, 253
/// characters (apimachinery's `DNS1123SubdomainMaxLength`; the Gateway API's `SectionName` and
/// `ObjectName`, `maxLength: 253`).
pub const MAX_NAME: usize = 253;

/// Everything the renderer needs, checked and resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub cluster_name: String,
    /// The nodes that receive the public traffic (the platform inputs' `edge_nodes`, at least
    /// one): a gateway runs on each.
    pub edge_nodes: Vec<EdgeNode>,
    /// The public names served, each with its own HTTPS listener and certificate (HTTP-01
    /// gives no wildcard): the platform inputs' `edge_hostnames`, in their order.
    pub hostnames: Vec<String>,
    pub acme_server: AcmeServer,
    pub acme_email: Option<String>,
    pub origin_replicas: u32,
    pub origin_text: String,
    /// The demo origin's image, from its pin in `k8s/versions.env`.
    pub origin_image: String,
    pub pow: Option<PowPlan>,
    pub monitoring: Monitoring,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PowPlan {
    /// Where the gateway fetches the module: a digest-pinned `oci://` reference or `https://`.
    pub url: String,
    /// For `oci://`, the image's manifest digest (what Istio compares, imagefetcher.go
    /// `PrepareFetch`); for `https://`, the module's own sha256.
    pub sha256: String,
    /// The CronJob's image, `repository@sha256:<digest>`.
    pub lists_refresh_image: String,
    pub secret_name: String,
    pub plugin_config: Map<String, Value>,
    pub lists: ListSources,
}

/// Checks the config against the inputs and resolves it into a [`Plan`] with the pinned image of
/// the origin. `config_path` and `inputs_path` only name the files in errors.
pub fn resolve(
    inputs: &PlatformInputs,
    inputs_path: &Path,
    config: EdgeConfig,
    config_path: &Path,
    origin_image: &str,
) -> Result<Plan, InputError> {
    let zone = inputs.dns_zone.trim_end_matches('.').to_ascii_lowercase();
    if let Err(why) = check_dns_name(&zone) {
        return Err(InputError::field(inputs_path, "dns_zone", why));
    }
    let hostnames = hostnames::served(inputs, inputs_path, &zone)?;
    hostnames::check_config(
        config.hostnames.as_deref(),
        config_path,
        &hostnames,
        inputs_path,
    )?;

    let email = config.acme.email.filter(|e| !e.trim().is_empty());
    if let Some(email) = &email
        && !looks_like_email(email)
    {
        return Err(InputError::field(
            config_path,
            "acme.email",
            format!("`{email}` is not an email address"),
        ));
    }
    if config.acme.server == AcmeServer::Production && email.is_none() {
        return Err(InputError::field(
            config_path,
            "acme.email",
            "the production issuer needs an email (Let's Encrypt sends expiry notices there)",
        ));
    }
    if config.origin.replicas == 0 {
        return Err(InputError::field(
            config_path,
            "origin.replicas",
            "must be at least 1: the routes would lead nowhere",
        ));
    }
    if i32::try_from(config.origin.replicas).is_err() {
        return Err(InputError::field(
            config_path,
            "origin.replicas",
            format!(
                "{} is more than a Deployment takes (its replicas is a 32-bit integer, at most {})",
                config.origin.replicas,
                i32::MAX
            ),
        ));
    }

    let pow = match (config.pow_enabled, config.pow) {
        (false, _) => None,
        (true, None) => {
            return Err(InputError::field(
                config_path,
                "pow",
                "pow_enabled is true but there is no `pow` section",
            ));
        }
        (true, Some(pow)) => Some(resolve_pow(pow, config_path, config.images.as_ref())?),
    };

    Ok(Plan {
        cluster_name: inputs.cluster_name.clone(),
        edge_nodes: inputs.edge_nodes.clone(),
        hostnames,
        acme_server: config.acme.server,
        acme_email: email,
        origin_replicas: config.origin.replicas,
        origin_text: config.origin.text,
        origin_image: origin_image.to_owned(),
        pow,
        monitoring: config.monitoring,
    })
}

fn resolve_pow(
    pow: PowConfig,
    config_path: &Path,
    images: Option<&ImagesConfig>,
) -> Result<PowPlan, InputError> {
    // The CronJob's image is only ever rendered pinned by digest, so the record is required.
    let published = match images.and_then(|i| i.published.as_ref()) {
        Some(path) => read_published(config_path, path, images)?,
        None => {
            return Err(InputError::field(
                config_path,
                "images.published",
                "required when pow_enabled is true: the PublishedImages record `make \
                 publish-images` writes, which pins the filter and lists-refresh images by digest",
            ));
        }
    };
    let (url, sha256) = filter_source(&pow, config_path, &published)?;
    if let Err(why) = check_dns_label_or_subdomain(&pow.secret_name) {
        return Err(InputError::field(
            config_path,
            "pow.secret_name",
            format!("`{}`: {why}", pow.secret_name),
        ));
    }
    for (key, why) in [
        (
            "lists",
            "the hourly refresh owns the lists; a config that carried them would revert it",
        ),
        (
            "agents",
            "the hourly refresh delivers the agents' keys from their directories: name the \
             agents in pow.agents",
        ),
        (
            "demo_secret",
            "a secret in the WasmPlugin would be readable by anyone who can read the object; \
             the secret reaches the proxy from the Secret at apply time",
        ),
        (
            "acme_bypass",
            "the filter runs on the HTTPS listener only and HTTP-01 arrives on port 80: \
             render-edge turns the built-in ACME bypass off",
        ),
        (
            "secret_env",
            "the secret's variable names are fixed by the gateway overlay render-edge writes",
        ),
        (
            "previous_secret_env",
            "the secret's variable names are fixed by the gateway overlay render-edge writes",
        ),
    ] {
        if pow.plugin_config.contains_key(key) {
            return Err(InputError::field(
                config_path,
                format!("pow.plugin_config.{key}"),
                format!("not allowed here: {why}"),
            ));
        }
    }
    // The filter's own decoder checks the rest: a config the filter would refuse at
    // on_configure (and so fail open in production) is refused here, before any apply.
    let filter_config = serde_json::to_vec(&pow.plugin_config)
        .map_err(|e| InputError::field(config_path, "pow.plugin_config", e))?;
    let decoded = pow_core::config::PluginConfig::from_json(&filter_config).map_err(|e| {
        InputError::field(
            config_path,
            format!("pow.plugin_config.{}", e.field.trim_start_matches('.')),
            e.message,
        )
    })?;
    let lists = lists::record(pow.lists, pow.agents, &decoded, config_path)?;
    let mut plugin_config = pow.plugin_config;
    // HTTP-01 arrives on port 80, where the filter does not run (the WasmPlugin matches the
    // HTTPS listener): on 443 the ACME path would only pass requests to the origin unchallenged.
    plugin_config.insert("acme_bypass".to_owned(), Value::Bool(false));
    Ok(PowPlan {
        url,
        sha256,
        lists_refresh_image: published.lists_refresh.pinned(),
        secret_name: pow.secret_name,
        plugin_config,
        lists,
    })
}

/// Reads the PublishedImages record named by `images.published` (relative to the config), and
/// checks it was published to the configured registry.
fn read_published(
    config_path: &Path,
    path: &Path,
    images: Option<&ImagesConfig>,
) -> Result<PublishedImages, InputError> {
    let path = match config_path.parent() {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path.to_path_buf(),
    };
    let record: PublishedImages = read_json(&path)?;
    if let Some(images) = images {
        let registry = images.registry.trim_end_matches('/');
        if record.registry != registry {
            return Err(InputError::field(
                &path,
                "registry",
                format!(
                    "`{}` is not the edge config's images.registry `{registry}` ({}): \
                     publish again (make publish-images)",
                    record.registry,
                    config_path.display()
                ),
            ));
        }
    }
    record
        .check_repositories()
        .map_err(|(field, why)| InputError::field(&path, field, why))?;
    Ok(record)
}

/// The WasmPlugin's `url` and `sha256`: the published image unless `pow.url` names another
/// source. What Istio checks `sha256` against depends on the scheme (pkg/wasm: the manifest
/// digest for `oci://`, the file's hash for `https://`), so each scheme is pinned its own way.
fn filter_source(
    pow: &PowConfig,
    config_path: &Path,
    published: &PublishedImages,
) -> Result<(String, String), InputError> {
    let url = match pow.url.as_deref().map(str::trim).filter(|u| !u.is_empty()) {
        Some(url) => url,
        None => {
            if let Some(sha) = &pow.sha256 {
                return Err(InputError::field(
                    config_path,
                    "pow.sha256",
                    format!(
                        "`{sha}` without pow.url: the published filter's digest comes from \
                         images.published; remove it"
                    ),
                ));
            }
            return Ok((
                format!("oci://{}", published.filter.pinned()),
                published.filter.digest.hex().to_string(),
            ));
        }
    };
    let field = |why: String| InputError::field(config_path, "pow.url", why);
    if url.starts_with("file://") {
        return Err(field(format!(
            "`{url}`: a file:// module must be copied onto every gateway node by hand, outside \
             any pin or rollout; publish it (make publish-images) and leave pow.url out"
        )));
    }
    if url.starts_with("http://") {
        return Err(field(format!(
            "`{url}`: plain http lets anyone on the path swap the module, and a module that \
             fails its sha256 check is skipped (FAIL_OPEN: no challenge at all); use https://"
        )));
    }
    if let Some(reference) = url.strip_prefix("oci://") {
        return oci_source(pow, config_path, url, reference);
    }
    if !url.starts_with("https://") {
        return Err(field(format!("`{url}` must start with oci:// or https://")));
    }
    https_source(pow, config_path, url)
}

/// An `oci://` module: pinned by the manifest digest in its reference, which `pow.sha256`, when
/// given, must repeat.
fn oci_source(
    pow: &PowConfig,
    config_path: &Path,
    url: &str,
    reference: &str,
) -> Result<(String, String), InputError> {
    let field = |why: String| InputError::field(config_path, "pow.url", why);
    let Some((name, digest)) = reference.rsplit_once('@') else {
        return Err(field(format!(
            "`{url}` is not pinned by digest: Istio compares sha256 with the image's manifest \
             digest, and a tag can move; write oci://<repository>@sha256:<digest>, or leave \
             pow.url out to use the published image"
        )));
    };
    if !name.contains('/') || name.starts_with('/') || name.ends_with('/') {
        return Err(field(format!(
            "`{url}`: `{name}` is not a registry/repository name"
        )));
    }
    let digest = Digest::parse(digest).map_err(field)?;
    if let Some(sha) = &pow.sha256
        && sha.to_ascii_lowercase() != digest.hex()
    {
        return Err(InputError::field(
            config_path,
            "pow.sha256",
            format!(
                "`{sha}` differs from the digest in pow.url: for oci:// Istio compares \
                 sha256 with the manifest digest"
            ),
        ));
    }
    Ok((url.to_string(), digest.hex().to_string()))
}

/// An `https://` module: pinned by the file's own sha256, which `pow.sha256` must give.
fn https_source(
    pow: &PowConfig,
    config_path: &Path,
    url: &str,
) -> Result<(String, String), InputError> {
    let sha256 = match &pow.sha256 {
        Some(sha) => sha,
        None => {
            return Err(InputError::field(
                config_path,
                "pow.sha256",
                "required with an https:// url: the module's sha256, as `make filter` prints it",
            ));
        }
    };
    if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(InputError::field(
            config_path,
            "pow.sha256",
            format!("`{sha256}` is not 64 hexadecimal characters"),
        ));
    }
    Ok((url.to_string(), sha256.to_ascii_lowercase()))
}

/// A DNS name the Gateway API accepts as a listener hostname, without wildcard.
pub fn check_dns_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty name".to_string());
    }
    if name.starts_with("*.") {
        return Err(
            "wildcards cannot be served: HTTP-01 issues no wildcard certificate".to_string(),
        );
    }
    if name.len() > 253 {
        return Err("longer than 253 characters".to_string());
    }
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err("must be lower case".to_string());
    }
    let labels: Vec<&str> = name.split('.').collect();
    if labels.len() < 2 {
        return Err("not a fully qualified name (needs at least one dot)".to_string());
    }
    for label in labels {
        check_label(label)?;
    }
    Ok(())
}

fn check_label(label: &str) -> Result<(), String> {
    if label.is_empty() {
        return Err("has an empty label (two dots in a row, or a dot at an end)".to_string());
    }
    if label.len() > 63 {
        return Err(format!("label `{label}` is longer than 63 characters"));
    }
    if !label
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(format!(
            "label `{label}` may hold only a-z, 0-9 and '-' (use the punycode form of an IDN)"
        ));
    }
    if label.starts_with('-') || label.ends_with('-') {
        return Err(format!("label `{label}` starts or ends with '-'"));
    }
    Ok(())
}

fn check_dns_label_or_subdomain(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 253 {
        return Err("must be 1 to 253 characters".to_string());
    }
    name.split('.').try_for_each(check_label)
}

fn looks_like_email(email: &str) -> bool {
    match email.split_once('@') {
        Some((local, domain)) => {
            !local.is_empty()
                && !email.chars().any(|c| c.is_whitespace() || c.is_control())
                && domain.contains('.')
                && !domain.starts_with('.')
                && !domain.ends_with('.')
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names_are_checked_label_by_label() {
        assert!(check_dns_name("www.example.com").is_ok());
        assert!(check_dns_name("a-b.example.com").is_ok());
        for bad in [
            "",
            "localhost",
            "*.example.com",
            "Www.example.com",
            "www..example.com",
            "www.example.com.",
            "-www.example.com",
            "www_1.example.com",
            "ex ample.com",
        ] {
            assert!(check_dns_name(bad).is_err(), "{bad:?} should be refused");
        }
        let long_label = format!("{}.example.com", "a".repeat(64));
        assert!(check_dns_name(&long_label).is_err());
    }

    #[test]
    fn emails_need_a_local_part_and_a_domain() {
        assert!(looks_like_email("ops@example.com"));
        for bad in ["ops", "@example.com", "ops@example", "o ps@example.com"] {
            assert!(!looks_like_email(bad), "{bad}");
        }
    }
}
