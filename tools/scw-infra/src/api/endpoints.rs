//! Exactly the endpoints this tool calls, typed: paths and field names from the specs in
//! `../shared/scaleway-openapi` (Registry v1 from its public documentation: it is not there).
//! Mutations return `None` in a dry run.

use serde_json::{Value, json};

use super::client::{ApiError, Client, Sleeper};
use super::http::Transport;
use super::types::*;

type R<T> = Result<T, ApiError>;

/// The calls, grouped by product, over one client.
#[derive(Debug)]
pub struct Scaleway<'c, T, S> {
    pub client: &'c Client<T, S>,
}

impl<'c, T: Transport, S: Sleeper> Scaleway<'c, T, S> {
    pub fn new(client: &'c Client<T, S>) -> Self {
        Scaleway { client }
    }

    // ---- Instance v1 ---------------------------------------------------------------------

    /// Security groups carrying every tag of `tags` (the API filters on exact tags, comma
    /// separated; the answer is checked again here).
    pub fn security_groups(&self, zone: &str, tags: &[String]) -> R<Vec<SecurityGroup>> {
        let all: Vec<SecurityGroup> = self.client.list(
            &format!("/instance/v1/zones/{zone}/security_groups"),
            &[("tags", tags.join(","))],
            "security_groups",
            "per_page",
        )?;
        Ok(all
            .into_iter()
            .filter(|g| has_tags(&g.tags, tags))
            .collect())
    }

    pub fn create_security_group(&self, zone: &str, body: Value) -> R<Option<SecurityGroup>> {
        let r: Option<SecurityGroupEnvelope> = self.client.mutate(
            "POST",
            &format!("/instance/v1/zones/{zone}/security_groups"),
            Some(body),
        )?;
        Ok(r.map(|e| e.security_group))
    }

    pub fn delete_security_group(&self, zone: &str, id: &str) -> R<bool> {
        self.client.mutate_unit(
            "DELETE",
            &format!("/instance/v1/zones/{zone}/security_groups/{id}"),
            None,
        )
    }

    pub fn security_group_rules(&self, zone: &str, group: &str) -> R<Vec<SecurityGroupRule>> {
        self.client.list(
            &format!("/instance/v1/zones/{zone}/security_groups/{group}/rules"),
            &[],
            "rules",
            "per_page",
        )
    }

    pub fn create_rule(
        &self,
        zone: &str,
        group: &str,
        body: Value,
    ) -> R<Option<SecurityGroupRule>> {
        let r: Option<SecurityGroupRuleEnvelope> = self.client.mutate(
            "POST",
            &format!("/instance/v1/zones/{zone}/security_groups/{group}/rules"),
            Some(body),
        )?;
        Ok(r.map(|e| e.rule))
    }

    /// Replaces every editable rule of the group with `rules` in one call (the spec's
    /// SetSecurityGroupRules: a rule with an `id` is kept or updated, one without is created, an
    /// editable rule left out is deleted; non-editable ones are untouched).
    pub fn set_rules(&self, zone: &str, group: &str, rules: Vec<Value>) -> R<bool> {
        self.client.mutate_unit(
            "PUT",
            &format!("/instance/v1/zones/{zone}/security_groups/{group}/rules"),
            Some(json!({ "rules": rules })),
        )
    }

    pub fn delete_rule(&self, zone: &str, group: &str, rule: &str) -> R<bool> {
        self.client.mutate_unit(
            "DELETE",
            &format!("/instance/v1/zones/{zone}/security_groups/{group}/rules/{rule}"),
            None,
        )
    }

    pub fn ips(&self, zone: &str, tags: &[String]) -> R<Vec<InstanceIp>> {
        let all: Vec<InstanceIp> = self.client.list(
            &format!("/instance/v1/zones/{zone}/ips"),
            &[("tags", tags.join(","))],
            "ips",
            "per_page",
        )?;
        Ok(all
            .into_iter()
            .filter(|i| has_tags(&i.tags, tags))
            .collect())
    }

    pub fn create_ip(&self, zone: &str, project: &str, tags: &[String]) -> R<Option<InstanceIp>> {
        let r: Option<InstanceIpEnvelope> = self.client.mutate(
            "POST",
            &format!("/instance/v1/zones/{zone}/ips"),
            Some(json!({"project": project, "tags": tags, "type": "routed_ipv4"})),
        )?;
        Ok(r.map(|e| e.ip))
    }

    /// Attaches the IP to a server.
    pub fn attach_ip(&self, zone: &str, ip: &str, server: &str) -> R<bool> {
        self.client.mutate_unit(
            "PATCH",
            &format!("/instance/v1/zones/{zone}/ips/{ip}"),
            Some(json!({"server": server})),
        )
    }

    pub fn delete_ip(&self, zone: &str, ip: &str) -> R<bool> {
        self.client.mutate_unit(
            "DELETE",
            &format!("/instance/v1/zones/{zone}/ips/{ip}"),
            None,
        )
    }

    pub fn images(&self, zone: &str, tags: &[String]) -> R<Vec<InstanceImage>> {
        let all: Vec<InstanceImage> = self.client.list(
            &format!("/instance/v1/zones/{zone}/images"),
            &[("tags", tags.join(","))],
            "images",
            "per_page",
        )?;
        Ok(all
            .into_iter()
            .filter(|i| has_tags(&i.tags, tags))
            .collect())
    }

    pub fn servers(&self, zone: &str, tags: &[String]) -> R<Vec<InstanceServer>> {
        let all: Vec<InstanceServer> = self.client.list(
            &format!("/instance/v1/zones/{zone}/servers"),
            &[("tags", tags.join(","))],
            "servers",
            "per_page",
        )?;
        Ok(all
            .into_iter()
            .filter(|s| has_tags(&s.tags, tags))
            .collect())
    }

    pub fn server(&self, zone: &str, id: &str) -> R<Option<InstanceServer>> {
        let r: Option<InstanceServerEnvelope> = self
            .client
            .get_opt(&format!("/instance/v1/zones/{zone}/servers/{id}"))?;
        Ok(r.map(|e| e.server))
    }

    pub fn create_server(&self, zone: &str, body: Value) -> R<Option<InstanceServer>> {
        let r: Option<InstanceServerEnvelope> = self.client.mutate(
            "POST",
            &format!("/instance/v1/zones/{zone}/servers"),
            Some(body),
        )?;
        Ok(r.map(|e| e.server))
    }

    /// Puts the server in the security group.
    pub fn set_server_security_group(
        &self,
        zone: &str,
        id: &str,
        group: &str,
    ) -> R<Option<InstanceServer>> {
        let r: Option<InstanceServerEnvelope> = self.client.mutate(
            "PATCH",
            &format!("/instance/v1/zones/{zone}/servers/{id}"),
            Some(json!({"security_group": {"id": group}})),
        )?;
        Ok(r.map(|e| e.server))
    }

    /// `poweron`, `poweroff` or `terminate`.
    pub fn server_action(&self, zone: &str, id: &str, action: &str) -> R<Option<Task>> {
        let r: Option<TaskEnvelope> = self.client.mutate(
            "POST",
            &format!("/instance/v1/zones/{zone}/servers/{id}/action"),
            Some(json!({"action": action})),
        )?;
        Ok(r.map(|e| e.task))
    }

    pub fn delete_server(&self, zone: &str, id: &str) -> R<bool> {
        self.client.mutate_unit(
            "DELETE",
            &format!("/instance/v1/zones/{zone}/servers/{id}"),
            None,
        )
    }

    pub fn delete_instance_volume(&self, zone: &str, id: &str) -> R<bool> {
        self.client.mutate_unit(
            "DELETE",
            &format!("/instance/v1/zones/{zone}/volumes/{id}"),
            None,
        )
    }

    pub fn image(&self, zone: &str, id: &str) -> R<Option<InstanceImage>> {
        let r: Option<InstanceImageEnvelope> = self
            .client
            .get_opt(&format!("/instance/v1/zones/{zone}/images/{id}"))?;
        Ok(r.map(|e| e.image))
    }

    pub fn create_image(&self, zone: &str, body: Value) -> R<Option<InstanceImage>> {
        let r: Option<InstanceImageEnvelope> = self.client.mutate(
            "POST",
            &format!("/instance/v1/zones/{zone}/images"),
            Some(body),
        )?;
        Ok(r.map(|e| e.image))
    }

    pub fn delete_image(&self, zone: &str, id: &str) -> R<bool> {
        self.client.mutate_unit(
            "DELETE",
            &format!("/instance/v1/zones/{zone}/images/{id}"),
            None,
        )
    }

    // ---- Block v1 ------------------------------------------------------------------------------

    /// Imports a QCOW2 object of Object Storage as a Block snapshot.
    pub fn import_snapshot(&self, zone: &str, body: Value) -> R<Option<BlockSnapshot>> {
        self.client.mutate(
            "POST",
            &format!("/block/v1/zones/{zone}/snapshots/import-from-object-storage"),
            Some(body),
        )
    }

    pub fn snapshot(&self, zone: &str, id: &str) -> R<Option<BlockSnapshot>> {
        self.client
            .get_opt(&format!("/block/v1/zones/{zone}/snapshots/{id}"))
    }

    pub fn snapshots(&self, zone: &str, tags: &[String]) -> R<Vec<BlockSnapshot>> {
        // The spec marks include_deleted as required.
        let mut query: Vec<(&str, String)> = tags.iter().map(|t| ("tags", t.clone())).collect();
        query.push(("include_deleted", "false".into()));
        let all: Vec<BlockSnapshot> = self.client.list(
            &format!("/block/v1/zones/{zone}/snapshots"),
            &query,
            "snapshots",
            "page_size",
        )?;
        Ok(all
            .into_iter()
            .filter(|s| has_tags(&s.tags, tags))
            .collect())
    }

    pub fn delete_snapshot(&self, zone: &str, id: &str) -> R<bool> {
        self.client.mutate_unit(
            "DELETE",
            &format!("/block/v1/zones/{zone}/snapshots/{id}"),
            None,
        )
    }

    /// The status of a Block volume (`available`, `in_use`, ...), `None` once it is gone.
    pub fn block_volume_status(&self, zone: &str, id: &str) -> R<Option<String>> {
        let r: Option<Value> = self
            .client
            .get_opt(&format!("/block/v1/zones/{zone}/volumes/{id}"))?;
        Ok(r.and_then(|v| v.get("status").and_then(Value::as_str).map(str::to_owned)))
    }

    pub fn delete_block_volume(&self, zone: &str, id: &str) -> R<bool> {
        self.client.mutate_unit(
            "DELETE",
            &format!("/block/v1/zones/{zone}/volumes/{id}"),
            None,
        )
    }

    // ---- Elastic Metal v1 --------------------------------------------------------------------

    pub fn baremetal_servers(&self, zone: &str, tags: &[String]) -> R<Vec<BaremetalServer>> {
        // An array query parameter: one `tags=` per tag.
        let query: Vec<(&str, String)> = tags.iter().map(|t| ("tags", t.clone())).collect();
        let all: Vec<BaremetalServer> = self.client.list(
            &format!("/baremetal/v1/zones/{zone}/servers"),
            &query,
            "servers",
            "page_size",
        )?;
        Ok(all
            .into_iter()
            .filter(|s| has_tags(&s.tags, tags))
            .collect())
    }

    pub fn baremetal_server(&self, zone: &str, id: &str) -> R<Option<BaremetalServer>> {
        self.client
            .get_opt(&format!("/baremetal/v1/zones/{zone}/servers/{id}"))
    }

    pub fn baremetal_offers(&self, zone: &str, name: &str) -> R<Vec<BaremetalOffer>> {
        let all: Vec<BaremetalOffer> = self.client.list(
            &format!("/baremetal/v1/zones/{zone}/offers"),
            &[
                ("name", name.to_owned()),
                ("subscription_period", "hourly".into()),
            ],
            "offers",
            "page_size",
        )?;
        Ok(all.into_iter().filter(|o| o.name == name).collect())
    }

    pub fn create_baremetal_server(&self, zone: &str, body: Value) -> R<Option<BaremetalServer>> {
        self.client.mutate(
            "POST",
            &format!("/baremetal/v1/zones/{zone}/servers"),
            Some(body),
        )
    }

    /// `start` (body `{}`: the boot type stays) or `stop`.
    pub fn baremetal_power(
        &self,
        zone: &str,
        id: &str,
        action: &str,
    ) -> R<Option<BaremetalServer>> {
        self.client.mutate(
            "POST",
            &format!("/baremetal/v1/zones/{zone}/servers/{id}/{action}"),
            Some(json!({})),
        )
    }

    /// Reboots into `normal` or `rescue` (scw-rescue-flash, issue 12), with extra SSH key ids for
    /// the rescue image.
    pub fn baremetal_reboot(
        &self,
        zone: &str,
        id: &str,
        boot_type: &str,
        ssh_key_ids: &[String],
    ) -> R<Option<BaremetalServer>> {
        self.client.mutate(
            "POST",
            &format!("/baremetal/v1/zones/{zone}/servers/{id}/reboot"),
            Some(json!({"boot_type": boot_type, "ssh_key_ids": ssh_key_ids})),
        )
    }

    pub fn delete_baremetal_server(&self, zone: &str, id: &str) -> R<bool> {
        self.client.mutate_unit(
            "DELETE",
            &format!("/baremetal/v1/zones/{zone}/servers/{id}"),
            None,
        )
    }

    // ---- IAM v1alpha1 ------------------------------------------------------------------------

    pub fn ssh_keys(&self, project: &str, name: &str) -> R<Vec<SshKey>> {
        let all: Vec<SshKey> = self.client.list(
            "/iam/v1alpha1/ssh-keys",
            &[
                ("project_id", project.to_owned()),
                ("name", name.to_owned()),
            ],
            "ssh_keys",
            "page_size",
        )?;
        Ok(all.into_iter().filter(|k| k.name == name).collect())
    }

    pub fn create_ssh_key(&self, project: &str, name: &str, public_key: &str) -> R<Option<SshKey>> {
        self.client.mutate(
            "POST",
            "/iam/v1alpha1/ssh-keys",
            Some(json!({"name": name, "public_key": public_key, "project_id": project})),
        )
    }

    pub fn delete_ssh_key(&self, id: &str) -> R<bool> {
        self.client
            .mutate_unit("DELETE", &format!("/iam/v1alpha1/ssh-keys/{id}"), None)
    }

    // ---- Domain v2beta1 ----------------------------------------------------------------------

    /// The zone, when Scaleway hosts it for this project.
    pub fn dns_zone(&self, project: &str, dns_zone: &str) -> R<Option<DnsZone>> {
        let domain = registered_domain(dns_zone);
        let zones: Vec<DnsZone> = match self.client.list(
            "/domain/v2beta1/dns-zones",
            &[
                ("project_id", project.to_owned()),
                ("domain", domain.to_owned()),
                ("dns_zone", dns_zone.to_owned()),
            ],
            "dns_zones",
            "page_size",
        ) {
            Ok(zones) => zones,
            Err(err) if matches!(err.status(), Some(403 | 404)) => return Ok(None),
            Err(err) => return Err(err),
        };
        Ok(zones.into_iter().find(|z| zone_name(z) == dns_zone))
    }

    pub fn dns_records(&self, dns_zone: &str, name: &str, record_type: &str) -> R<Vec<DnsRecord>> {
        let all: Vec<DnsRecord> = self.client.list(
            &format!("/domain/v2beta1/dns-zones/{dns_zone}/records"),
            &[("name", name.to_owned()), ("type", record_type.to_owned())],
            "records",
            "page_size",
        )?;
        Ok(all
            .into_iter()
            .filter(|r| r.name == name && r.record_type == record_type)
            .collect())
    }

    /// One PATCH of record changes (`add`, `set`, `delete`: one key per change, the spec's
    /// `x-one-of: change`).
    pub fn change_dns_records(&self, dns_zone: &str, changes: Vec<Value>) -> R<bool> {
        self.client.mutate_unit(
            "PATCH",
            &format!("/domain/v2beta1/dns-zones/{dns_zone}/records"),
            Some(json!({"changes": changes, "return_all_records": false})),
        )
    }

    // ---- Registry v1 -------------------------------------------------------------------------

    pub fn registry_namespaces(
        &self,
        region: &str,
        project: &str,
        name: &str,
    ) -> R<Vec<RegistryNamespace>> {
        let all: Vec<RegistryNamespace> = self.client.list(
            &format!("/registry/v1/regions/{region}/namespaces"),
            &[
                ("project_id", project.to_owned()),
                ("name", name.to_owned()),
            ],
            "namespaces",
            "page_size",
        )?;
        Ok(all.into_iter().filter(|n| n.name == name).collect())
    }

    pub fn create_registry_namespace(
        &self,
        region: &str,
        project: &str,
        name: &str,
    ) -> R<Option<RegistryNamespace>> {
        self.client.mutate(
            "POST",
            &format!("/registry/v1/regions/{region}/namespaces"),
            Some(json!({"name": name, "project_id": project, "is_public": true})),
        )
    }
}

/// Whether `have` holds every tag of `want`.
pub fn has_tags(have: &[String], want: &[String]) -> bool {
    want.iter().all(|w| have.contains(w))
}

/// The zone's full name: `subdomain.domain`, or `domain` when the subdomain is empty.
pub fn zone_name(zone: &DnsZone) -> String {
    if zone.subdomain.is_empty() {
        zone.domain.clone()
    } else {
        format!("{}.{}", zone.subdomain, zone.domain)
    }
}

/// The registered domain a zone belongs to, as the Domain API's required `domain` filter wants:
/// the last two labels (a zone under a two-label public suffix such as `co.uk` needs its
/// registered domain spelled out; not handled).
pub fn registered_domain(dns_zone: &str) -> &str {
    let mut dots = dns_zone.rmatch_indices('.');
    dots.next();
    match dots.next() {
        Some((i, _)) => &dns_zone[i + 1..],
        None => dns_zone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registered_domain_is_the_last_two_labels() {
        assert_eq!(registered_domain("example.com"), "example.com");
        assert_eq!(registered_domain("edge.example.com"), "example.com");
        assert_eq!(registered_domain("localhost"), "localhost");
    }
}
