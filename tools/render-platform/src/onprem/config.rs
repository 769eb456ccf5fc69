//! The cluster's config, `config/onprem.json`, and the rules its types cannot say.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use pop_common::acme::{AcmeConfig, AcmeServer};
use pop_common::input::InputError;
use serde::Deserialize;

/// The cluster's config (`config/onprem.json`; example: `config/onprem.example.json`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnpremConfig {
    /// Names the pool, the L2 policy and external-dns's TXT ownership records.
    pub cluster_name: String,
    /// The cluster's Kubernetes API (`https://host:port`): make acts only on a kubeconfig whose
    /// current context points there (kubeconfig-guard).
    pub cluster_endpoint: String,
    /// The SOPS file of this cluster's secrets, relative to this config's folder.
    pub secrets: PathBuf,
    /// How many nodes take workloads (Talos keeps them off the control planes): no more
    /// ceph-csi provisioners than that, since each needs a node of its own.
    pub workers: u32,
    pub load_balancer: LoadBalancerConfig,
    pub ingress: IngressConfig,
    pub ceph: CephConfig,
    pub dns: DnsConfig,
    #[serde(default)]
    pub acme: AcmeConfig,
    pub smoke_test: SmokeTestConfig,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadBalancerConfig {
    /// The first and last address Cilium may give to LoadBalancer Services, announced in ARP
    /// on the nodes' network.
    pub first: Ipv4Addr,
    pub last: Ipv4Addr,
    /// The network interfaces the addresses are announced on, as regular expressions of their
    /// names (Cilium's L2 policy `interfaces`, e.g. `^eth0$`); absent, every interface Cilium
    /// finds, a storage network's included.
    #[serde(default)]
    pub interfaces: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngressConfig {
    /// Traefik's load-balancer address, inside the pool: where the router forwards 80 and 443.
    pub address: Ipv4Addr,
    /// The public address the router forwards from: what the Ingresses show, and so what
    /// external-dns publishes.
    pub public_address: Ipv4Addr,
    /// One Traefik per worker.
    pub replicas: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CephConfig {
    /// The Ceph cluster's fsid.
    pub cluster_id: String,
    /// `host:port` of each monitor.
    pub monitors: Vec<String>,
    pub pool: String,
    /// The Ceph user, without `client.` (its key is in the SOPS file, `ceph.user_key`).
    pub user: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnsConfig {
    /// The platform's domain: external-dns writes names under it, and nowhere else.
    pub domain: String,
    /// The zone at OVH that holds `domain`: `domain` itself when it is delegated as a zone of
    /// its own, else the parent zone it lives in (`exemple.fr` for `k8s.exemple.fr`).
    #[serde(default)]
    pub zone: Option<String>,
    /// OVH's API endpoint (external-dns `--ovh-endpoint`).
    #[serde(default = "default_ovh_endpoint")]
    pub ovh_endpoint: String,
}

fn default_ovh_endpoint() -> String {
    "ovh-eu".to_owned()
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmokeTestConfig {
    /// The name, under `dns.domain`, the small app answers on in HTTPS.
    pub host: String,
}

/// Reads and checks the config; every refusal names the file and the field.
pub fn load(path: &Path) -> Result<OnpremConfig, InputError> {
    let config: OnpremConfig = pop_common::input::read_json(path)?;
    check(&config).map_err(|(field, why)| InputError::field(path, field, why))?;
    Ok(config)
}

/// A refusal: the field, and why.
pub type Refusal = (&'static str, String);

/// The config is the cluster `name`'s (make CLUSTER=name reads clusters/name/onprem.json and
/// renders into a folder of that name, which must hold that cluster's render and no other).
pub fn check_is_cluster(config: &OnpremConfig, name: &str) -> Result<(), Refusal> {
    if config.cluster_name == name {
        return Ok(());
    }
    Err((
        "cluster_name",
        format!(
            "`{}` is not `{name}`, the cluster asked for (CLUSTER={name}): the config of \
             clusters/{name}/ is that cluster's, and its render goes to a folder of that name",
            config.cluster_name
        ),
    ))
}

/// The rules the types cannot say; `Err((field, why))`.
pub fn check(config: &OnpremConfig) -> Result<(), Refusal> {
    check_cluster(config)?;
    check_addresses(config)?;
    check_ceph(&config.ceph)?;
    check_names(config)
}

/// The cluster's name, its API and its SOPS file.
fn check_cluster(config: &OnpremConfig) -> Result<(), Refusal> {
    pop_common::records::check_cluster_name(&config.cluster_name)
        .map_err(|e| ("cluster_name", e.to_string()))?;
    let api_host = config
        .cluster_endpoint
        .strip_prefix("https://")
        .unwrap_or_default();
    if api_host.is_empty()
        || api_host.starts_with([':', '/'])
        || api_host.contains(char::is_whitespace)
    {
        return Err((
            "cluster_endpoint",
            format!(
                "`{}` is not an https:// URL with a host",
                config.cluster_endpoint
            ),
        ));
    }
    if config.workers == 0 {
        return Err((
            "workers",
            "must be at least 1: the nodes that take workloads".into(),
        ));
    }
    // make reads the render's names one `KEY=value` a line, the SOPS file's path among them.
    let secrets = config.secrets.as_os_str();
    if secrets.is_empty() || secrets.as_encoded_bytes().contains(&b'\n') {
        return Err((
            "secrets",
            "must name the SOPS file, on one line (relative to this config's folder)".into(),
        ));
    }
    Ok(())
}

/// The pool, and Traefik's addresses in it and outside.
fn check_addresses(config: &OnpremConfig) -> Result<(), Refusal> {
    let lb = &config.load_balancer;
    if lb.first > lb.last {
        return Err((
            "load_balancer.last",
            format!("{} comes before load_balancer.first {}", lb.last, lb.first),
        ));
    }
    if let Some(interfaces) = &lb.interfaces
        && (interfaces.is_empty() || interfaces.iter().any(|i| i.trim().is_empty()))
    {
        return Err((
            "load_balancer.interfaces",
            "must name at least one interface, each a regular expression of its name (leave \
             the field out for every interface)"
                .into(),
        ));
    }
    let ingress = &config.ingress;
    if ingress.address < lb.first || ingress.address > lb.last {
        return Err((
            "ingress.address",
            format!(
                "{} is outside the pool {}-{}: Cilium would never give it",
                ingress.address, lb.first, lb.last
            ),
        ));
    }
    let public = ingress.public_address;
    if public.is_private()
        || public.is_loopback()
        || public.is_link_local()
        || public.is_unspecified()
        || public.is_broadcast()
    {
        return Err((
            "ingress.public_address",
            format!(
                "{public} is not a public address: external-dns would publish names nobody \
                 outside can reach (give the router's public address)"
            ),
        ));
    }
    if ingress.replicas == 0 {
        return Err(("ingress.replicas", "must be at least 1".into()));
    }
    Ok(())
}

fn check_ceph(ceph: &CephConfig) -> Result<(), Refusal> {
    // ceph-csi matches the cluster id against the fsid `ceph fsid` prints, a UUID.
    if !is_uuid(&ceph.cluster_id) {
        return Err((
            "ceph.cluster_id",
            format!(
                "`{}` is not a Ceph fsid: the UUID `ceph fsid` prints \
                 (8-4-4-4-12 hexadecimal digits)",
                ceph.cluster_id
            ),
        ));
    }
    if ceph.monitors.is_empty() {
        return Err(("ceph.monitors", "needs at least one monitor".into()));
    }
    if let Some(bad) = ceph.monitors.iter().find(|m| !is_host_port(m)) {
        return Err(("ceph.monitors", format!("`{bad}` is not `host:port`")));
    }
    if ceph.pool.is_empty() {
        return Err(("ceph.pool", "must name the RBD pool".into()));
    }
    if ceph.user.is_empty() || ceph.user.starts_with("client.") {
        return Err((
            "ceph.user",
            "must be the user's name without `client.` (ceph-csi adds it)".into(),
        ));
    }
    Ok(())
}

/// The DNS zone, the smoke test's name in it, and the ACME account.
fn check_names(config: &OnpremConfig) -> Result<(), Refusal> {
    check_dns(&config.dns)?;
    let host = &config.smoke_test.host;
    if !pop_common::records::is_host_name(host)
        || !host.ends_with(&format!(".{}", config.dns.domain))
    {
        return Err((
            "smoke_test.host",
            format!(
                "`{host}` is not a name under dns.domain `{}`: external-dns publishes nothing \
                 outside it",
                config.dns.domain
            ),
        ));
    }
    let email = config
        .acme
        .email
        .as_deref()
        .filter(|e| !e.trim().is_empty());
    if config.acme.server == AcmeServer::Production && email.is_none() {
        return Err((
            "acme.email",
            "required with the production server (expiry and account notices)".into(),
        ));
    }
    Ok(())
}

/// The domain, and the OVH zone that holds it.
fn check_dns(dns: &DnsConfig) -> Result<(), Refusal> {
    if !pop_common::records::is_host_name(&dns.domain) {
        return Err(("dns.domain", format!("`{}` is not a DNS name", dns.domain)));
    }
    // external-dns's OVH provider keeps only the zones its domain filter matches, and a
    // sub-domain's filter never matches the parent zone: the zone is declared, not guessed.
    let Some(zone) = &dns.zone else {
        return Err((
            "dns.zone",
            format!(
                "missing: name the OVH zone that holds dns.domain `{}` (the domain itself when \
                 it is a zone of its own at OVH, else its parent zone, e.g. `{}`)",
                dns.domain,
                dns.domain.split_once('.').map_or("", |(_, parent)| parent)
            ),
        ));
    };
    if !pop_common::records::is_host_name(zone) {
        return Err(("dns.zone", format!("`{zone}` is not a DNS name")));
    }
    if dns.domain != *zone && !dns.domain.ends_with(&format!(".{zone}")) {
        return Err((
            "dns.zone",
            format!(
                "`{zone}` does not hold dns.domain `{}`: the zone is the domain or one of its \
                 parents",
                dns.domain
            ),
        ));
    }
    Ok(())
}

/// A UUID in its text form: five groups of 8, 4, 4, 4 and 12 hexadecimal digits.
fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(group, len)| group.len() == len && group.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn is_host_port(text: &str) -> bool {
    text.rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0))
}

/// `config/onprem.example.json`, loaded: what the tests of the onprem profile change.
#[cfg(test)]
#[allow(clippy::unwrap_used)] // a test helper: an example that does not load fails the test
pub(super) fn example() -> OnpremConfig {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/onprem.example.json");
    load(&path).unwrap()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// A change to the example, the field its refusal names, and words of the reason.
    type Case = (fn(&mut OnpremConfig), &'static str, &'static str);

    /// The cluster's name and endpoint, and the addresses Cilium and Traefik are given.
    fn cluster_and_address_cases() -> Vec<Case> {
        vec![
            (
                |c| c.cluster_name = "Demo".into(),
                "cluster_name",
                "DNS label",
            ),
            (
                |c| c.cluster_endpoint = "http://api.demo.k8s.exemple.fr:6443".into(),
                "cluster_endpoint",
                "https://",
            ),
            (
                |c| c.cluster_endpoint = "https://:6443".into(),
                "cluster_endpoint",
                "with a host",
            ),
            (
                |c| c.load_balancer.last = "10.20.1.99".parse().unwrap(),
                "load_balancer.last",
                "comes before",
            ),
            (
                |c| c.ingress.address = "10.20.1.200".parse().unwrap(),
                "ingress.address",
                "outside the pool",
            ),
            (
                |c| c.ingress.public_address = "10.20.1.100".parse().unwrap(),
                "ingress.public_address",
                "not a public address",
            ),
            (|c| c.ingress.replicas = 0, "ingress.replicas", "at least 1"),
            (
                |c| c.load_balancer.interfaces = Some(vec![]),
                "load_balancer.interfaces",
                "at least one interface",
            ),
            (
                |c| c.load_balancer.interfaces = Some(vec!["^eth0$".into(), " ".into()]),
                "load_balancer.interfaces",
                "regular expression",
            ),
            (|c| c.workers = 0, "workers", "at least 1"),
        ]
    }

    /// Ceph, the secrets file, DNS and ACME.
    fn storage_name_and_acme_cases() -> Vec<Case> {
        vec![
            (
                |c| c.ceph.cluster_id = "my-ceph".into(),
                "ceph.cluster_id",
                "not a Ceph fsid",
            ),
            (
                |c| c.ceph.cluster_id = "b7a6f2de-6c1e-4b8e-9a3d-2f0c5e7d1a4".into(),
                "ceph.cluster_id",
                "UUID",
            ),
            (
                |c| c.ceph.cluster_id = "b7a6f2de-6c1e-4b8e-9a3d-2f0c5e7d1a4g".into(),
                "ceph.cluster_id",
                "UUID",
            ),
            (
                |c| c.secrets = PathBuf::from("a\nb.yaml"),
                "secrets",
                "one line",
            ),
            (|c| c.ceph.monitors.clear(), "ceph.monitors", "at least one"),
            (
                |c| c.ceph.monitors = vec!["172.16.0.11".into()],
                "ceph.monitors",
                "host:port",
            ),
            (
                |c| c.ceph.user = "client.k8s".into(),
                "ceph.user",
                "client.",
            ),
            (
                |c| c.dns.domain = "localhost".into(),
                "dns.domain",
                "DNS name",
            ),
            (
                |c| c.dns.zone = None,
                "dns.zone",
                "parent zone, e.g. `exemple.fr`",
            ),
            (
                |c| c.dns.zone = Some("exemple.org".into()),
                "dns.zone",
                "does not hold dns.domain",
            ),
            (
                |c| c.dns.zone = Some("s.k8s.exemple.fr".into()),
                "dns.zone",
                "does not hold dns.domain",
            ),
            (
                |c| c.smoke_test.host = "whoami.example.org".into(),
                "smoke_test.host",
                "under dns.domain",
            ),
            (
                |c| {
                    c.acme.server = AcmeServer::Production;
                    c.acme.email = None;
                },
                "acme.email",
                "production",
            ),
        ]
    }

    #[test]
    fn the_example_passes_and_inconsistent_values_are_refused_naming_the_field() {
        check(&example()).unwrap();
        let cases = cluster_and_address_cases()
            .into_iter()
            .chain(storage_name_and_acme_cases());
        for (mutate, field, why) in cases {
            let mut config = example();
            mutate(&mut config);
            let (got, message) = check(&config).expect_err(field);
            assert_eq!(got, field);
            assert!(message.contains(why), "{field}: {message}");
        }
    }

    #[test]
    fn an_unknown_field_is_refused_naming_file_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("onprem.json");
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/onprem.example.json"),
        )
        .unwrap()
        .replace("\"public_address\"", "\"public_adress\"");
        std::fs::write(&path, text).unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert!(
            err.contains("onprem.json") && err.contains("public_adress"),
            "{err}"
        );
    }
}
