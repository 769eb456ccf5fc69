//! Exactly the endpoints this tool calls, typed: paths and field names from the specs in
//! `../shared/scaleway-openapi` (Registry v1 from its public documentation: it is not there).
//! Mutations return `None` in a dry run.

use serde::de::DeserializeOwned;
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

    /// A mutation whose answer wraps the resource in a named field; `None` in a dry run.
    fn mutate_enveloped<E: Envelope + DeserializeOwned>(
        &self,
        method: &'static str,
        path: &str,
        body: Option<Value>,
    ) -> R<Option<E::Inner>> {
        let answer: Option<E> = self.client.mutate(method, path, body)?;
        Ok(answer.map(Envelope::into_inner))
    }

    /// A GET of one enveloped resource: `None` on a 404.
    fn get_enveloped<E: Envelope + DeserializeOwned>(&self, path: &str) -> R<Option<E::Inner>> {
        let answer: Option<E> = self.client.get_opt(path)?;
        Ok(answer.map(Envelope::into_inner))
    }

    /// Every page of a list the API filters, filtered again here with `keep` (the API's filters
    /// are not trusted to be exact).
    fn list_checked<X: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
        items: &str,
        size_param: &'static str,
        keep: impl Fn(&X) -> bool,
    ) -> R<Vec<X>> {
        let all: Vec<X> = self.client.list(path, query, items, size_param)?;
        Ok(all.into_iter().filter(|x| keep(x)).collect())
    }

    /// A list the API filters on tags: a resource is kept only when it carries every tag of
    /// `tags`.
    fn list_tagged<X: Tagged + DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, String)],
        items: &str,
        size_param: &'static str,
        tags: &[String],
    ) -> R<Vec<X>> {
        self.list_checked(path, query, items, size_param, |x: &X| {
            has_tags(x.tags(), tags)
        })
    }

    /// An Instance v1 list filtered on tags: the API takes them comma separated, pages with
    /// `per_page`, and names the list's key as the collection in the path.
    fn instance_tagged<X: Tagged + DeserializeOwned>(
        &self,
        zone: &str,
        collection: &str,
        tags: &[String],
    ) -> R<Vec<X>> {
        self.list_tagged(
            &format!("/instance/v1/zones/{zone}/{collection}"),
            &[("tags", tags.join(","))],
            collection,
            "per_page",
            tags,
        )
    }

    /// A DELETE whose answer is not needed: `false` in a dry run.
    fn delete(&self, path: &str) -> R<bool> {
        self.client.mutate_unit("DELETE", path, None)
    }

    // ---- Instance v1 ---------------------------------------------------------------------

    /// Security groups carrying every tag of `tags` (the API filters on exact tags, comma
    /// separated; the answer is checked again here).
    pub fn security_groups(&self, zone: &str, tags: &[String]) -> R<Vec<SecurityGroup>> {
        self.instance_tagged(zone, "security_groups", tags)
    }

    pub fn create_security_group(&self, zone: &str, body: Value) -> R<Option<SecurityGroup>> {
        self.mutate_enveloped::<SecurityGroupEnvelope>(
            "POST",
            &format!("/instance/v1/zones/{zone}/security_groups"),
            Some(body),
        )
    }

    pub fn delete_security_group(&self, zone: &str, id: &str) -> R<bool> {
        self.delete(&format!("/instance/v1/zones/{zone}/security_groups/{id}"))
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
        self.mutate_enveloped::<SecurityGroupRuleEnvelope>(
            "POST",
            &format!("/instance/v1/zones/{zone}/security_groups/{group}/rules"),
            Some(body),
        )
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
        self.delete(&format!(
            "/instance/v1/zones/{zone}/security_groups/{group}/rules/{rule}"
        ))
    }

    pub fn ips(&self, zone: &str, tags: &[String]) -> R<Vec<InstanceIp>> {
        self.instance_tagged(zone, "ips", tags)
    }

    pub fn create_ip(&self, zone: &str, project: &str, tags: &[String]) -> R<Option<InstanceIp>> {
        self.mutate_enveloped::<InstanceIpEnvelope>(
            "POST",
            &format!("/instance/v1/zones/{zone}/ips"),
            Some(json!({"project": project, "tags": tags, "type": "routed_ipv4"})),
        )
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
        self.delete(&format!("/instance/v1/zones/{zone}/ips/{ip}"))
    }

    pub fn images(&self, zone: &str, tags: &[String]) -> R<Vec<InstanceImage>> {
        self.instance_tagged(zone, "images", tags)
    }

    pub fn servers(&self, zone: &str, tags: &[String]) -> R<Vec<InstanceServer>> {
        self.instance_tagged(zone, "servers", tags)
    }

    pub fn server(&self, zone: &str, id: &str) -> R<Option<InstanceServer>> {
        self.get_enveloped::<InstanceServerEnvelope>(&format!(
            "/instance/v1/zones/{zone}/servers/{id}"
        ))
    }

    pub fn create_server(&self, zone: &str, body: Value) -> R<Option<InstanceServer>> {
        self.mutate_enveloped::<InstanceServerEnvelope>(
            "POST",
            &format!("/instance/v1/zones/{zone}/servers"),
            Some(body),
        )
    }

    /// Puts the server in the security group.
    pub fn set_server_security_group(
        &self,
        zone: &str,
        id: &str,
        group: &str,
    ) -> R<Option<InstanceServer>> {
        self.mutate_enveloped::<InstanceServerEnvelope>(
            "PATCH",
            &format!("/instance/v1/zones/{zone}/servers/{id}"),
            Some(json!({"security_group": {"id": group}})),
        )
    }

    /// `poweron`, `poweroff` or `terminate`.
    pub fn server_action(&self, zone: &str, id: &str, action: &str) -> R<Option<Task>> {
        self.mutate_enveloped::<TaskEnvelope>(
            "POST",
            &format!("/instance/v1/zones/{zone}/servers/{id}/action"),
            Some(json!({"action": action})),
        )
    }

    pub fn delete_server(&self, zone: &str, id: &str) -> R<bool> {
        self.delete(&format!("/instance/v1/zones/{zone}/servers/{id}"))
    }

    pub fn delete_instance_volume(&self, zone: &str, id: &str) -> R<bool> {
        self.delete(&format!("/instance/v1/zones/{zone}/volumes/{id}"))
    }

    pub fn image(&self, zone: &str, id: &str) -> R<Option<InstanceImage>> {
        self.get_enveloped::<InstanceImageEnvelope>(&format!(
            "/instance/v1/zones/{zone}/images/{id}"
        ))
    }

    pub fn create_image(&self, zone: &str, body: Value) -> R<Option<InstanceImage>> {
        self.mutate_enveloped::<InstanceImageEnvelope>(
            "POST",
            &format!("/instance/v1/zones/{zone}/images"),
            Some(body),
        )
    }

    pub fn delete_image(&self, zone: &str, id: &str) -> R<bool> {
        self.delete(&format!("/instance/v1/zones/{zone}/images/{id}"))
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
        self.list_tagged(
            &format!("/block/v1/zones/{zone}/snapshots"),
            &query,
            "snapshots",
            "page_size",
            tags,
        )
    }

    pub fn delete_snapshot(&self, zone: &str, id: &str) -> R<bool> {
        self.delete(&format!("/block/v1/zones/{zone}/snapshots/{id}"))
    }

    /// The status of a Block volume (`available`, `in_use`, ...), `None` once it is gone.
    pub fn block_volume_status(&self, zone: &str, id: &str) -> R<Option<String>> {
        let r: Option<Value> = self
            .client
            .get_opt(&format!("/block/v1/zones/{zone}/volumes/{id}"))?;
        Ok(r.and_then(|v| v.get("status").and_then(Value::as_str).map(str::to_owned)))
    }

    pub fn delete_block_volume(&self, zone: &str, id: &str) -> R<bool> {
        self.delete(&format!("/block/v1/zones/{zone}/volumes/{id}"))
    }

    // ---- Elastic Metal v1 --------------------------------------------------------------------

    pub fn baremetal_servers(&self, zone: &str, tags: &[String]) -> R<Vec<BaremetalServer>> {
        // An array query parameter: one `tags=` per tag.
        let query: Vec<(&str, String)> = tags.iter().map(|t| ("tags", t.clone())).collect();
        self.list_tagged(
            &format!("/baremetal/v1/zones/{zone}/servers"),
            &query,
            "servers",
            "page_size",
            tags,
        )
    }

    pub fn baremetal_server(&self, zone: &str, id: &str) -> R<Option<BaremetalServer>> {
        self.client
            .get_opt(&format!("/baremetal/v1/zones/{zone}/servers/{id}"))
    }

    pub fn baremetal_offers(&self, zone: &str, name: &str) -> R<Vec<BaremetalOffer>> {
        self.list_checked(
            &format!("/baremetal/v1/zones/{zone}/offers"),
            &[
                ("name", name.to_owned()),
                ("subscription_period", "hourly".into()),
            ],
            "offers",
            "page_size",
            |o: &BaremetalOffer| o.name == name,
        )
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
        self.delete(&format!("/baremetal/v1/zones/{zone}/servers/{id}"))
    }

    // ---- IAM v1alpha1 ------------------------------------------------------------------------

    pub fn ssh_keys(&self, project: &str, name: &str) -> R<Vec<SshKey>> {
        self.list_checked(
            "/iam/v1alpha1/ssh-keys",
            &[
                ("project_id", project.to_owned()),
                ("name", name.to_owned()),
            ],
            "ssh_keys",
            "page_size",
            |k: &SshKey| k.name == name,
        )
    }

    pub fn create_ssh_key(&self, project: &str, name: &str, public_key: &str) -> R<Option<SshKey>> {
        self.client.mutate(
            "POST",
            "/iam/v1alpha1/ssh-keys",
            Some(json!({"name": name, "public_key": public_key, "project_id": project})),
        )
    }

    pub fn delete_ssh_key(&self, id: &str) -> R<bool> {
        self.delete(&format!("/iam/v1alpha1/ssh-keys/{id}"))
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
        self.list_checked(
            &format!("/domain/v2beta1/dns-zones/{dns_zone}/records"),
            &[("name", name.to_owned()), ("type", record_type.to_owned())],
            "records",
            "page_size",
            |r: &DnsRecord| r.name == name && r.record_type == record_type,
        )
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
        self.list_checked(
            &format!("/registry/v1/regions/{region}/namespaces"),
            &[
                ("project_id", project.to_owned()),
                ("name", name.to_owned()),
            ],
            "namespaces",
            "page_size",
            |n: &RegistryNamespace| n.name == name,
        )
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
