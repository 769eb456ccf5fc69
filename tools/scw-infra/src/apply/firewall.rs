//! The control planes' security group: inbound dropped unless a rule accepts it, and exactly the
//! rules the cluster needs: 6443 and 50000 from the admin CIDRs; between nodes 6443, 50000-50001,
//! 10250, 2379-2380 (TCP) and 51871 (UDP, WireGuard).

use std::net::IpAddr;

use ipnet::IpNet;
use scaleway::instance::{CreateSecurityGroup, Policy, Protocol, Rule, SetRule};
use serde::Serialize;

use super::{Address, ApplyStep, Known};
use crate::cluster::Cluster;
use crate::error::InfraError;
use crate::plan::{PlannedId, Ref, Steps};
use crate::tags::Role;

type R<T> = Result<T, InfraError>;

/// Creating the group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CreateGroup {
    pub creates: PlannedId,
    pub name: String,
    pub tags: Vec<String>,
}

/// Making the group's editable rules exactly these (one call; rules already right keep their
/// ids).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SetRules {
    pub security_group: Ref,
    pub rules: Vec<PlannedRule>,
}

/// An inbound accept rule, from a network or a node's address.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct PlannedRule {
    pub protocol: Protocol,
    pub from: Source,
    pub ports: (u32, u32),
}

/// Where a rule accepts traffic from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(untagged)]
pub enum Source {
    Net(IpNet),
    Node(Address),
}

/// A rule as compared between the plan and the group.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RuleSpec {
    pub protocol: Protocol,
    pub ip_range: IpNet,
    pub from: u32,
    pub to: u32,
}

impl RuleSpec {
    /// An inbound accept rule as the API shows it (`dest_port_to` null for one port; an address
    /// without a prefix length is one host).
    pub fn from_rule(rule: &Rule) -> Option<RuleSpec> {
        if rule.direction != "inbound" || rule.action != "accept" {
            return None;
        }
        if !matches!(rule.protocol, Protocol::Tcp | Protocol::Udp) {
            return None;
        }
        let ip_range = rule
            .ip_range
            .parse::<IpNet>()
            .or_else(|_| rule.ip_range.parse::<IpAddr>().map(IpNet::from))
            .ok()?
            .trunc();
        let from = rule.dest_port_from?;
        let to = rule.dest_port_to.unwrap_or(from);
        Some(RuleSpec {
            protocol: rule.protocol.clone(),
            ip_range,
            from,
            to,
        })
    }
}

/// The rules the cluster needs, and only those.
pub fn desired(admin_cidrs: &[IpNet], nodes: &[Address]) -> Vec<PlannedRule> {
    let mut rules = Vec::new();
    for cidr in admin_cidrs {
        for port in [6443, 50000] {
            rules.push(PlannedRule {
                protocol: Protocol::Tcp,
                from: Source::Net(*cidr),
                ports: (port, port),
            });
        }
    }
    for node in nodes {
        let from = match node {
            Address::Known(address) => Source::Net(IpNet::from(*address)),
            pending => Source::Node(pending.clone()),
        };
        for ports in [(6443, 6443), (50000, 50001), (10250, 10250), (2379, 2380)] {
            rules.push(PlannedRule {
                protocol: Protocol::Tcp,
                from: from.clone(),
                ports,
            });
        }
        rules.push(PlannedRule {
            protocol: Protocol::Udp,
            from,
            ports: (51871, 51871),
        });
    }
    rules.sort();
    rules.dedup();
    rules
}

/// The rules with every address resolved (a pending one that stayed unknown is left out),
/// sorted and without duplicates; `None` while one is still pending.
fn specs(rules: &[PlannedRule], known: Option<&Known>) -> Option<Vec<RuleSpec>> {
    let mut out = Vec::new();
    for rule in rules {
        let ip_range = match &rule.from {
            Source::Net(net) => *net,
            Source::Node(address) => match address.resolve(known?) {
                Some(address) => IpNet::from(address),
                None => continue,
            },
        };
        out.push(RuleSpec {
            protocol: rule.protocol.clone(),
            ip_range,
            from: rule.ports.0,
            to: rule.ports.1,
        });
    }
    out.sort();
    out.dedup();
    Some(out)
}

/// The group: found by its tags (it must drop inbound traffic by default), or created.
pub fn plan_group(
    cluster: &Cluster<'_>,
    steps: &mut Steps<ApplyStep>,
    known: &mut Known,
) -> R<Ref> {
    let tags = cluster.names().tags(Role::ControlplaneFirewall);
    let groups = cluster
        .api
        .instance()
        .security_groups(cluster.zone(), &tags)?;
    match groups.as_slice() {
        [group] => {
            if group.inbound_default_policy != Policy::Drop {
                return Err(InfraError::GroupAcceptsInbound {
                    name: group.name.clone(),
                    id: group.id.clone(),
                });
            }
            // An editable rule that is not an inbound accept rule must go too: it is counted,
            // so that a group holding one is never taken for a group already right.
            for rule in cluster.api.instance().rules(cluster.zone(), &group.id)? {
                if !rule.editable {
                    continue;
                }
                match RuleSpec::from_rule(&rule) {
                    Some(spec) => known.rules.push((spec, rule.id)),
                    None => known.foreign_rules += 1,
                }
            }
            Ok(Ref::Existing(group.id.clone()))
        }
        [] => Ok(steps.create(|creates| {
            ApplyStep::CreateSecurityGroup(CreateGroup {
                creates,
                name: cluster.names().security_group(),
                tags: tags.clone(),
            })
        })),
        many => Err(InfraError::Ambiguous {
            count: many.len(),
            kind: "security groups",
            tags: tags.join(","),
        }),
    }
}

/// The rules step, unless the group already has exactly these rules.
pub fn plan_rules(
    cluster: &Cluster<'_>,
    steps: &mut Steps<ApplyStep>,
    known: &Known,
    group: &Ref,
    nodes: &[Address],
) -> R<()> {
    let rules = desired(&cluster.config.admin_cidrs, nodes);
    if group.existing().is_some()
        && let Some(wanted) = specs(&rules, None)
    {
        let mut have: Vec<&RuleSpec> = known.rules.iter().map(|(spec, _)| spec).collect();
        have.sort();
        // `wanted` is sorted without duplicates: equal to it, `have` has none either.
        let same = known.foreign_rules == 0
            && have.len() == wanted.len()
            && have.iter().zip(&wanted).all(|(h, w)| *h == w);
        if same {
            return Ok(());
        }
    }
    steps.push(ApplyStep::SetFirewallRules(SetRules {
        security_group: group.clone(),
        rules,
    }));
    Ok(())
}

impl CreateGroup {
    pub fn execute(&self, cluster: &Cluster<'_>, known: &mut Known) -> R<()> {
        pop_common::info!("creating the control planes' security group");
        let group = cluster.api.instance().create_security_group(
            cluster.zone(),
            &CreateSecurityGroup {
                name: self.name.clone(),
                description: "edgepop control planes: inbound dropped unless a rule accepts it"
                    .into(),
                project: cluster.project.to_owned(),
                tags: self.tags.clone(),
                stateful: true,
                inbound_default_policy: Policy::Drop,
                outbound_default_policy: Policy::Accept,
                enable_default_security: true,
            },
        )?;
        known.created.insert(self.creates, &group.id);
        Ok(())
    }
}

impl SetRules {
    pub fn execute(&self, cluster: &Cluster<'_>, known: &Known, step: usize) -> R<()> {
        let group = known.created.resolve(&self.security_group, step)?;
        let wanted = specs(&self.rules, Some(known)).unwrap_or_default();
        let mut kept: Vec<(&RuleSpec, &str)> = Vec::new();
        for (spec, id) in &known.rules {
            if wanted.contains(spec) && !kept.iter().any(|(k, _)| *k == spec) {
                kept.push((spec, id));
            }
        }
        pop_common::info!(
            "setting the {} firewall rules ({} kept)",
            wanted.len(),
            kept.len()
        );
        let rules: Vec<SetRule> = wanted
            .iter()
            .zip(1u32..)
            .map(|(spec, position)| SetRule {
                id: kept
                    .iter()
                    .find(|(k, _)| *k == spec)
                    .map(|(_, id)| (*id).to_owned()),
                action: "accept",
                protocol: spec.protocol.clone(),
                direction: "inbound",
                ip_range: spec.ip_range.to_string(),
                dest_port_from: spec.from,
                dest_port_to: (spec.to != spec.from).then_some(spec.to),
                position,
            })
            .collect();
        cluster
            .api
            .instance()
            .set_rules(cluster.zone(), &group, &rules)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn rules_read_back_from_the_api_compare_equal_to_the_plan() {
        let rule = Rule {
            id: "r".into(),
            protocol: Protocol::Tcp,
            direction: "inbound".into(),
            action: "accept".into(),
            ip_range: "203.0.113.7".into(),
            dest_port_from: Some(6443),
            dest_port_to: None,
            editable: true,
        };
        assert_eq!(
            RuleSpec::from_rule(&rule),
            Some(RuleSpec {
                protocol: Protocol::Tcp,
                ip_range: "203.0.113.7/32".parse().unwrap(),
                from: 6443,
                to: 6443
            })
        );
    }

    #[test]
    fn a_pending_address_keeps_the_rules_unresolved_until_execution() {
        let admin: Vec<IpNet> = vec!["198.51.100.0/24".parse().unwrap()];
        let known: Vec<Address> = vec![Address::Known("203.0.113.7".parse().unwrap())];
        let rules = desired(&admin, &known);
        assert_eq!(rules.len(), 2 + 5);
        assert_eq!(specs(&rules, None).unwrap().len(), 7);
        let pending = vec![Address::Pending {
            address_of: super::super::NodeOf::Worker("w".into()),
            family: super::super::Family::Ipv6,
        }];
        let rules = desired(&admin, &pending);
        assert!(
            specs(&rules, None).is_none(),
            "not comparable while pending"
        );
        // A worker delivered without IPv6: its rules are left out, the admin ones stay.
        assert_eq!(specs(&rules, Some(&Known::default())).unwrap().len(), 2);
    }
}
