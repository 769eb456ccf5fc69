//! Cluster profiles: each is a declared, ordered list of components, and the platform layer is
//! one mechanism that renders and installs any of them (`pipelines/platform.sh` reads the plan
//! this module writes and knows nothing of a profile's content).
//!
//! A component is one of five kinds, each installed the same way whatever the profile:
//!
//! | kind | installed by | waits for |
//! | --- | --- | --- |
//! | `helm` | `helm upgrade --install --wait --atomic`, values layered: the committed files, then the cluster's (rendered); a chart's `crds/` applied first from `helm show crds` ([`ChartCrds::Folder`]) | the release's resources ready |
//! | `crds` | server-side apply of vendored files, each checked against its sha256 pin | the CRDs Established |
//! | `namespaces` | server-side apply of the rendered Namespaces (kept on destroy: they hold the volumes' claims) | |
//! | `objects` | server-side apply of the rendered objects, taking back fields edited by hand | the CRDs they need created and Established before; a rollout after, when named |
//! | `secrets` | the cluster's SOPS file decrypted at apply time, turned into Secrets, server-side applied | |
//! | `talos` | `talosctl patch machineconfig` (no reboot) of each node `<component>.tsv` lists, with the patch it names | |
//!
//! [`check`] holds a profile to its order: a component comes after every component it depends
//! on, and the CRDs its objects need are brought by one of those.

use std::fmt::Write as _;

/// A component of a profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Component {
    /// The release, or the rendered file's stem (`<name>.json`).
    pub name: &'static str,
    /// Where it is installed; `None` for cluster-scoped objects.
    pub namespace: Option<&'static str>,
    pub kind: Kind,
    /// Components that must be installed before this one.
    pub depends_on: &'static [&'static str],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Helm {
        chart: &'static str,
        /// The `k8s/versions.env` keys of the chart's repository and version.
        repo_pin: &'static str,
        version_pin: &'static str,
        /// The committed values files, relative to the repository, in the order helm merges
        /// them; the cluster's rendered values come last.
        values: &'static [&'static str],
        /// The CRDs the release brings (its templates, its `crds/`, or its operator): at least
        /// one of each API group it owns, since `DELETE_CRDS=yes` deletes every CRD of the
        /// groups the profile's components own (and nothing else).
        crds: &'static [&'static str],
        /// Where its CRDs come from, which says what helm does with them.
        crds_from: ChartCrds,
        /// What uninstalling the release takes from the cluster beyond itself (the CNI, a
        /// storage driver), said before `destroy` asks.
        uninstalling: Option<&'static str>,
    },
    /// Vendored CRD files, pinned one by one: `<prefix><NAME>=<file>:<sha256>` in
    /// `k8s/versions.env`, the bundle's version under `version_pin`.
    Crds {
        pins_prefix: &'static str,
        version_pin: &'static str,
        crds: &'static [&'static str],
    },
    Namespaces,
    Objects {
        /// CRDs that must be Established before the objects are applied.
        needs: &'static [&'static str],
        /// A workload whose rollout is waited for after the apply (`deployment/<name>` in the
        /// component's namespace).
        ready: Option<&'static str>,
        /// Secrets (`namespace/name`) the apply makes from the operator's environment after the
        /// objects (`render-platform --environment-secret`), listed in the plan line.
        from_environment: &'static [&'static str],
    },
    Secrets,
    /// A Talos machine-config patch, applied through Talos's API to the nodes listed in the
    /// rendered `<name>.tsv` (endpoint, node, patch file).
    Talos,
}

/// Where a release's CRDs come from, which says what helm does with them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChartCrds {
    /// None, or registered by the release's operator as it starts, or templates annotated to
    /// stay: `helm uninstall` leaves them.
    Elsewhere,
    /// Templates of the release, with no `helm.sh/resource-policy: keep`: `helm uninstall`
    /// deletes them, and every object of them. `destroy` keeps such a release unless
    /// `DELETE_CRDS=yes`.
    Templates,
    /// The chart's `crds/` folder, which helm installs on the first install only and never
    /// upgrades: `apply` applies `helm show crds` of the pinned chart before each upgrade, as
    /// such a chart asks (traefik-helm-chart v41.3.0, README.md, lines 149-164).
    Folder,
}

impl ChartCrds {
    /// Its word in the plan.
    fn word(self) -> &'static str {
        match self {
            ChartCrds::Elsewhere => "",
            ChartCrds::Templates => "templates",
            ChartCrds::Folder => "folder",
        }
    }
}

impl Kind {
    pub fn word(&self) -> &'static str {
        match self {
            Kind::Helm { .. } => "helm",
            Kind::Crds { .. } => "crds",
            Kind::Namespaces => "namespaces",
            Kind::Objects { .. } => "objects",
            Kind::Secrets => "secrets",
            Kind::Talos => "talos",
        }
    }

    /// The CRDs a component of this kind brings.
    fn brings(&self) -> &'static [&'static str] {
        match self {
            Kind::Helm { crds, .. } | Kind::Crds { crds, .. } => crds,
            _ => &[],
        }
    }

    /// The API groups of the CRDs it brings, each once, in order.
    fn crd_groups(&self) -> Vec<&'static str> {
        let mut groups: Vec<&'static str> = Vec::new();
        for crd in self.brings() {
            let group = crd.split_once('.').map_or(*crd, |(_, group)| group);
            if !groups.contains(&group) {
                groups.push(group);
            }
        }
        groups
    }
}

/// Why a profile's order is wrong; the message names the components.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("profile `{profile}`: {message}")]
pub struct OrderError {
    pub profile: &'static str,
    pub message: String,
}

/// Checks a profile: unique names, every dependency declared earlier, every CRD an `objects`
/// component needs brought by one of its dependencies (directly or through theirs).
pub fn check(profile: &'static str, components: &[Component]) -> Result<(), OrderError> {
    let fail = |message: String| Err(OrderError { profile, message });
    for (at, component) in components.iter().enumerate() {
        if components[..at].iter().any(|c| c.name == component.name) {
            return fail(format!("`{}` is declared twice", component.name));
        }
        for dependency in component.depends_on {
            match components.iter().position(|c| c.name == *dependency) {
                None => {
                    return fail(format!(
                        "`{}` depends on `{dependency}`, which is not in the profile",
                        component.name
                    ));
                }
                Some(there) if there >= at => {
                    return fail(format!(
                        "`{}` depends on `{dependency}`, which comes after it",
                        component.name
                    ));
                }
                Some(_) => {}
            }
        }
        if let Kind::Objects { needs, .. } = component.kind {
            let before = dependencies(components, component);
            for crd in needs {
                if !NODES_SERVE.contains(crd)
                    && !before.iter().any(|c| c.kind.brings().contains(crd))
                {
                    return fail(format!(
                        "`{}` needs the CRD {crd}, which none of the components it depends on brings",
                        component.name
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The CRDs the nodes register themselves, which no component brings: Talos's ServiceAccount,
/// served once the control planes' Talos API access is on
/// (talos/patches/65-talos-api-access.controlplane.yaml).
pub const NODES_SERVE: &[&str] = &["serviceaccounts.talos.dev"];

/// Every component `component` depends on, directly or not (it comes after all of them once
/// [`check`] passed).
fn dependencies<'a>(components: &'a [Component], component: &Component) -> Vec<&'a Component> {
    let mut found: Vec<&Component> = Vec::new();
    let mut next: Vec<&str> = component.depends_on.to_vec();
    while let Some(name) = next.pop() {
        if found.iter().any(|c| c.name == name) {
            continue;
        }
        if let Some(dependency) = components.iter().find(|c| c.name == name) {
            found.push(dependency);
            next.extend(dependency.depends_on);
        }
    }
    found
}

/// The file of `--out-dir` that lists the components in install order.
pub const PLAN_FILE: &str = "components.tsv";

/// One line of the plan, with the pins resolved and what a kind needs at apply time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanLine {
    pub component: Component,
    /// `helm`: the chart; `crds`: the pins' prefix; `secrets`: the SOPS file.
    pub source: String,
    pub repository: String,
    pub version: String,
    /// `helm`: the committed values files; `secrets`: `namespace/name` of each Secret.
    pub list: Vec<String>,
}

/// The header of the plan, naming its columns (tab-separated, `-` for an empty field, lists
/// comma-separated).
const PLAN_HEADER: &str = "# component\tkind\tnamespace\tsource\trepository\tversion\tlist\tneeds\tready\tdepends\tcrd groups\tcrds from\tuninstalling, in install order\n";

/// The plan's text: one line per component, in install order.
pub fn plan_text(lines: &[PlanLine]) -> String {
    let field = |value: &str| {
        if value.is_empty() {
            "-".to_owned()
        } else {
            value.to_owned()
        }
    };
    let mut text = String::from(PLAN_HEADER);
    for line in lines {
        let c = &line.component;
        let (needs, ready) = match c.kind {
            Kind::Objects { needs, ready, .. } => (needs.join(","), ready.unwrap_or_default()),
            _ => (String::new(), ""),
        };
        let (crds_from, uninstalling) = match c.kind {
            Kind::Helm {
                crds_from,
                uninstalling,
                ..
            } => (crds_from.word(), uninstalling.unwrap_or_default()),
            _ => ("", ""),
        };
        let _ = writeln!(
            text,
            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            c.name,
            c.kind.word(),
            field(c.namespace.unwrap_or_default()),
            field(&line.source),
            field(&line.repository),
            field(&line.version),
            field(&line.list.join(",")),
            field(&needs),
            field(ready),
            field(&c.depends_on.join(",")),
            field(&c.kind.crd_groups().join(",")),
            field(crds_from),
            field(uninstalling),
        );
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// A release; `widgets` brings the CRD widgets.example.com, the others none.
    fn helm(name: &'static str, depends_on: &'static [&'static str]) -> Component {
        let crds: &[&str] = if name == "widgets" {
            &["widgets.example.com"]
        } else {
            &[]
        };
        Component {
            name,
            namespace: Some("ns"),
            kind: Kind::Helm {
                chart: "chart",
                repo_pin: "REPO",
                version_pin: "VERSION",
                values: &[],
                crds,
                crds_from: ChartCrds::Elsewhere,
                uninstalling: (name == "cni").then_some("no pod gets a network"),
            },
            depends_on,
        }
    }

    fn objects(name: &'static str, depends_on: &'static [&'static str]) -> Component {
        Component {
            name,
            namespace: None,
            kind: Kind::Objects {
                needs: &["widgets.example.com"],
                ready: None,
                from_environment: &[],
            },
            depends_on,
        }
    }

    #[test]
    fn a_component_after_what_it_depends_on_passes() {
        let profile = [
            helm("cni", &[]),
            helm("widgets", &["cni"]),
            objects("a-widget", &["widgets"]),
        ];
        check("test", &profile).unwrap();
    }

    #[test]
    fn a_component_before_what_it_depends_on_is_refused_naming_both() {
        let profile = [
            helm("cni", &[]),
            objects("a-widget", &["widgets"]),
            helm("widgets", &["cni"]),
        ];
        let err = check("test", &profile).unwrap_err();
        assert_eq!(
            err.to_string(),
            "profile `test`: `a-widget` depends on `widgets`, which comes after it"
        );
    }

    #[test]
    fn an_unknown_dependency_a_twin_and_a_crd_nobody_brings_are_refused() {
        let err = check("test", &[helm("cni", &["dns"])]).unwrap_err();
        assert!(
            err.message.contains("`dns`, which is not in the profile"),
            "{err}"
        );

        let err = check("test", &[helm("cni", &[]), helm("cni", &[])]).unwrap_err();
        assert!(err.message.contains("`cni` is declared twice"), "{err}");

        // The CRD comes with `widgets`, earlier, but `a-widget` does not depend on it: nothing
        // says `widgets` will stay before it.
        let profile = [
            helm("widgets", &[]),
            helm("cni", &[]),
            objects("a-widget", &["cni"]),
        ];
        let err = check("test", &profile).unwrap_err();
        assert!(
            err.message
                .contains("`a-widget` needs the CRD widgets.example.com"),
            "{err}"
        );
    }

    #[test]
    fn a_crd_brought_by_a_dependency_of_a_dependency_is_enough() {
        let profile = [
            helm("widgets", &[]),
            helm("cni", &["widgets"]),
            objects("a-widget", &["cni"]),
        ];
        check("test", &profile).unwrap();
    }

    #[test]
    fn the_plan_has_one_line_per_component_with_dashes_for_empty_fields() {
        let lines = [
            PlanLine {
                component: helm("cni", &[]),
                source: "chart".into(),
                repository: "https://charts.example".into(),
                version: "1.2.3".into(),
                list: vec!["values/cni.yaml".into()],
            },
            PlanLine {
                component: helm("widgets", &["cni"]),
                source: "chart".into(),
                repository: "https://charts.example".into(),
                version: "1.2.3".into(),
                list: Vec::new(),
            },
            PlanLine {
                component: objects("a-widget", &["cni"]),
                source: String::new(),
                repository: String::new(),
                version: String::new(),
                list: Vec::new(),
            },
        ];
        let text = plan_text(&lines);
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip(1)
            .map(|l| l.split('\t').collect())
            .collect();
        assert_eq!(
            rows,
            [
                vec![
                    "cni",
                    "helm",
                    "ns",
                    "chart",
                    "https://charts.example",
                    "1.2.3",
                    "values/cni.yaml",
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    "no pod gets a network"
                ],
                vec![
                    "widgets",
                    "helm",
                    "ns",
                    "chart",
                    "https://charts.example",
                    "1.2.3",
                    "-",
                    "-",
                    "-",
                    "cni",
                    "example.com",
                    "-",
                    "-"
                ],
                vec![
                    "a-widget",
                    "objects",
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    "widgets.example.com",
                    "-",
                    "cni",
                    "-",
                    "-",
                    "-"
                ],
            ]
        );
    }
}
