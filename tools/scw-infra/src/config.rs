//! `config/infra.json` (example: `config/infra.example.json`): decoded strictly (an unknown field
//! is refused, by name) and checked field by field.

use std::path::{Path, PathBuf};

use ipnet::IpNet;
use pop_common::input::{InputError, read_json};
use pop_common::records::MAX_EDGE_HOSTNAMES;
use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InfraConfig {
    /// The cluster's name: the value of the `edgepop-cluster` tag, and the prefix of every name.
    pub cluster_name: String,
    /// The zone of every server, such as `fr-par-1`.
    pub zone: String,
    /// The DNS zone (`example.com`); records are managed when Scaleway hosts it.
    pub dns_zone: String,
    /// The API's host name inside `dns_zone` (`api`).
    pub api_hostname: String,
    /// Must be `https://<api_hostname>.<dns_zone>:6443`.
    pub cluster_endpoint: String,
    pub control_plane: ControlPlane,
    /// The Elastic Metal workers, each an edge node: every edge name points at all of them.
    /// Read from `workers`, or from `worker`, the short form for one (not both).
    #[serde(default)]
    pub workers: Vec<Worker>,
    /// The short form of `workers` for one worker: moved into `workers` by [`InfraConfig::load`].
    #[serde(default, skip_serializing)]
    worker: Option<Worker>,
    /// The worker's SSH public key (registered in IAM; public key only).
    pub ssh_public_key_path: String,
    /// The worker's SSH private key, for scw-rescue-flash (given to it by the infra pipeline,
    /// through `scw-infra names`); kept here so the layer has one config file.
    pub ssh_private_key_path: String,
    /// Who may reach 6443 (Kubernetes) and 50000 (Talos API) from outside.
    pub admin_cidrs: Vec<IpNet>,
    /// Must be `true` for `admin_cidrs` to hold a prefix shorter than /8 (`0.0.0.0/0`, `::/0`):
    /// that opens the Talos and Kubernetes APIs to most of the internet.
    #[serde(default)]
    pub allow_admin_apis_from_anywhere: bool,
    /// Names in `dns_zone` that point at the worker (`www`, `shop.eu`, `@` for the zone
    /// itself): the one declaration of the edge's public names. The DNS records are made from
    /// it, and the edge layer serves exactly these names (`PlatformInputs.edge_hostnames`).
    #[serde(default)]
    pub edge_hostnames: Vec<String>,
    /// The public Container Registry namespace of the project's images.
    pub registry_namespace: String,
    /// Whether the file gave the one worker as `worker` (errors then name `worker.<field>`).
    #[serde(skip)]
    short_form: bool,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlPlane {
    pub count: u32,
    /// The Instance commercial type, such as `DEV1-M`.
    pub instance_type: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Worker {
    pub name: String,
    /// The Elastic Metal offer name, such as `EM-A116X-SSD`.
    pub offer: String,
    /// The disk scw-rescue-flash writes Talos onto, and Talos installs to.
    pub install_disk: String,
}

impl InfraConfig {
    /// The control planes' names: `<cluster>-cp-1` ... `<cluster>-cp-<count>`.
    pub fn control_plane_names(&self) -> Vec<String> {
        (1..=self.control_plane.count)
            .map(|i| format!("{}-cp-{i}", self.cluster_name))
            .collect()
    }

    /// Reads and checks the file; every error names the file and the field. A key path that
    /// starts with `~/` is in `home`.
    pub fn load(path: &Path, home: Option<&str>) -> Result<InfraConfig, InputError> {
        let mut config: InfraConfig = read_json(path)?;
        config.workers_from_short_form(path)?;
        config.check(path)?;
        for key in [
            &mut config.ssh_public_key_path,
            &mut config.ssh_private_key_path,
        ] {
            *key = expand_home(key, home).to_string_lossy().into_owned();
        }
        Ok(config)
    }

    /// `worker` (one) becomes `workers`; both given is refused, as neither is.
    fn workers_from_short_form(&mut self, path: &Path) -> Result<(), InputError> {
        match (self.worker.take(), self.workers.is_empty()) {
            (Some(_), false) => Err(InputError::field(
                path,
                "worker",
                "and workers are both given: list every worker under workers",
            )),
            (Some(one), true) => {
                self.workers.push(one);
                self.short_form = true;
                Ok(())
            }
            (None, true) => Err(InputError::field(
                path,
                "workers",
                "is missing or empty: the edge needs at least one Elastic Metal worker \
                 ({\"name\", \"offer\", \"install_disk\"})",
            )),
            (None, false) => Ok(()),
        }
    }

    /// How errors name a worker's field: `worker.<field>` when the config used the short form,
    /// `workers[<i>].<field>` otherwise.
    pub fn worker_field(&self, index: usize, field: &str) -> String {
        if self.short_form {
            format!("worker.{field}")
        } else {
            format!("workers[{index}].{field}")
        }
    }

    /// The workers' names, in the config's order.
    pub fn worker_names(&self) -> impl Iterator<Item = &str> {
        self.workers.iter().map(|w| w.name.as_str())
    }

    /// Every field checked, in the file's order; the error names the first that is wrong.
    pub fn check(&self, path: &Path) -> Result<(), InputError> {
        let field = |name: &str, message: String| InputError::field(path, name, message);
        self.check_names(&field)?;
        self.check_nodes(&field)?;
        self.check_access(&field)
    }

    /// The cluster's name, zone, DNS zone and API endpoint.
    fn check_names(&self, field: &impl Fn(&str, String) -> InputError) -> Result<(), InputError> {
        pop_common::records::check_cluster_name(&self.cluster_name)
            .map_err(|e| field("cluster_name", e.to_string()))?;
        pop_common::records::check_zone(&self.zone).map_err(|message| field("zone", message))?;
        check_zone_offers(&self.zone).map_err(|message| field("zone", message))?;
        if !pop_common::records::is_host_name(&self.dns_zone) {
            return Err(field(
                "dns_zone",
                format!("`{}` is not a DNS name", self.dns_zone),
            ));
        }
        if !self
            .api_hostname
            .split('.')
            .all(pop_common::records::is_dns_label)
        {
            return Err(field(
                "api_hostname",
                format!("`{}` is not a host name", self.api_hostname),
            ));
        }
        // The API host goes into the control planes' certificate SANs (a Talos patch).
        let api_host = self.api_host();
        pop_common::records::check_host_name(&api_host)
            .map_err(|e| field("api_hostname", format!("with dns_zone, {e}")))?;
        let expected = format!("https://{api_host}:6443");
        if self.cluster_endpoint != expected {
            return Err(field(
                "cluster_endpoint",
                format!(
                    "`{}` must equal https://<api_hostname>.<dns_zone>:6443, here {expected} \
                     (from the fields api_hostname and dns_zone)",
                    self.cluster_endpoint
                ),
            ));
        }
        Ok(())
    }

    /// The control planes and the worker.
    fn check_nodes(&self, field: &impl Fn(&str, String) -> InputError) -> Result<(), InputError> {
        if self.control_plane.count == 0 || self.control_plane.count.is_multiple_of(2) {
            return Err(field(
                "control_plane.count",
                format!(
                    "{} control planes: etcd needs an odd number (1, 3 or 5)",
                    self.control_plane.count
                ),
            ));
        }
        if self.control_plane.count > 5 {
            return Err(field(
                "control_plane.count",
                format!("{} is more than 5", self.control_plane.count),
            ));
        }
        if self.control_plane.instance_type.is_empty() {
            return Err(field("control_plane.instance_type", "is empty".into()));
        }
        let control_planes = self.control_plane_names();
        let mut names = std::collections::BTreeSet::new();
        for (i, worker) in self.workers.iter().enumerate() {
            let field = |name: &str, message: String| field(&self.worker_field(i, name), message);
            if !pop_common::records::is_dns_label(&worker.name) {
                return Err(field(
                    "name",
                    format!("`{}` is not a host name", worker.name),
                ));
            }
            if control_planes.contains(&worker.name) {
                return Err(field(
                    "name",
                    format!("`{}` is the name of a control plane", worker.name),
                ));
            }
            if !names.insert(worker.name.as_str()) {
                return Err(field(
                    "name",
                    format!("`{}` names another worker already", worker.name),
                ));
            }
            if worker.offer.is_empty() {
                return Err(field("offer", "is empty".into()));
            }
            // The disk goes into the worker's Talos config and onto the rescue system's `dd` line.
            pop_common::records::check_install_disk(&worker.install_disk)
                .map_err(|e| field("install_disk", e.to_string()))?;
        }
        Ok(())
    }

    /// Who reaches the APIs, the edge's names, the registry.
    fn check_access(&self, field: &impl Fn(&str, String) -> InputError) -> Result<(), InputError> {
        if self.admin_cidrs.is_empty() {
            return Err(field(
                "admin_cidrs",
                "is empty: nobody could reach the Kubernetes and Talos APIs".into(),
            ));
        }
        if !self.allow_admin_apis_from_anywhere
            && let Some((i, wide)) = self
                .admin_cidrs
                .iter()
                .enumerate()
                .find(|(_, cidr)| cidr.prefix_len() < MIN_ADMIN_PREFIX)
        {
            return Err(field(
                &format!("admin_cidrs[{i}]"),
                format!(
                    "{wide} is shorter than /{MIN_ADMIN_PREFIX}: it opens the Talos API (50000) \
                     and the Kubernetes API (6443) to the world; list the addresses you \
                     administer from, or set allow_admin_apis_from_anywhere: true to mean it"
                ),
            ));
        }
        self.check_edge_hostnames(field)?;
        if !pop_common::records::is_dns_label(&self.registry_namespace)
            || self.registry_namespace.len() < 4
        {
            return Err(field(
                "registry_namespace",
                format!(
                    "`{}` must be 4 to 54 lowercase letters, digits and '-'",
                    self.registry_namespace
                ),
            ));
        }
        Ok(())
    }

    /// The edge's names, checked before any record is made for them: the edge layer serves
    /// every one, so each must be one it can serve.
    fn check_edge_hostnames(
        &self,
        field: &impl Fn(&str, String) -> InputError,
    ) -> Result<(), InputError> {
        if self.edge_hostnames.is_empty() {
            return Err(field(
                "edge_hostnames",
                "is empty: the edge serves these names (as `www` for www.<dns_zone>, `@` for \
                 the zone itself); list at least one"
                    .into(),
            ));
        }
        if self.edge_hostnames.len() > MAX_EDGE_HOSTNAMES {
            return Err(field(
                "edge_hostnames",
                format!(
                    "{} names, at most {MAX_EDGE_HOSTNAMES}: the edge's HTTP listener redirects \
                     them all with one HTTPRoute, which holds at most {MAX_EDGE_HOSTNAMES}",
                    self.edge_hostnames.len()
                ),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for ((i, name), fqdn) in self
            .edge_hostnames
            .iter()
            .enumerate()
            .zip(self.edge_fqdns())
        {
            let field = |why: String| field(&format!("edge_hostnames[{i}]"), why);
            if name != "@" && !name.split('.').all(pop_common::records::is_dns_label) {
                return Err(field(format!("`{name}` is not a host name (or `@`)")));
            }
            pop_common::records::check_host_name(&fqdn)
                .map_err(|e| field(format!("with dns_zone, {e}")))?;
            if *name == self.api_hostname {
                return Err(field(format!(
                    "`{name}` is api_hostname: its records point at the control planes, the \
                     edge's at the worker"
                )));
            }
            if !seen.insert(fqdn.clone()) {
                return Err(field(format!("`{name}` is listed twice ({fqdn})")));
            }
        }
        Ok(())
    }

    /// The edge's names as the zone's records name them: `@`, the apex, is the empty name.
    pub fn edge_record_names(&self) -> impl Iterator<Item = &str> {
        self.edge_hostnames
            .iter()
            .map(|name| if name == "@" { "" } else { name.as_str() })
    }

    /// The edge's names, fully qualified (`www.example.com`): what the edge layer serves.
    pub fn edge_fqdns(&self) -> Vec<String> {
        self.edge_record_names()
            .map(|name| match name {
                "" => self.dns_zone.clone(),
                name => format!("{name}.{}", self.dns_zone),
            })
            .collect()
    }

    /// The cluster API's host name: `<api_hostname>.<dns_zone>`.
    pub fn api_host(&self) -> String {
        format!("{}.{}", self.api_hostname, self.dns_zone)
    }

    /// The region of the zone (`fr-par-1` -> `fr-par`).
    pub fn region(&self) -> &str {
        self.zone.rsplit_once('-').map_or(&self.zone, |(r, _)| r)
    }

    /// The `admin_cidrs` inside a range reserved for documentation, as the example config's
    /// `198.51.100.0/24` is: no address on the internet is in one, so the security group would
    /// open the Talos and Kubernetes APIs to nobody and the first apply would wait for a node
    /// that never answers. A warning, not a refusal: a private test network may use them.
    pub fn documentation_admin_cidrs(&self) -> Vec<IpNet> {
        self.admin_cidrs
            .iter()
            .filter(|cidr| in_documentation_range(cidr))
            .copied()
            .collect()
    }
}

/// Whether all of `cidr` lies in a range reserved for documentation: RFC 5737's three /24s
/// (std's `Ipv4Addr::is_documentation`) or RFC 3849's `2001:db8::/32`.
fn in_documentation_range(cidr: &IpNet) -> bool {
    match cidr {
        IpNet::V4(net) => net.prefix_len() >= 24 && net.network().is_documentation(),
        IpNet::V6(net) => {
            net.prefix_len() >= 32 && net.network().segments()[..2] == [0x2001, 0xdb8]
        }
    }
}

/// The shortest prefix `admin_cidrs` takes without `allow_admin_apis_from_anywhere`.
const MIN_ADMIN_PREFIX: u8 = 8;

/// The zone must offer what the cluster is made of there: Instances (the control planes),
/// Block Storage (their image's snapshot) and Elastic Metal (the worker), as each product's
/// OpenAPI lists its zones (`scaleway::instance::ZONES`, ...); the API would refuse the rest with
/// a 400 after some calls have been made.
fn check_zone_offers(zone: &str) -> Result<(), String> {
    let products: [(&str, &[&str]); 3] = [
        ("Instances", scaleway::instance::ZONES),
        ("Block Storage", scaleway::block::ZONES),
        ("Elastic Metal", scaleway::baremetal::ZONES),
    ];
    let lacking: Vec<&str> = products
        .iter()
        .filter(|(_, zones)| !zones.contains(&zone))
        .map(|(product, _)| *product)
        .collect();
    if lacking.is_empty() {
        return Ok(());
    }
    let every: Vec<&str> = scaleway::baremetal::ZONES
        .iter()
        .copied()
        .filter(|z| products.iter().all(|(_, zones)| zones.contains(z)))
        .collect();
    Err(format!(
        "`{zone}` has no {} at Scaleway; the zones with Instances, Block Storage and Elastic \
         Metal are {}",
        lacking.join(", "),
        every.join(", ")
    ))
}

fn expand_home(path: &str, home: Option<&str>) -> PathBuf {
    match (path.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => Path::new(home).join(rest),
        _ => PathBuf::from(path),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn example() -> serde_json::Value {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/infra.example.json");
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }

    fn load(value: &serde_json::Value) -> Result<InfraConfig, InputError> {
        let (_dir, path) = testkit::temp_file("infra.json", value.to_string());
        InfraConfig::load(&path, Some("/home/me"))
    }

    #[test]
    fn the_committed_example_is_valid() {
        let c = load(&example()).unwrap();
        assert_eq!(c.region(), "fr-par");
        assert_eq!(c.ssh_public_key_path, "/home/me/.ssh/id_ed25519.pub");
        assert_eq!(c.ssh_private_key_path, "/home/me/.ssh/id_ed25519");
    }

    #[test]
    fn one_worker_may_be_given_as_worker_and_errors_then_name_it_so() {
        let mut v = example();
        let one = v["workers"][0].clone();
        v.as_object_mut().unwrap().remove("workers");
        v["worker"] = one.clone();
        let c = load(&v).unwrap();
        assert_eq!(c.worker_names().collect::<Vec<_>>(), ["edge-worker-1"]);
        v["worker"]["install_disk"] = "sda".into();
        let err = load(&v).unwrap_err().to_string();
        assert!(err.contains("`worker.install_disk`"), "{err}");
        v["worker"] = one.clone();
        v["workers"] = serde_json::json!([one]);
        let err = load(&v).unwrap_err().to_string();
        assert!(err.contains("`worker`") && err.contains("both"), "{err}");
        v.as_object_mut().unwrap().remove("worker");
        v["workers"] = serde_json::json!([]);
        let err = load(&v).unwrap_err().to_string();
        assert!(
            err.contains("`workers`") && err.contains("at least one"),
            "{err}"
        );
    }

    #[test]
    fn workers_are_named_once_each_and_apart_from_the_control_planes() {
        let mut v = example();
        let one = v["workers"][0].clone();
        let mut two = one.clone();
        two["name"] = "edge-worker-2".into();
        v["workers"] = serde_json::json!([one, two]);
        let c = load(&v).unwrap();
        assert_eq!(
            c.worker_names().collect::<Vec<_>>(),
            ["edge-worker-1", "edge-worker-2"]
        );
        for (name, why) in [
            ("edge-worker-1", "names another worker already"),
            ("edge-par-cp-2", "is the name of a control plane"),
            ("Edge", "is not a host name"),
        ] {
            v["workers"][1]["name"] = name.into();
            let err = load(&v).unwrap_err().to_string();
            assert!(
                err.contains("`workers[1].name`") && err.contains(why),
                "{name}: {err}"
            );
        }
    }

    #[test]
    fn a_wrong_endpoint_names_both_fields() {
        let mut v = example();
        v["cluster_endpoint"] = "https://k8s.example.com:6443".into();
        let err = load(&v).unwrap_err().to_string();
        assert!(
            err.contains("cluster_endpoint")
                && err.contains("api_hostname")
                && err.contains("dns_zone"),
            "{err}"
        );
    }

    #[test]
    fn bad_fields_are_refused_by_name() {
        for (key, value, needle) in [
            ("zone", serde_json::json!("paris"), "zone"),
            (
                "cluster_name",
                serde_json::json!("Edge_Par"),
                "cluster_name",
            ),
            ("admin_cidrs", serde_json::json!([]), "admin_cidrs"),
            ("admin_cidrs", serde_json::json!(["nope"]), "admin_cidrs"),
            ("surprise", serde_json::json!(1), "surprise"),
        ] {
            let mut v = example();
            v[key] = value;
            let err = load(&v).unwrap_err().to_string();
            assert!(err.contains(needle), "{key}: {err}");
        }
        for (disk, needle) in [
            ("/dev/sda|e reboot", "workers[0].install_disk"),
            ("/dev/sda\n    wipe: true", "workers[0].install_disk"),
            ("sda", "workers[0].install_disk"),
        ] {
            let mut v = example();
            v["workers"][0]["install_disk"] = disk.into();
            let err = load(&v).unwrap_err().to_string();
            assert!(
                err.contains(needle) && err.contains("device path"),
                "{disk}: {err}"
            );
        }
        let mut v = example();
        v["control_plane"]["count"] = 2.into();
        let err = load(&v).unwrap_err().to_string();
        assert!(err.contains("control_plane.count"), "{err}");
    }

    #[test]
    fn the_edge_hostnames_are_qualified_in_the_zone_the_apex_as_at() {
        let mut v = example();
        v["edge_hostnames"] = serde_json::json!(["www", "@", "shop.eu"]);
        let c = load(&v).unwrap();
        assert_eq!(
            c.edge_record_names().collect::<Vec<_>>(),
            ["www", "", "shop.eu"]
        );
        assert_eq!(
            c.edge_fqdns(),
            ["www.example.com", "example.com", "shop.eu.example.com"]
        );
    }

    #[test]
    fn edge_hostnames_the_edge_could_not_serve_are_refused_before_any_record() {
        let long = "a".repeat(63);
        for (names, refused, why) in [
            (serde_json::json!([]), "edge_hostnames`", "is empty"),
            (
                serde_json::json!(["www", "WWW"]),
                "edge_hostnames[1]",
                "not a host name",
            ),
            (
                serde_json::json!(["*"]),
                "edge_hostnames[0]",
                "not a host name",
            ),
            (
                serde_json::json!(["www", "www"]),
                "edge_hostnames[1]",
                "listed twice",
            ),
            (
                serde_json::json!(["@", "@"]),
                "edge_hostnames[1]",
                "listed twice",
            ),
            (
                serde_json::json!(["api"]),
                "edge_hostnames[0]",
                "is api_hostname",
            ),
            (
                serde_json::json!([format!("{long}.{long}.{long}.{long}")]),
                "edge_hostnames[0]",
                "with dns_zone",
            ),
            (
                serde_json::json!((1..=17).map(|n| format!("n{n}")).collect::<Vec<_>>()),
                "edge_hostnames`",
                "17 names, at most 16",
            ),
        ] {
            let mut v = example();
            v["edge_hostnames"] = names.clone();
            let err = load(&v).unwrap_err().to_string();
            assert!(
                err.contains(&format!("field `{refused}")) && err.contains(why),
                "{names}: {err}"
            );
        }
        let mut v = example();
        v["edge_hostnames"] =
            serde_json::json!((1..=16).map(|n| format!("n{n}")).collect::<Vec<_>>());
        assert_eq!(load(&v).unwrap().edge_fqdns().len(), 16);
    }

    #[test]
    fn a_zone_without_every_product_the_cluster_uses_is_refused_naming_the_others() {
        for (zone, lacking) in [
            ("fr-par-9", "no Instances, Block Storage, Elastic Metal"),
            // Instances and Block Storage, but no Elastic Metal for the worker.
            ("fr-par-3", "no Elastic Metal at Scaleway"),
            ("it-mil-1", "no Block Storage, Elastic Metal"),
        ] {
            let mut v = example();
            v["zone"] = zone.into();
            let err = load(&v).unwrap_err().to_string();
            assert!(
                err.contains("field `zone`")
                    && err.contains(lacking)
                    && err.contains("fr-par-1, fr-par-2, nl-ams-1, nl-ams-2, pl-waw-2, pl-waw-3"),
                "{zone}: {err}"
            );
        }
        for zone in ["fr-par-2", "nl-ams-1", "pl-waw-3"] {
            let mut v = example();
            v["zone"] = zone.into();
            load(&v).unwrap();
        }
    }

    #[test]
    fn admin_cidrs_in_documentation_ranges_are_named() {
        let mut v = example();
        v["admin_cidrs"] = serde_json::json!([
            "198.51.100.0/24",
            "203.0.113.7/32",
            "192.0.2.0/25",
            "2001:db8:1::/48",
            "198.51.0.0/16",
            "203.0.114.0/24",
            "2001:db9::/32"
        ]);
        let named: Vec<String> = load(&v)
            .unwrap()
            .documentation_admin_cidrs()
            .iter()
            .map(ToString::to_string)
            .collect();
        // A range wider than a documentation one, or beside it, holds real addresses.
        assert_eq!(
            named,
            [
                "198.51.100.0/24",
                "203.0.113.7/32",
                "192.0.2.0/25",
                "2001:db8:1::/48"
            ]
        );
    }

    #[test]
    fn admin_cidrs_open_to_the_world_need_the_opt_in() {
        for (cidrs, refused) in [
            (
                serde_json::json!(["203.0.113.0/24", "0.0.0.0/0"]),
                "admin_cidrs[1]",
            ),
            (serde_json::json!(["::/0"]), "admin_cidrs[0]"),
            (serde_json::json!(["10.0.0.0/7"]), "admin_cidrs[0]"),
            (serde_json::json!(["2001:db8::/4"]), "admin_cidrs[0]"),
        ] {
            let mut v = example();
            v["admin_cidrs"] = cidrs.clone();
            let err = load(&v).unwrap_err().to_string();
            assert!(
                err.contains(refused)
                    && err.contains("Talos API (50000)")
                    && err.contains("Kubernetes API (6443)")
                    && err.contains("allow_admin_apis_from_anywhere"),
                "{cidrs}: {err}"
            );
            v["allow_admin_apis_from_anywhere"] = true.into();
            assert_eq!(
                load(&v).unwrap().admin_cidrs.len(),
                cidrs.as_array().unwrap().len()
            );
        }
        // A /8 is the widest taken without it.
        let mut v = example();
        v["admin_cidrs"] = serde_json::json!(["10.0.0.0/8", "2001:db8::/8"]);
        load(&v).unwrap();
    }
}
