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
//! A key is open below an object the chart leaves free (no properties in the schema; `{}` in
//! Istio's defaults: annotations, resources, env). Types: the value's JSON type must be one the
//! schema allows (or the type of Istio's default, when the default is not null).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use render_platform::Release;
use serde_json::{Value, json};

const TEST: &str = "values_contract";

fn chart_dir(chart: &str) -> Option<PathBuf> {
    let shared = testkit::workspace::shared_dir(TEST)?;
    let versions = versions();
    let version = match chart {
        "cilium" => &versions["CILIUM_CONTRACT_VERSION"],
        "cert-manager" => &versions["CERT_MANAGER_CONTRACT_VERSION"],
        "base" | "istiod" => &versions["ISTIO_CONTRACT_VERSION"],
        other => panic!("no contract for {other}"),
    };
    let dir = shared.join("charts").join(chart).join(version);
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

/// Our values for a release: the committed file merged with what render-platform gives for the
/// example config (helm merges the second -f over the first the same way: maps deep, the rest
/// replaced).
pub(crate) fn our_values(release: Release, platform: &render_platform::PlatformConfig) -> Value {
    let mut base =
        yaml_file(&testkit::workspace::root().join(format!("values/{}.yaml", release.name())));
    merge(&mut base, render_platform::render(platform, release));
    base
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
    },
    /// Istio: the defaults under `_internal_defaults_do_not_set`, the profile names.
    Istio {
        defaults: Value,
        profiles: Vec<String>,
        descope_pilot: bool,
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
    Some(Contract::Istio {
        defaults,
        profiles,
        descope_pilot: chart == "istiod",
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
        leaves(values)
            .into_iter()
            .filter_map(|(path, value)| {
                self.check(&path, &value)
                    .err()
                    .map(|why| format!("{}: {why}", path.join(".")))
            })
            .collect()
    }

    fn check(&self, path: &[String], value: &Value) -> Result<(), String> {
        match self {
            Contract::Schema {
                schema,
                template_only,
                removed,
                sub_contracts,
            } => {
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
                    match props.and_then(|p| p.get(key)) {
                        Some(next) => node = deref(schema, next),
                        None => {
                            let here = path[..depth].join(".");
                            if let Some((_, allowed)) =
                                sub_contracts.iter().find(|(p, _)| *p == here)
                            {
                                let rest = path[depth..].join(".");
                                return if allowed.contains(&rest) {
                                    Ok(())
                                } else {
                                    Err(format!(
                                        "`{rest}` is not a field the chart's `{here}` takes"
                                    ))
                                };
                            }
                            if template_only
                                .iter()
                                .any(|k| dotted == *k || dotted.starts_with(&format!("{k}.")))
                            {
                                return Ok(()); // read by the templates, undeclared: no type known
                            }
                            let open = props.is_none()
                                && (schema_types(node).is_empty()
                                    || schema_types(node).iter().any(|t| t == "object"));
                            return if open
                                && node.get("additionalProperties") != Some(&Value::Bool(false))
                            {
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
            Contract::Istio {
                defaults,
                profiles,
                descope_pilot,
            } => {
                let path: &[String] = if *descope_pilot
                    && path.first().is_some_and(|k| k == "pilot")
                    && path.len() > 1
                {
                    &path[1..]
                } else {
                    path
                };
                if path.len() == 1
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
                if path.first().is_some_and(|k| k == "defaults") {
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
        }
    }
}

fn contract(release: Release) -> Option<Contract> {
    match release {
        Release::Cilium => cilium_contract(),
        Release::CertManager => cert_manager_contract(),
        Release::IstioBase => istio_contract("base"),
        Release::Istiod => istio_contract("istiod"),
    }
}

/// The example config and the day-2 variants (enforce, strict WireGuard, no Hubble UI).
fn platform_variants() -> Vec<render_platform::PlatformConfig> {
    let example = example_platform();
    let mut day2 = example.clone();
    day2.cilium.policy_audit_mode = false;
    day2.cilium.wireguard.strict_mode = true;
    day2.cilium.hubble.ui = false;
    render_platform::check(&day2).unwrap();
    vec![example, day2]
}

#[test]
fn every_key_we_set_exists_in_the_chart_with_a_compatible_type() {
    for release in Release::ALL {
        let Some(contract) = contract(release) else {
            return;
        };
        for platform in platform_variants() {
            let values = our_values(release, &platform);
            let bad = contract.violations(&values);
            assert!(bad.is_empty(), "{}: {bad:#?}", release.name());
        }
    }
}

#[test]
fn the_talos_values_are_there() {
    let values = our_values(Release::Cilium, &example_platform());
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
    let cm = our_values(Release::CertManager, &example_platform());
    assert_eq!(cm.pointer("/crds/enabled"), Some(&json!(true)));
    assert_eq!(cm.pointer("/config/gatewayAPI/enabled"), Some(&json!(true)));
}

/// Our values with one key changed, and the path the contract must name.
fn broken(release: Release, pointer_path: &[&str], value: Value) -> Value {
    let mut values = our_values(release, &example_platform());
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

#[test]
fn a_typo_a_removed_key_an_old_form_or_a_wrong_type_is_refused_for_every_chart() {
    let cases: Vec<(Release, &[&str], Value, &str)> = vec![
        (
            Release::Cilium,
            &["kubeProxyReplacment"],
            json!(true),
            "no key `kubeProxyReplacment`",
        ),
        (
            Release::Cilium,
            &["tunnel"],
            json!("vxlan"),
            "`tunnel` was removed",
        ),
        (
            Release::Cilium,
            &["encryption", "strictMode", "enabled"],
            json!(true),
            "no key `enabled`",
        ),
        (
            Release::Cilium,
            &["nodePort", "enabled"],
            json!(true),
            "no key `enabled`",
        ),
        (
            Release::Cilium,
            &["ipam", "mode"],
            json!(["kubernetes"]),
            "a array where the chart takes string",
        ),
        (
            Release::Cilium,
            &["cgroup", "autoMount"],
            json!(false),
            "a boolean where the chart takes object",
        ),
        (
            Release::CertManager,
            &["crds", "enable"],
            json!(true),
            "no key `enable`",
        ),
        (
            Release::CertManager,
            &["installCRD"],
            json!(true),
            "no key `installCRD`",
        ),
        (
            Release::CertManager,
            &["config", "gatewayApi", "enabled"],
            json!(true),
            "`gatewayApi.enabled` is not a field",
        ),
        (
            Release::CertManager,
            &["crds", "keep"],
            json!("yes"),
            "a string where the chart takes boolean",
        ),
        (
            Release::IstioBase,
            &["global", "istioNamspace"],
            json!("istio-system"),
            "no key `istioNamspace`",
        ),
        (
            Release::IstioBase,
            &["base", "enableCRDTemplates"],
            json!("true"),
            "a string where the chart's default is a boolean",
        ),
        (
            Release::Istiod,
            &["pilot", "autoscaleEnabld"],
            json!(false),
            "no key `autoscaleEnabld`",
        ),
        (
            Release::Istiod,
            &["profile"],
            json!("default"),
            "no files/profile-default.yaml",
        ),
        (
            Release::Istiod,
            &["defaults", "env"],
            json!({"A": "b"}),
            "`defaults` makes the chart fail",
        ),
    ];
    for (release, path, value, needle) in cases {
        let Some(contract) = contract(release) else {
            return;
        };
        let bad = contract.violations(&broken(release, path, value));
        let dotted = path.join(".");
        assert!(
            bad.iter()
                .any(|line| line.starts_with(&dotted) && line.contains(needle)),
            "{}: {dotted}: `{needle}` not in {bad:#?}",
            release.name()
        );
        assert_eq!(
            bad.len(),
            1,
            "{}: only the broken key: {bad:#?}",
            release.name()
        );
    }
}

#[test]
fn open_objects_take_any_key_and_template_only_keys_are_accepted() {
    let cases: Vec<(Release, &[&str], Value)> = vec![
        (
            Release::Cilium,
            &["podAnnotations", "example.com/anything"],
            json!("x"),
        ),
        (
            Release::Cilium,
            &["resources", "limits", "memory"],
            json!("1Gi"),
        ),
        (Release::Cilium, &["loadBalancer", "mode"], json!("dsr")),
        (
            Release::CertManager,
            &["podAnnotations", "example.com/anything"],
            json!("x"),
        ),
        (
            Release::CertManager,
            &["resources", "requests", "cpu"],
            json!("10m"),
        ),
        (Release::Istiod, &["env", "PILOT_ANYTHING"], json!("1")),
        (
            Release::Istiod,
            &["pilot", "env", "PILOT_ANYTHING"],
            json!("1"),
        ),
        (Release::Istiod, &["profile"], json!("stable")),
    ];
    for (release, path, value) in cases {
        let Some(contract) = contract(release) else {
            return;
        };
        let bad = contract.violations(&broken(release, path, value));
        assert!(
            bad.is_empty(),
            "{}: {}: {bad:#?}",
            release.name(),
            path.join(".")
        );
    }
}

/// The control planes' label and taint, as Talos sets them when control planes take no workloads
/// (`cluster.allowSchedulingOnControlPlanes: false`, talos/patches/60).
const CONTROL_PLANE: &str = "node-role.kubernetes.io/control-plane";

/// Our values over the chart's own defaults (what helm renders from).
fn effective(release: Release, chart: &str) -> Option<Value> {
    let dir = chart_dir(chart)?;
    let mut defaults = yaml_file(&dir.join("values.yaml"));
    if let Some(inner) = defaults.get("_internal_defaults_do_not_set").cloned() {
        defaults = inner; // Istio's charts keep their defaults one level down
    }
    merge(&mut defaults, our_values(release, &example_platform()));
    Some(defaults)
}

#[test]
fn istiod_runs_on_the_control_planes_and_no_budget_can_block_draining_the_worker() {
    let Some(istiod) = effective(Release::Istiod, "istiod") else {
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
    for (release, chart) in [
        (Release::Cilium, "cilium"),
        (Release::CertManager, "cert-manager"),
    ] {
        let Some(values) = effective(release, chart) else {
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
