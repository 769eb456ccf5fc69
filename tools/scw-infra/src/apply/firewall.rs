//! The control planes' security group: inbound dropped unless a rule accepts it, and exactly the
//! rules of the flows declared to the control planes (`crates/flows`): one rule a port range and
//! source network, from the admin CIDRs, the control planes' or every node's address. Flows from
//! pods need none: between nodes they travel inside the tunnel, whose flows the group lets in.

use std::net::IpAddr;

use flows::{Peer, Traffic};
use ipnet::IpNet;
use scaleway::instance::{CreateSecurityGroup, Policy, Protocol, Rule, SetRule};
use serde::Serialize;

use super::{Address, ApplyStep, Known};
use crate::cluster::Cluster;
use crate::error::{InfraError, R};
use crate::plan::{PlannedId, Ref, Steps};
use crate::tags::Role;

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

/// An inbound accept rule, from a network or a node's address; ICMP takes no ports.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct PlannedRule {
    pub protocol: Protocol,
    pub from: Source,
    pub ports: Option<(u32, u32)>,
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
    /// First and last port; none for ICMP.
    pub ports: Option<(u32, u32)>,
}

impl RuleSpec {
    /// An inbound accept rule as the API shows it (`dest_port_to` null for one port, both null
    /// for ICMP; an address without a prefix length is one host).
    pub fn from_rule(rule: &Rule) -> Option<RuleSpec> {
        if rule.direction != "inbound" || rule.action != "accept" {
            return None;
        }
        let ports = match rule.protocol {
            Protocol::Tcp | Protocol::Udp => {
                let from = rule.dest_port_from?;
                Some((from, rule.dest_port_to.unwrap_or(from)))
            }
            Protocol::Icmp if rule.dest_port_from.is_none() => None,
            _ => return None,
        };
        let ip_range = rule
            .ip_range
            .parse::<IpNet>()
            .or_else(|_| rule.ip_range.parse::<IpAddr>().map(IpNet::from))
            .ok()?
            .trunc();
        Some(RuleSpec {
            protocol: rule.protocol.clone(),
            ip_range,
            ports,
        })
    }
}

/// The rules of the flows declared to the control planes, and only those. A group's ICMP rule
/// takes every ICMP type: the declared echo is the part of it Cilium's health checks use.
pub fn desired(
    admin_cidrs: &[IpNet],
    control_planes: &[Address],
    workers: &[Address],
) -> Vec<PlannedRule> {
    let node = |address: &Address| match address {
        Address::Known(address) => Source::Net(IpNet::from(*address)),
        pending => Source::Node(pending.clone()),
    };
    let mut rules = Vec::new();
    for flow in flows::to(flows::Role::ControlPlane).filter(|f| f.from.outside_the_tunnel()) {
        let (protocol, ports) = match flow.traffic {
            Traffic::Tcp(p) => (Protocol::Tcp, Some((p.first.into(), p.last.into()))),
            Traffic::Udp(p) => (Protocol::Udp, Some((p.first.into(), p.last.into()))),
            Traffic::IcmpEcho => (Protocol::Icmp, None),
        };
        let sources: Vec<Source> = match flow.from {
            Peer::Internet => Peer::Internet
                .networks(&flows::Addresses::default())
                .into_iter()
                .map(Source::Net)
                .collect(),
            Peer::Admin => admin_cidrs.iter().copied().map(Source::Net).collect(),
            Peer::ControlPlanes => control_planes.iter().map(node).collect(),
            Peer::Nodes => control_planes.iter().chain(workers).map(node).collect(),
            Peer::Pods => Vec::new(),
        };
        rules.extend(sources.into_iter().map(|from| PlannedRule {
            protocol: protocol.clone(),
            from,
            ports,
        }));
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
            ports: rule.ports,
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
    control_planes: &[Address],
    workers: &[Address],
) -> R<()> {
    let rules = desired(&cluster.config.admin_cidrs, control_planes, workers);
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
                dest_port_from: spec.ports.map(|(from, _)| from),
                dest_port_to: spec.ports.and_then(|(from, to)| (to != from).then_some(to)),
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
                ports: Some((6443, 6443)),
            })
        );
        let icmp = Rule {
            protocol: Protocol::Icmp,
            dest_port_from: None,
            ..rule
        };
        assert_eq!(RuleSpec::from_rule(&icmp).unwrap().ports, None);
    }

    /// The rules of the declared flows to the control planes from one kind of source.
    fn declared(peer: Peer) -> usize {
        flows::to(flows::Role::ControlPlane)
            .filter(|f| f.from == peer)
            .count()
    }

    #[test]
    fn a_pending_address_keeps_the_rules_unresolved_until_execution() {
        let admin: Vec<IpNet> = vec!["198.51.100.0/24".parse().unwrap()];
        let known: Vec<Address> = vec![Address::Known("203.0.113.7".parse().unwrap())];
        let rules = desired(&admin, &known, &[]);
        let per_control_plane = declared(Peer::Nodes) + declared(Peer::ControlPlanes);
        assert_eq!(rules.len(), declared(Peer::Admin) + per_control_plane);
        assert_eq!(specs(&rules, None).unwrap().len(), rules.len());
        let pending = vec![Address::Pending {
            address_of: super::super::NodeOf::Worker("w".into()),
            family: super::super::Family::Ipv6,
        }];
        let rules = desired(&admin, &[], &pending);
        assert!(
            specs(&rules, None).is_none(),
            "not comparable while pending"
        );
        // A worker delivered without IPv6: its rules are left out, the admin ones stay.
        assert_eq!(
            specs(&rules, Some(&Known::default())).unwrap().len(),
            declared(Peer::Admin)
        );
    }

    #[test]
    fn etcd_is_open_to_the_control_planes_only_and_icmp_takes_no_ports() {
        let cp: Address = Address::Known("203.0.113.11".parse().unwrap());
        let worker: Address = Address::Known("203.0.113.10".parse().unwrap());
        let rules = desired(&[], &[cp], &[worker]);
        let etcd: Vec<&PlannedRule> = rules
            .iter()
            .filter(|r| r.ports == Some((2379, 2380)))
            .collect();
        assert_eq!(etcd.len(), 1);
        assert_eq!(
            etcd[0].from,
            Source::Net("203.0.113.11/32".parse().unwrap())
        );
        let icmp: Vec<&PlannedRule> = rules
            .iter()
            .filter(|r| r.protocol == Protocol::Icmp)
            .collect();
        assert_eq!(icmp.len(), 2, "from both nodes");
        assert!(icmp.iter().all(|r| r.ports.is_none()));
    }
}
