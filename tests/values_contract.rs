//! Our Helm values (values/*.yaml and what render-platform writes from the platform config)
//! against the charts' own key contracts, as collected in ../shared/charts (PROVENANCE.md there):
//!
//! - Cilium 1.20.0: values.schema.json declares every key of values.yaml but forbids none
//!   (no `additionalProperties: false`), so helm would take `kubeProxyReplacment` silently. The
//!   contract is the schema's `properties` tree, plus the keys the templates read without
//!   declaring them (template-only-keys.txt), minus those marked REMOVED, which validate.yaml
//!   refuses (`tunnel`).
//! - cert-manager v1.21.1: the schema ($defs, closed in 28 places) is the list of keys; `config`
//!   is open there, and the ControllerConfiguration fields we set are checked against the ones
//!   its types.go declares (PROVENANCE.md).
//! - Istio base and istiod 1.30.3: no schema at all; the keys are those of values.yaml under
//!   `_internal_defaults_do_not_set`, plus `profile`, `platform` and `compatibilityVersion`,
//!   whose names must be a profile file of the chart; istiod copies `pilot.*` to the top level.
//!
//! - Traefik 41.3.0 (closed at the root and in 31 places; `ports.<name>` is one schema for
//!   every entry point), external-dns 1.21.1 and CrowdSec 0.24.0 (draft-06, through `$ref`): the
//!   schema's `properties` tree, following `additionalProperties` schemas; and, as helm does,
//!   the chart's defaults merged with ours validated against the whole schema (enums, items).
//! - ceph-csi-rbd 3.17.1 and snapshot-controller 5.2.0: no schema; the keys are those of
//!   values.yaml, with the type of their default.
//!
//! Every Helm component of every profile (render-platform's) is checked: the committed values
//! files it layers, merged with what render-platform renders from the profile's example config.
//!
//! A key is open below an object the chart leaves free (no properties in the schema; `{}` in
//! Istio's defaults: annotations, resources, env). Types: the value's JSON type must be one the
//! schema allows (or the type of Istio's default, when the default is not null).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use render_platform::profile::{Component, Kind};
use render_platform::{ClusterConfig, Profile};
use serde_json::{Value, json};

const TEST: &str = "values_contract";

/// The chart versions whose contracts ../shared/charts holds: a `*_CONTRACT_VERSION` where the
/// pin was not collected there, the pin itself otherwise.
fn chart_dir(chart: &str) -> Option<PathBuf> {
    let shared = testkit::workspace::shared_dir(TEST)?;
    let versions = versions();
    let key = match chart {
        "cilium" => "CILIUM_CONTRACT_VERSION",
        "cert-manager" => "CERT_MANAGER_CONTRACT_VERSION",
        "base" | "istiod" => "ISTIO_CONTRACT_VERSION",
        "traefik" => "TRAEFIK_VERSION",
        "ceph-csi-rbd" => "CEPH_CSI_RBD_VERSION",
        "external-dns" => "EXTERNAL_DNS_VERSION",
        "crowdsec" => "CROWDSEC_VERSION",
        "snapshot-controller" => "SNAPSHOT_CONTROLLER_VERSION",
        other => panic!("no contract for {other}"),
    };
    let dir = shared.join("charts").join(chart).join(&versions[key]);
    assert!(dir.is_dir(), "{} is missing", dir.display());
    Some(dir)
}

/// k8s/versions.env as a map (KEY=value lines).
fn versions() -> BTreeMap<String, String> {
    let text =
        std::fs::read_to_string(testkit::workspace::root().join("k8s/versions.env")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

fn yaml_file(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let value: Value =
        serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if value.is_null() { json!({}) } else { value }
}

/// A profile's example config and its path.
fn example(profile: Profile) -> (ClusterConfig, PathBuf) {
    let file = match profile {
        Profile::Edge => "config/platform.example.json",
        Profile::Onprem => "config/onprem.example.json",
    };
    let path = testkit::workspace::root().join(file);
    let mut cluster = ClusterConfig::load(profile, &path).unwrap();
    // The example's SOPS file is the cluster's own, never committed: the test-only fixture
    // stands for it (the bouncer's name comes from it).
    if let ClusterConfig::Onprem(config) = &mut cluster {
        config.secrets = crate::onprem_profile::sops_file();
    }
    (cluster, path)
}

/// A Helm component of a profile, by name.
fn component(profile: Profile, name: &str) -> &'static Component {
    profile
        .components()
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("{}: no component {name}", profile.name()))
}

/// Every Helm component of every profile.
fn helm_components() -> Vec<(Profile, &'static Component)> {
    Profile::ALL
        .into_iter()
        .flat_map(|p| p.components().iter().map(move |c| (p, c)))
        .filter(|(_, c)| matches!(c.kind, Kind::Helm { .. }))
        .collect()
}

fn chart(component: &Component) -> &'static str {
    match component.kind {
        Kind::Helm { chart, .. } => chart,
        _ => panic!("{} is not a Helm component", component.name),
    }
}

/// Our values for a release: its committed files merged in order with what render-platform
/// renders for the config (helm merges each -f over the ones before the same way: maps deep,
/// the rest replaced).
fn values_of(component: &Component, cluster: &ClusterConfig, path: &Path) -> Value {
    let Kind::Helm { values, .. } = component.kind else {
        panic!("{} is not a Helm component", component.name)
    };
    let mut merged = json!({});
    for file in values {
        merge(
            &mut merged,
            yaml_file(&testkit::workspace::root().join(file)),
        );
    }
    let rendered =
        render_platform::rendered(cluster, path, component, &render_platform::PINS).unwrap();
    merge(&mut merged, rendered.unwrap());
    merged
}

/// [`values_of`] for the profile's example config.
fn our_values(profile: Profile, name: &str) -> Value {
    let (cluster, path) = example(profile);
    values_of(component(profile, name), &cluster, &path)
}

/// The edge profile's values of a release for this platform config.
pub(crate) fn edge_values(name: &str, platform: &render_platform::PlatformConfig) -> Value {
    let (_, path) = example(Profile::Edge);
    values_of(
        component(Profile::Edge, name),
        &ClusterConfig::Edge(platform.clone()),
        &path,
    )
}

/// What helm renders the edge's release `name` from: the chart's own defaults, then
/// [`edge_values`]; `None` (skipped) without `../shared`.
pub(crate) fn edge_values_over_chart_defaults(
    name: &str,
    platform: &render_platform::PlatformConfig,
) -> Option<Value> {
    let dir = chart_dir(chart(component(Profile::Edge, name)))?;
    let mut merged = yaml_file(&dir.join("values.yaml"));
    merge(&mut merged, edge_values(name, platform));
    Some(merged)
}

pub(crate) fn example_platform() -> render_platform::PlatformConfig {
    render_platform::load(&testkit::workspace::root().join("config/platform.example.json")).unwrap()
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

/// Every leaf of a values tree with its dotted path (an empty map is a leaf too).
fn leaves(value: &Value) -> Vec<(Vec<String>, Value)> {
    fn walk(prefix: &mut Vec<String>, value: &Value, out: &mut Vec<(Vec<String>, Value)>) {
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (k, v) in map {
                    prefix.push(k.clone());
                    walk(prefix, v, out);
                    prefix.pop();
                }
            }
            _ => out.push((prefix.clone(), value.clone())),
        }
    }
    let mut out = Vec::new();
    walk(&mut Vec::new(), value, &mut out);
    out
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A chart's key contract.
enum Contract {
    /// A JSON schema (Cilium, cert-manager), with keys the templates read undeclared and keys the
    /// chart refuses.
    Schema {
        schema: Value,
        template_only: Vec<String>,
        removed: Vec<String>,
        /// Paths under an open object whose own keys are known from elsewhere (cert-manager's
        /// `config`: ControllerConfiguration), as (prefix, allowed dotted keys below it).
        sub_contracts: Vec<(String, Vec<String>)>,
        /// The chart's values.yaml: when given, the defaults merged with our values are
        /// validated against the whole schema, as helm does before rendering.
        defaults: Option<Value>,
    },
    /// No schema: the keys of the chart's defaults, with their types. Istio's defaults sit under
    /// `_internal_defaults_do_not_set`, and its profile names are files of the chart.
    Defaults {
        defaults: Value,
        istio_profiles: Option<Vec<String>>,
        descope_pilot: bool,
        /// A schema that declares only part of the keys (CrowdSec's): the defaults merged with
        /// ours are still validated against it, as helm does.
        schema: Option<Value>,
        /// Keys the templates read that values.yaml does not declare (dotted; below them, any).
        template_only: Vec<String>,
    },
}

fn cilium_contract() -> Option<Contract> {
    let dir = chart_dir("cilium")?;
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("values.schema.json")).unwrap())
            .unwrap();
    let mut template_only = Vec::new();
    let mut removed = Vec::new();
    for line in std::fs::read_to_string(dir.join("template-only-keys.txt"))
        .unwrap()
        .lines()
    {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        match line.split_once('\t') {
            Some((key, "REMOVED")) => removed.push(key.to_owned()),
            Some((key, other)) => panic!("template-only-keys.txt: unknown mark {other} on {key}"),
            None => template_only.push(line.trim().to_owned()),
        }
    }
    assert!(
        removed.contains(&"tunnel".to_owned()),
        "the REMOVED marks were not read"
    );
    Some(Contract::Schema {
        schema,
        template_only,
        removed,
        sub_contracts: Vec::new(),
        defaults: None,
    })
}

fn cert_manager_contract() -> Option<Contract> {
    let dir = chart_dir("cert-manager")?;
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("values.schema.json")).unwrap())
            .unwrap();
    // ControllerConfiguration (pkg/apis/config/controller/v1alpha1/types.go at v1.21.1, as
    // PROVENANCE.md gives it): only the fields this project sets or may set are listed.
    let controller_configuration = [
        "apiVersion",
        "kind",
        "gatewayAPI.enabled",
        "gatewayAPI.enableListenerSet",
        "gatewayAPI.extraProtocols",
        "enableGatewayAPI",
    ]
    .map(str::to_owned)
    .to_vec();
    Some(Contract::Schema {
        schema,
        template_only: Vec::new(),
        removed: Vec::new(),
        sub_contracts: vec![("config".to_owned(), controller_configuration)],
        defaults: None,
    })
}

/// A chart whose schema is the contract, validated whole over the defaults merged with ours.
fn schema_contract(chart: &str) -> Option<Contract> {
    let dir = chart_dir(chart)?;
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("values.schema.json")).unwrap())
            .unwrap();
    let mut sub_contracts = Vec::new();
    if chart == "traefik" {
        // `service.spec` is copied into the Service's spec (templates/_service.tpl, `with
        // .service.spec`): its keys are ServiceSpec's, from the Kubernetes schema (selector and
        // ports are the chart's own).
        let shared = testkit::workspace::shared_dir(TEST)?;
        let service: Value = serde_json::from_str(
            &std::fs::read_to_string(shared.join("schemas/service-v1.json")).unwrap(),
        )
        .unwrap();
        let fields = service["properties"]["spec"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| *k != "selector" && *k != "ports")
            .cloned()
            .collect();
        sub_contracts.push(("service.spec".to_owned(), fields));
    }
    Some(Contract::Schema {
        schema,
        template_only: Vec::new(),
        removed: Vec::new(),
        sub_contracts,
        defaults: Some(yaml_file(&dir.join("values.yaml"))),
    })
}

/// `dotted` is a key the templates read undeclared, or below one.
fn is_template_only(template_only: &[String], dotted: &str) -> bool {
    template_only
        .iter()
        .any(|k| dotted == *k || dotted.starts_with(&format!("{k}.")))
}

/// The keys CrowdSec 0.24.0's templates read that its values.yaml does not declare: the LAPI's
/// volume claims' annotations (crowdsecurity/helm-charts@crowdsec-0.24.0,
/// charts/crowdsec/templates/lapi-persistentVolume.yaml, lines 7-9 and 35-37).
const CROWDSEC_TEMPLATE_ONLY: [&str; 2] = [
    "lapi.persistentVolume.data.annotations",
    "lapi.persistentVolume.config.annotations",
];

/// A chart without a schema, or with one that lists only part of its keys: values.yaml is the
/// list of keys.
fn defaults_contract(chart: &str) -> Option<Contract> {
    let dir = chart_dir(chart)?;
    // CrowdSec's schema declares a few keys of each object (agent: 4 of 40) and closes none of
    // them: values.yaml is the list of keys, the schema checks the values.
    let schema = dir.join("values.schema.json");
    let template_only = if chart == "crowdsec" {
        CROWDSEC_TEMPLATE_ONLY.map(str::to_owned).to_vec()
    } else {
        Vec::new()
    };
    Some(Contract::Defaults {
        defaults: yaml_file(&dir.join("values.yaml")),
        istio_profiles: None,
        descope_pilot: false,
        schema: schema
            .exists()
            .then(|| serde_json::from_str(&std::fs::read_to_string(schema).unwrap()).unwrap()),
        template_only,
    })
}

fn istio_contract(chart: &str) -> Option<Contract> {
    let dir = chart_dir(chart)?;
    let values = yaml_file(&dir.join("values.yaml"));
    let defaults = values["_internal_defaults_do_not_set"].clone();
    assert!(
        defaults.is_object(),
        "{chart}: no _internal_defaults_do_not_set"
    );
    let profiles = std::fs::read_dir(dir.join("files"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            Some(
                name.strip_prefix("profile-")?
                    .strip_suffix(".yaml")?
                    .to_owned(),
            )
        })
        .collect();
    Some(Contract::Defaults {
        defaults,
        istio_profiles: Some(profiles),
        descope_pilot: chart == "istiod",
        schema: None,
        template_only: Vec::new(),
    })
}

/// Resolves a local `$ref` (`#/$defs/...`) until the node has none.
fn deref<'a>(root: &'a Value, mut node: &'a Value) -> &'a Value {
    while let Some(Value::String(r)) = node.get("$ref") {
        let pointer = r
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("remote $ref {r}"));
        node = root
            .pointer(pointer)
            .unwrap_or_else(|| panic!("dangling $ref {r}"));
    }
    node
}

fn schema_types(node: &Value) -> Vec<String> {
    match node.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(), // no type: anything
    }
}

fn type_fits(allowed: &[String], value: &Value) -> bool {
    let got = json_type(value);
    allowed.is_empty()
        || allowed.iter().any(|t| t == got || (t == "number" && got == "integer"))
        // An empty map in our values is an object leaf.
        || (got == "object" && allowed.iter().any(|t| t == "object"))
}

impl Contract {
    /// Every violation of our values, one line each (empty: the values keep the contract).
    fn violations(&self, values: &Value) -> Vec<String> {
        let mut bad: Vec<String> = leaves(values)
            .into_iter()
            .filter_map(|(path, value)| {
                self.check(&path, &value)
                    .err()
                    .map(|why| format!("{}: {why}", path.join(".")))
            })
            .collect();
        let whole = match self {
            Contract::Schema {
                schema,
                defaults: Some(defaults),
                ..
            }
            | Contract::Defaults {
                schema: Some(schema),
                defaults,
                ..
            } => Some((schema, defaults)),
            _ => None,
        };
        if let Some((schema, defaults)) = whole {
            let mut merged = defaults.clone();
            merge(&mut merged, values.clone());
            let validator = jsonschema::validator_for(schema).unwrap();
            for error in validator.iter_errors(&merged) {
                let at = error
                    .instance_path()
                    .to_string()
                    .trim_start_matches('/')
                    .replace('/', ".");
                let line = format!("{at}: the schema refuses it: {error}");
                // One line per key: the key check may have named it, or a key below it, already
                // (the schema reports an unknown key at its parent).
                let named = |b: &String| {
                    let key = b.split(':').next().unwrap_or_default();
                    at.is_empty() || key == at || key.starts_with(&format!("{at}."))
                };
                if !bad.iter().any(named) {
                    bad.push(line);
                }
            }
        }
        bad
    }

    fn check(&self, path: &[String], value: &Value) -> Result<(), String> {
        match self {
            Contract::Schema {
                schema,
                template_only,
                removed,
                sub_contracts,
                ..
            } => check_schema(
                SchemaKeys {
                    schema,
                    template_only,
                    removed,
                    sub_contracts,
                },
                path,
                value,
            ),
            Contract::Defaults {
                defaults,
                istio_profiles,
                descope_pilot,
                template_only,
                ..
            } => {
                if is_template_only(template_only, &path.join(".")) {
                    return Ok(()); // read by the templates, undeclared: no type known
                }
                check_defaults(
                    defaults,
                    istio_profiles.as_deref(),
                    *descope_pilot,
                    path,
                    value,
                )
            }
        }
    }
}

/// What a schema contract checks a key against (the fields of [`Contract::Schema`]).
struct SchemaKeys<'a> {
    schema: &'a Value,
    template_only: &'a [String],
    removed: &'a [String],
    sub_contracts: &'a [(String, Vec<String>)],
}

/// A key and its value against a chart's JSON schema: removed keys, the keys the templates read
/// undeclared, open objects and the keys known from elsewhere.
fn check_schema(keys: SchemaKeys<'_>, path: &[String], value: &Value) -> Result<(), String> {
    let SchemaKeys {
        schema,
        template_only,
        removed,
        sub_contracts,
    } = keys;
    let dotted = path.join(".");
    if let Some(key) = removed
        .iter()
        .find(|k| dotted == **k || dotted.starts_with(&format!("{k}.")))
    {
        return Err(format!(
            "`{key}` was removed from the chart (its validate.yaml refuses it)"
        ));
    }
    let mut node = deref(schema, schema);
    for (depth, key) in path.iter().enumerate() {
        let props = node.get("properties").and_then(Value::as_object);
        // A map of named entries sharing one schema (Traefik's `ports.<name>`).
        let shared = node.get("additionalProperties").filter(|a| a.is_object());
        match props.and_then(|p| p.get(key)).or(shared) {
            Some(next) => node = deref(schema, next),
            None => {
                let here = path[..depth].join(".");
                if let Some((_, allowed)) = sub_contracts.iter().find(|(p, _)| *p == here) {
                    let rest = path[depth..].join(".");
                    return if allowed.contains(&rest) {
                        Ok(())
                    } else {
                        Err(format!(
                            "`{rest}` is not a field the chart's `{here}` takes"
                        ))
                    };
                }
                if is_template_only(template_only, &dotted) {
                    return Ok(()); // read by the templates, undeclared: no type known
                }
                let open = props.is_none()
                    && (schema_types(node).is_empty()
                        || schema_types(node).iter().any(|t| t == "object"));
                return if open && node.get("additionalProperties") != Some(&Value::Bool(false)) {
                    Ok(())
                } else {
                    Err(format!("no key `{key}` here in the chart"))
                };
            }
        }
    }
    let allowed = schema_types(node);
    if type_fits(&allowed, value) {
        Ok(())
    } else {
        Err(format!(
            "a {} where the chart takes {}",
            json_type(value),
            allowed.join(" or ")
        ))
    }
}

/// A key and its value against the chart's defaults (no schema): its type is the default's;
/// Istio's profile names are files of the chart.
fn check_defaults(
    defaults: &Value,
    istio_profiles: Option<&[String]>,
    descope_pilot: bool,
    path: &[String],
    value: &Value,
) -> Result<(), String> {
    let path: &[String] =
        if descope_pilot && path.first().is_some_and(|k| k == "pilot") && path.len() > 1 {
            &path[1..]
        } else {
            path
        };
    if let Some(profiles) = istio_profiles
        && path.len() == 1
        && ["profile", "platform", "compatibilityVersion"].contains(&path[0].as_str())
    {
        let name = value.as_str().ok_or("a profile name is a string")?;
        let file = match path[0].as_str() {
            "profile" => name.to_owned(),
            "platform" => format!("platform-{name}"),
            _ => format!("compatibility-version-{name}"),
        };
        return if profiles.contains(&file) {
            Ok(())
        } else {
            Err(format!(
                "the chart has no files/profile-{file}.yaml: helm would fail"
            ))
        };
    }
    if istio_profiles.is_some() && path.first().is_some_and(|k| k == "defaults") {
        return Err("setting `defaults` makes the chart fail".into());
    }
    let mut node = defaults;
    for key in path {
        match node.get(key) {
            Some(next) => node = next,
            None if node.as_object().is_some_and(|m| m.is_empty()) => return Ok(()), // open map
            None => return Err(format!("no key `{key}` here in the chart")),
        }
    }
    let (want, got) = (json_type(node), json_type(value));
    if want == "null"
        || want == got
        || (want == "number" && got == "integer")
        || (want == "integer" && got == "number")
    {
        Ok(())
    } else {
        Err(format!("a {got} where the chart's default is a {want}"))
    }
}

fn contract(chart: &str) -> Option<Contract> {
    match chart {
        "cilium" => cilium_contract(),
        "cert-manager" => cert_manager_contract(),
        "base" | "istiod" => istio_contract(chart),
        "traefik" | "external-dns" => schema_contract(chart),
        "crowdsec" | "ceph-csi-rbd" | "snapshot-controller" => defaults_contract(chart),
        other => panic!("no contract for {other}"),
    }
}

/// A profile's example config, and for the edge its day-2 variants (enforce, strict WireGuard,
/// no Hubble UI).
fn variants(profile: Profile) -> Vec<(ClusterConfig, PathBuf)> {
    let (example, path) = example(profile);
    let mut variants = vec![(example.clone(), path.clone())];
    if let ClusterConfig::Edge(platform) = example {
        let mut day2 = platform;
        day2.cilium.policy_audit_mode = false;
        day2.cilium.wireguard.strict_mode = true;
        day2.cilium.hubble.ui = false;
        render_platform::check(&day2).unwrap();
        variants.push((ClusterConfig::Edge(day2), path));
    }
    variants
}

#[test]
fn every_key_we_set_exists_in_the_chart_with_a_compatible_type() {
    for (profile, component) in helm_components() {
        let Some(contract) = contract(chart(component)) else {
            return;
        };
        for (cluster, path) in variants(profile) {
            let values = values_of(component, &cluster, &path);
            let bad = contract.violations(&values);
            assert!(
                bad.is_empty(),
                "{} {}: {bad:#?}",
                profile.name(),
                component.name
            );
        }
    }
}

#[test]
fn the_talos_values_are_there() {
    let values = our_values(Profile::Edge, "cilium");
    for (pointer, want) in [
        ("/ipam/mode", json!("kubernetes")),
        ("/kubeProxyReplacement", json!(true)),
        ("/k8sServiceHost", json!("localhost")),
        ("/k8sServicePort", json!(7445)),
        ("/cgroup/autoMount/enabled", json!(false)),
        ("/cgroup/hostRoot", json!("/sys/fs/cgroup")),
        ("/nodePort/range", json!("80,443")),
        ("/policyAuditMode", json!(true)),
        ("/encryption/type", json!("wireguard")),
    ] {
        assert_eq!(values.pointer(pointer), Some(&want), "{pointer}");
    }
    for caps in [
        "/securityContext/capabilities/ciliumAgent",
        "/securityContext/capabilities/cleanCiliumState",
    ] {
        let caps = values.pointer(caps).unwrap().as_array().unwrap();
        assert!(
            !caps.contains(&json!("SYS_MODULE")),
            "Talos forbids SYS_MODULE: {caps:?}"
        );
    }
    let cm = our_values(Profile::Edge, "cert-manager");
    assert_eq!(cm.pointer("/crds/enabled"), Some(&json!(true)));
    assert_eq!(cm.pointer("/config/gatewayAPI/enabled"), Some(&json!(true)));
}

/// Our values with one key changed, and the path the contract must name.
fn broken(profile: Profile, name: &str, pointer_path: &[&str], value: Value) -> Value {
    let mut values = our_values(profile, name);
    let mut slot = &mut values;
    for key in pointer_path {
        slot = slot
            .as_object_mut()
            .unwrap()
            .entry(*key)
            .or_insert(json!({}));
    }
    *slot = value;
    values
}

// A table of cases, one refusal of one chart each, and the loop that runs them: read whole, a
// reader finds a chart's refusal by its name; split, the table would only be in two places.
#[allow(clippy::too_many_lines)]
#[test]
fn a_typo_a_removed_key_an_old_form_or_a_wrong_type_is_refused_for_every_chart() {
    let cases: Vec<(Profile, &str, &[&str], Value, &str)> = vec![
        (
            Profile::Edge,
            "cilium",
            &["kubeProxyReplacment"],
            json!(true),
            "no key `kubeProxyReplacment`",
        ),
        (
            Profile::Edge,
            "cilium",
            &["tunnel"],
            json!("vxlan"),
            "`tunnel` was removed",
        ),
        (
            Profile::Edge,
            "cilium",
            &["encryption", "strictMode", "enabled"],
            json!(true),
            "no key `enabled`",
        ),
        (
            Profile::Edge,
            "cilium",
            &["nodePort", "enabled"],
            json!(true),
            "no key `enabled`",
        ),
        (
            Profile::Edge,
            "cilium",
            &["ipam", "mode"],
            json!(["kubernetes"]),
            "a array where the chart takes string",
        ),
        (
            Profile::Edge,
            "cilium",
            &["cgroup", "autoMount"],
            json!(false),
            "a boolean where the chart takes object",
        ),
        (
            Profile::Edge,
            "cert-manager",
            &["crds", "enable"],
            json!(true),
            "no key `enable`",
        ),
        (
            Profile::Edge,
            "cert-manager",
            &["installCRD"],
            json!(true),
            "no key `installCRD`",
        ),
        (
            Profile::Edge,
            "cert-manager",
            &["config", "gatewayApi", "enabled"],
            json!(true),
            "`gatewayApi.enabled` is not a field",
        ),
        (
            Profile::Edge,
            "cert-manager",
            &["crds", "keep"],
            json!("yes"),
            "a string where the chart takes boolean",
        ),
        (
            Profile::Edge,
            "istio-base",
            &["global", "istioNamspace"],
            json!("istio-system"),
            "no key `istioNamspace`",
        ),
        (
            Profile::Edge,
            "istio-base",
            &["base", "enableCRDTemplates"],
            json!("true"),
            "a string where the chart's default is a boolean",
        ),
        (
            Profile::Edge,
            "istiod",
            &["pilot", "autoscaleEnabld"],
            json!(false),
            "no key `autoscaleEnabld`",
        ),
        (
            Profile::Edge,
            "istiod",
            &["profile"],
            json!("default"),
            "no files/profile-default.yaml",
        ),
        (
            Profile::Edge,
            "istiod",
            &["defaults", "env"],
            json!({"A": "b"}),
            "`defaults` makes the chart fail",
        ),
        // The onprem profile's charts.
        (
            Profile::Onprem,
            "traefik",
            &["logs", "access", "enabled"],
            json!(true),
            "no key `logs`",
        ),
        (
            Profile::Onprem,
            "traefik",
            &["ports", "web", "http", "middleware"],
            json!(["traefik-crowdsec@kubernetescrd"]),
            "no key `middleware`",
        ),
        (
            Profile::Onprem,
            "traefik",
            &["service", "spec", "externalTraficPolicy"],
            json!("Local"),
            "`externalTraficPolicy` is not a field",
        ),
        (
            Profile::Onprem,
            "traefik",
            &["deployment", "replicas"],
            json!("2"),
            "a string where the chart takes integer",
        ),
        (
            Profile::Onprem,
            "external-dns",
            &["policy"],
            json!("upsert"),
            "the schema refuses it",
        ),
        (
            Profile::Onprem,
            "external-dns",
            &["domainFilter"],
            json!(["k8s.exemple.fr"]),
            "no key `domainFilter`",
        ),
        (
            Profile::Onprem,
            "crowdsec",
            &["container_runtime"],
            json!("cri-o"),
            "the schema refuses it",
        ),
        (
            Profile::Onprem,
            "crowdsec",
            &["agent", "acquisitions"],
            json!([]),
            "no key `acquisitions`",
        ),
        (
            Profile::Onprem,
            "ceph-csi-rbd",
            &["storageclass"],
            json!({"create": true}),
            "no key `storageclass`",
        ),
        (
            Profile::Onprem,
            "ceph-csi-rbd",
            &["csiConfig"],
            json!("clusterID: x"),
            "a string where the chart's default is a array",
        ),
        (
            Profile::Onprem,
            "snapshot-controller",
            &["installCRD"],
            json!(true),
            "no key `installCRD`",
        ),
        (
            Profile::Onprem,
            "cilium",
            &["l2announcement", "enabled"],
            json!(true),
            "no key `l2announcement`",
        ),
    ];
    for (profile, name, path, value, needle) in cases {
        let Some(contract) = contract(chart(component(profile, name))) else {
            return;
        };
        let bad = contract.violations(&broken(profile, name, path, value));
        let dotted = path.join(".");
        assert!(
            bad.iter()
                .any(|line| line.starts_with(&dotted) && line.contains(needle)),
            "{}: {dotted}: `{needle}` not in {bad:#?}",
            name
        );
        assert_eq!(bad.len(), 1, "{}: only the broken key: {bad:#?}", name);
    }
}

#[test]
fn open_objects_take_any_key_and_template_only_keys_are_accepted() {
    let cases: Vec<(Profile, &str, &[&str], Value)> = vec![
        (
            Profile::Edge,
            "cilium",
            &["podAnnotations", "example.com/anything"],
            json!("x"),
        ),
        (
            Profile::Edge,
            "cilium",
            &["resources", "limits", "memory"],
            json!("1Gi"),
        ),
        (
            Profile::Edge,
            "cilium",
            &["loadBalancer", "mode"],
            json!("dsr"),
        ),
        (
            Profile::Edge,
            "cert-manager",
            &["podAnnotations", "example.com/anything"],
            json!("x"),
        ),
        (
            Profile::Edge,
            "cert-manager",
            &["resources", "requests", "cpu"],
            json!("10m"),
        ),
        (
            Profile::Edge,
            "istiod",
            &["env", "PILOT_ANYTHING"],
            json!("1"),
        ),
        (
            Profile::Edge,
            "istiod",
            &["pilot", "env", "PILOT_ANYTHING"],
            json!("1"),
        ),
        (Profile::Edge, "istiod", &["profile"], json!("stable")),
    ];
    for (profile, name, path, value) in cases {
        let Some(contract) = contract(chart(component(profile, name))) else {
            return;
        };
        let bad = contract.violations(&broken(profile, name, path, value));
        assert!(bad.is_empty(), "{}: {}: {bad:#?}", name, path.join("."));
    }
}

/// The control planes' label and taint, as Talos sets them when control planes take no workloads
/// (`cluster.allowSchedulingOnControlPlanes: false`, talos/patches/60).
const CONTROL_PLANE: &str = "node-role.kubernetes.io/control-plane";

/// Our values over the chart's own defaults (what helm renders from).
fn effective(name: &str, chart: &str) -> Option<Value> {
    let dir = chart_dir(chart)?;
    let mut defaults = yaml_file(&dir.join("values.yaml"));
    if let Some(inner) = defaults.get("_internal_defaults_do_not_set").cloned() {
        defaults = inner; // Istio's charts keep their defaults one level down
    }
    merge(&mut defaults, our_values(Profile::Edge, name));
    Some(defaults)
}

#[test]
fn istiod_runs_on_the_control_planes_and_no_budget_can_block_draining_the_worker() {
    let Some(istiod) = effective("istiod", "istiod") else {
        return;
    };
    // Placed on the control planes, whose NoSchedule taint it tolerates.
    assert_eq!(
        istiod["nodeSelector"],
        json!({CONTROL_PLANE: ""}),
        "{istiod:#}"
    );
    let tolerates = istiod["tolerations"].as_array().unwrap().iter().any(|t| {
        t["key"] == CONTROL_PLANE
            && (t["operator"] == "Exists" || t.get("value").is_none_or(|v| v == ""))
            && t.get("effect").is_none_or(|e| e == "NoSchedule" || e == "")
    });
    assert!(tolerates, "{:#}", istiod["tolerations"]);
    // The chart renders its PodDisruptionBudget (minAvailable pdb.minAvailable) only above one
    // replica (istio 1.30.3 manifests/charts/istio-control/istio-discovery/templates/
    // poddisruptionbudget.yaml: autoscaleMin > 1, or replicaCount > 1 without autoscaling).
    let autoscale = istiod["autoscaleEnabled"].as_bool().unwrap();
    let replicas = if autoscale {
        istiod["autoscaleMin"].as_u64().unwrap()
    } else {
        istiod["replicaCount"].as_u64().unwrap()
    };
    let budget =
        istiod["global"]["defaultPodDisruptionBudget"]["enabled"] == json!(true) && replicas > 1;
    if budget {
        // Then a drain must always find a replica to spare: fewer required than running, each
        // on its own control plane, and enough control planes for them all.
        let min_available = istiod["pdb"]["minAvailable"].as_u64().unwrap();
        assert!(min_available < replicas, "{min_available} of {replicas}");
        let spread = &istiod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
        assert_eq!(
            spread[0]["topologyKey"], "kubernetes.io/hostname",
            "{spread:#}"
        );
        assert_eq!(spread[0]["labelSelector"]["matchLabels"]["app"], "istiod");
        let infra: Value = serde_json::from_str(
            &std::fs::read_to_string(testkit::workspace::root().join("config/infra.example.json"))
                .unwrap(),
        )
        .unwrap();
        assert!(replicas <= infra["control_plane"]["count"].as_u64().unwrap());
    }
    // What runs on the worker: no chart's budget is switched on (every podDisruptionBudget of
    // Cilium's and cert-manager's values, defaults included).
    for (name, chart) in [("cilium", "cilium"), ("cert-manager", "cert-manager")] {
        let Some(values) = effective(name, chart) else {
            return;
        };
        let mut budgets = 0;
        for (path, value) in leaves(&values) {
            if path.len() >= 2
                && path[path.len() - 2] == "podDisruptionBudget"
                && path[path.len() - 1] == "enabled"
            {
                budgets += 1;
                assert_eq!(value, json!(false), "{chart}: {}", path.join("."));
            }
        }
        assert!(
            budgets > 0,
            "{chart}: no podDisruptionBudget found in its values"
        );
    }
}
