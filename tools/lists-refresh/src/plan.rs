//! What one run applies: every list with content (fresh, or the previous one kept when its
//! generator failed), the trusted agents' keys (likewise), the version stamp, the size checks,
//! and the two objects it server-side applies (the ConfigMap's data, and the WasmPlugin's
//! `pluginConfig.lists` and `pluginConfig.agents`).
//!
//! Each agent's keys are its directory as the filter reads it (`{"keys": [JWK, ...]}`): in the
//! ConfigMap as `<name>.directory.json` (the previous keys of the next run), in the WasmPlugin
//! as `pluginConfig.agents.<name>.keys`.
//!
//! The WasmPlugin gets every list packed (`pluginConfig.lists.packed`, see `pow_core::packed`):
//! about a tenth of the text, which is what lets a few hundred thousand prefixes fit in one
//! object. The ConfigMap keeps each list as text (`<name>.txt`), which people read, while the
//! ConfigMap fits in its 1 MiB; past that, the largest lists move to `binaryData` as
//! `<name>.packed` (the bytes under the WasmPlugin's base64), largest first, until it fits.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};

use lists_core::records::{KeyDirectory, ListSources};
use pow_core::lists::Net;
use serde_json::{Value, json};

use crate::{CONFIGMAP_LIMIT, Cluster, OBJECT_LIMIT, RefreshError};

/// The ConfigMap key of a list as text, in `data`.
pub fn key_of(name: &str) -> String {
    format!("{name}.txt")
}

/// The ConfigMap key of an agent's keys (its directory as JSON), in `data`.
pub fn agent_key_of(name: &str) -> String {
    format!("{name}{AGENT_SUFFIX}")
}

const AGENT_SUFFIX: &str = ".directory.json";

/// The previous keys of each agent, from the ConfigMap's data; an entry that no longer decodes
/// (edited by hand) is none, said in the log.
pub(crate) fn previous_agents(data: &BTreeMap<String, String>) -> BTreeMap<String, KeyDirectory> {
    let mut agents = BTreeMap::new();
    for (key, text) in data {
        let Some(name) = key.strip_suffix(AGENT_SUFFIX) else {
            continue;
        };
        match KeyDirectory::from_json(text.as_bytes()) {
            Ok(keys) => {
                agents.insert(name.to_owned(), keys);
            }
            Err(why) => pop_common::warn!(
                "ConfigMap key data.{key}: not a key directory ({why}): agent {name} has no \
                 previous keys"
            ),
        }
    }
    agents
}

/// The ConfigMap key of a list packed, in `binaryData`.
pub fn packed_key_of(name: &str) -> String {
    format!("{name}.packed")
}

/// The previous lists as text by ConfigMap key (`<name>.txt`), whichever form the ConfigMap
/// holds them in, with its other `data` keys (`version`). A packed list that does not decode
/// stops the run: without it there is no shrink baseline and no kept version.
pub(crate) fn previous_of(
    object: Option<&Value>,
) -> Result<BTreeMap<String, String>, RefreshError> {
    let mut data = data_of(object);
    let binary = object
        .and_then(|o| o.get("binaryData"))
        .and_then(Value::as_object);
    for (key, value) in binary.into_iter().flatten() {
        let Some(name) = key.strip_suffix(".packed") else {
            continue;
        };
        let unreadable = |reason: String| RefreshError::PreviousList {
            key: key.clone(),
            reason,
        };
        let packed = value
            .as_str()
            .ok_or_else(|| unreadable("not a string".to_owned()))?;
        let nets =
            pow_core::packed::decode(packed, pow_core::packed::MAX_PREFIXES).map_err(unreadable)?;
        data.insert(key_of(name), text_of(&nets));
    }
    Ok(data)
}

/// One CIDR per line, as the generators write them.
pub(crate) fn text_of(nets: &[Net]) -> String {
    let mut text = String::with_capacity(nets.len() * 18);
    for net in nets {
        // Writing to a String cannot fail.
        let _ = match *net {
            Net::V4(a, l) => writeln!(text, "{}/{l}", Ipv4Addr::from(a)),
            Net::V6(a, l) => writeln!(text, "{}/{l}", Ipv6Addr::from(a)),
        };
    }
    text
}

pub(crate) fn data_of(object: Option<&Value>) -> BTreeMap<String, String> {
    object
        .and_then(|o| o.get("data"))
        .and_then(Value::as_object)
        .map(|data| {
            data.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// One list packed.
#[derive(Debug)]
pub(crate) struct Packed {
    /// The WasmPlugin's value (and the ConfigMap's `binaryData` value, which the API carries
    /// in base64 too).
    pub(crate) base64: String,
    /// The bytes under the base64, what the ConfigMap's limit counts.
    pub(crate) bytes: usize,
    pub(crate) prefixes: usize,
}

/// Where each list goes in the ConfigMap.
#[derive(Debug, Default)]
pub(crate) struct Layout {
    pub(crate) data: BTreeMap<String, String>,
    pub(crate) binary_data: BTreeMap<String, String>,
}

/// What will be applied.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Every list of the sources that has content: fresh, or the previous one kept.
    pub(crate) sets: BTreeMap<String, String>,
    /// The same lists, packed.
    pub(crate) packed: BTreeMap<String, Packed>,
    /// The tokens of every crawler list in `sets`, from the sources: a kept list keeps them too.
    pub(crate) tokens: BTreeMap<String, Vec<String>>,
    pub(crate) fresh: Vec<String>,
    pub(crate) kept: Vec<String>,
    /// Each trusted agent's keys (fetched, or its previous ones kept), and as JSON text.
    pub(crate) agents: BTreeMap<String, KeyDirectory>,
    pub(crate) agent_texts: BTreeMap<String, String>,
    pub(crate) changed: bool,
    pub(crate) version: String,
    pub(crate) old_version: Option<String>,
    now: String,
}

impl Plan {
    /// `now` stamps the version when anything changed. Refuses a list the filter would refuse
    /// (a kept list edited by hand that no longer parses, more prefixes than it takes).
    pub(crate) fn new(
        sources: &ListSources,
        old: &BTreeMap<String, String>,
        fresh: &BTreeMap<String, String>,
        now: &str,
    ) -> Result<Plan, RefreshError> {
        let mut sets = BTreeMap::new();
        let (mut fresh_names, mut kept) = (Vec::new(), Vec::new());
        let mut changed = false;
        for list in &sources.lists {
            let old_text = old.get(&key_of(&list.name));
            if let Some(text) = fresh.get(&list.name) {
                changed |= old_text != Some(text);
                sets.insert(list.name.clone(), text.clone());
                fresh_names.push(list.name.clone());
            } else if let Some(text) = old_text {
                sets.insert(list.name.clone(), text.clone());
                kept.push(list.name.clone());
            }
        }
        // A list removed from the sources disappears from what we apply: a change too.
        let listed = |key: &str| {
            key.strip_suffix(".txt")
                .is_some_and(|n| sets.contains_key(n))
        };
        changed |= old.keys().any(|k| k.ends_with(".txt") && !listed(k));
        let mut packed = BTreeMap::new();
        for (name, text) in &sets {
            let refused = |reason: String| RefreshError::ListRefused {
                list: name.clone(),
                reason,
            };
            let nets = pow_core::lists::parse_set(text).map_err(refused)?;
            let base64 = pow_core::packed::encode(&nets).map_err(refused)?;
            let padding = base64.bytes().rev().take_while(|&b| b == b'=').count();
            let list = Packed {
                bytes: base64.len() / 4 * 3 - padding,
                base64,
                prefixes: nets.len(),
            };
            packed.insert(name.clone(), list);
        }
        // Only lists with content: the filter refuses tokens of a list it does not have.
        let tokens = sources
            .lists
            .iter()
            .filter(|list| !list.tokens.is_empty() && sets.contains_key(&list.name))
            .map(|list| (list.name.clone(), list.tokens.clone()))
            .collect();
        Ok(Plan {
            sets,
            packed,
            tokens,
            fresh: fresh_names,
            kept,
            agents: BTreeMap::new(),
            agent_texts: BTreeMap::new(),
            changed,
            version: if changed {
                now.to_owned()
            } else {
                old.get("version")
                    .cloned()
                    .unwrap_or_else(|| now.to_owned())
            },
            old_version: old.get("version").cloned(),
            now: now.to_owned(),
        })
    }

    /// Adds the agents' keys; keys that differ from the ConfigMap's `old` data, and an agent
    /// gone from the sources, are a change.
    pub(crate) fn add_agents(
        &mut self,
        agents: BTreeMap<String, KeyDirectory>,
        old: &BTreeMap<String, String>,
    ) {
        let texts: BTreeMap<String, String> = agents
            .iter()
            .map(|(name, keys)| {
                let text = serde_json::to_string(keys).unwrap_or_default();
                (name.clone(), text)
            })
            .collect();
        let old_texts: BTreeMap<&str, &String> = old
            .iter()
            .filter_map(|(k, v)| Some((k.strip_suffix(AGENT_SUFFIX)?, v)))
            .collect();
        let new_texts: BTreeMap<&str, &String> =
            texts.iter().map(|(k, v)| (k.as_str(), v)).collect();
        if old_texts != new_texts {
            self.changed = true;
            self.version.clone_from(&self.now);
        }
        self.agents = agents;
        self.agent_texts = texts;
    }

    /// The filter's `agents` object: each agent's directory under `keys`.
    pub(crate) fn agents_config(&self) -> Value {
        let agents: BTreeMap<&String, Value> = self
            .agents
            .iter()
            .map(|(name, keys)| (name, json!({"keys": keys})))
            .collect();
        json!(agents)
    }

    /// The tokens and the agents' keys live in the sources, not in the ConfigMap's lists: a
    /// WasmPlugin whose lists carry other tokens (a token added to the sources, a first run with
    /// crawler lists), or other agents' keys, is out of date even when no set changed. That is a
    /// change, stamped with a new version. Whether that made a change.
    pub(crate) fn compare_wasmplugin(&mut self, wasmplugin: &Value) -> bool {
        let current: Option<BTreeMap<String, Vec<String>>> =
            match wasmplugin.pointer("/spec/pluginConfig/lists/tokens") {
                None => Some(BTreeMap::new()),
                Some(tokens) => serde_json::from_value(tokens.clone()).ok(),
            };
        let agents = wasmplugin
            .pointer("/spec/pluginConfig/agents")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let stale = current.as_ref() != Some(&self.tokens) || agents != self.agents_config();
        if stale {
            self.changed = true;
            self.version.clone_from(&self.now);
        }
        stale
    }

    pub(crate) fn old_version(&self) -> &str {
        self.old_version.as_deref().unwrap_or("(none)")
    }

    pub(crate) fn summary(&self) -> String {
        let mut parts: Vec<String> = self
            .sets
            .iter()
            .map(|(name, text)| format!("{name}: {} prefixes", text.lines().count()))
            .collect();
        if !self.kept.is_empty() {
            parts.push(format!("kept: {}", self.kept.join(", ")));
        }
        parts.push(format!("regenerated: {}", self.fresh.join(", ")));
        parts.join("; ")
    }

    /// Each list with its prefix count and sizes, for a refusal: what would have to shrink.
    fn sizes(&self, text: bool) -> String {
        self.packed
            .iter()
            .map(|(name, p)| {
                let text_len = self.sets.get(name).map_or(0, String::len);
                if text {
                    format!(
                        "{name}: {} prefixes, {text_len} bytes as text, {} bytes packed",
                        p.prefixes, p.bytes
                    )
                } else {
                    format!(
                        "{name}: {} prefixes, {} bytes packed",
                        p.prefixes,
                        p.base64.len()
                    )
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Where each list goes in the ConfigMap, refusing one over 1 MiB (ours plus the keys other
    /// managers put there): text while it fits, then the largest texts packed until it fits.
    pub(crate) fn configmap_layout(&self, current: Option<&Value>) -> Result<Layout, RefreshError> {
        let mut layout = Layout::default();
        layout.data.insert("version".into(), self.version.clone());
        layout
            .data
            .insert("generated_at".into(), self.version.clone());
        for (name, text) in &self.agent_texts {
            layout.data.insert(agent_key_of(name), text.clone());
        }
        let others: usize = data_of(current)
            .iter()
            .filter(|(k, _)| {
                !(k.ends_with(".txt")
                    || k.ends_with(AGENT_SUFFIX)
                    || *k == "version"
                    || *k == "generated_at")
            })
            .map(|(k, v)| k.len() + v.len())
            .sum();
        let binary: usize = current
            .and_then(|o| o.get("binaryData"))
            .and_then(Value::as_object)
            .map(|b| {
                b.iter()
                    .filter(|(k, _)| !k.ends_with(".packed"))
                    .map(|(k, v)| k.len() + v.as_str().map_or(0, |s| s.len() / 4 * 3))
                    .sum()
            })
            .unwrap_or(0);
        let entries = |m: &BTreeMap<String, String>| -> usize {
            m.iter().map(|(k, v)| k.len() + v.len()).sum()
        };
        let mut size = entries(&layout.data) + others + binary;
        let mut texts: Vec<(&String, &String)> = self.sets.iter().collect();
        size += texts
            .iter()
            .map(|(n, t)| key_of(n).len() + t.len())
            .sum::<usize>();
        // Largest first; the stable sort keeps name order among equals.
        texts.sort_by_key(|(_, t)| std::cmp::Reverse(t.len()));
        let mut texts = texts.into_iter();
        while size > CONFIGMAP_LIMIT {
            let Some((name, text)) = texts.next() else {
                return Err(RefreshError::TooLarge {
                    what: "policy-lists ConfigMap",
                    size,
                    limit: CONFIGMAP_LIMIT,
                    detail: Some(self.sizes(true)),
                });
            };
            let bytes = self.packed.get(name).map_or(0, |p| p.bytes);
            size = size - key_of(name).len() - text.len() + packed_key_of(name).len() + bytes;
            if let Some(p) = self.packed.get(name) {
                layout
                    .binary_data
                    .insert(packed_key_of(name), p.base64.clone());
            }
        }
        for (name, text) in texts {
            layout.data.insert(key_of(name), text.clone());
        }
        Ok(layout)
    }

    /// Refuses a WasmPlugin that would exceed what etcd stores in one object.
    pub(crate) fn check_wasmplugin_size(&self, current: &Value) -> Result<(), RefreshError> {
        let mut object = current.clone();
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
        if let Some(config) = object
            .pointer_mut("/spec/pluginConfig")
            .and_then(Value::as_object_mut)
        {
            config.remove("lists");
            config.remove("agents");
        }
        let size = json_len(&object) + json_len(&self.lists()) + json_len(&self.agents_config());
        if size > OBJECT_LIMIT {
            return Err(RefreshError::TooLarge {
                what: "WasmPlugin",
                size,
                limit: OBJECT_LIMIT,
                detail: Some(self.sizes(false)),
            });
        }
        Ok(())
    }

    /// Refuses lists the filter would refuse with the WasmPlugin's pluginConfig as it stands
    /// (a kept list that no longer parses, more lists than the filter takes): decoded and built
    /// by the filter's own code, as its `on_configure` would. Envoy checks a new pluginConfig on
    /// a throwaway VM and, when the module refuses it, rejects the update and keeps the previous
    /// configuration (proxy-wasm-cpp-host `src/wasm.cc`, the canary; Envoy's
    /// `source/extensions/common/wasm/wasm.cc`, `PluginConfig` throwing `WasmException`).
    pub(crate) fn check_wasmplugin_config(
        &self,
        current: &Value,
        wasmplugin: &str,
    ) -> Result<(), RefreshError> {
        let mut config = current
            .pointer("/spec/pluginConfig")
            .cloned()
            .unwrap_or_else(|| json!({}));
        if let Some(object) = config.as_object_mut() {
            object.insert("lists".to_owned(), self.lists());
            object.remove("agents");
            if !self.agents.is_empty() {
                object.insert("agents".to_owned(), self.agents_config());
            }
        }
        let refused = |reason: String| RefreshError::FilterRefuses {
            wasmplugin: wasmplugin.to_owned(),
            reason,
        };
        let bytes = serde_json::to_vec(&config).map_err(|e| refused(e.to_string()))?;
        // As the module takes it: Filter::new decodes the lists once and refuses a bad one.
        let decoded = pow_core::PluginConfig::from_json_lists_unread(&bytes)
            .map_err(|e| refused(e.to_string()))?;
        pow_core::Filter::new(decoded, None, [0; 32]).map_err(refused)?;
        Ok(())
    }

    /// The filter's `lists` object: every list packed.
    pub(crate) fn lists(&self) -> Value {
        let packed: BTreeMap<&String, &String> =
            self.packed.iter().map(|(n, p)| (n, &p.base64)).collect();
        let mut lists =
            json!({"version": self.version, "generated_at": self.version, "packed": packed});
        // Only when a list has some, so that lists without crawlers read as they always did.
        if !self.tokens.is_empty() {
            lists["tokens"] = json!(self.tokens);
        }
        lists
    }

    pub(crate) fn configmap(
        &self,
        cluster: &Cluster,
        current: Option<&Value>,
        layout: &Layout,
    ) -> Value {
        let mut metadata = json!({"name": cluster.configmap, "namespace": cluster.namespace});
        // Optimistic concurrency: if someone wrote the ConfigMap since we read it, the apply
        // fails with 409 instead of overwriting what we did not read.
        if let Some(rv) = current.and_then(|o| o.pointer("/metadata/resourceVersion")) {
            metadata["resourceVersion"] = rv.clone();
        }
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
                            "data": layout.data});
        // Sent only when it has keys: an apply without the field gives up ours in it.
        if !layout.binary_data.is_empty() {
            cm["binaryData"] = json!(layout.binary_data);
        }
        cm
    }

    pub(crate) fn wasmplugin(&self, cluster: &Cluster, name: &str) -> Value {
        let mut config = json!({"lists": self.lists()});
        // Sent only when there are agents: an apply without the field gives up ours in it.
        if !self.agents.is_empty() {
            config["agents"] = self.agents_config();
        }
        json!({
            "apiVersion": "extensions.istio.io/v1alpha1",
            "kind": "WasmPlugin",
            "metadata": {"name": name, "namespace": cluster.namespace},
            "spec": {"pluginConfig": config},
        })
    }
}

fn json_len(value: &Value) -> usize {
    serde_json::to_vec(value).map_or(0, |v| v.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-11-30T20:00:00Z";

    fn sources(names: &[&str]) -> ListSources {
        let lists: Vec<String> = names
            .iter()
            .map(|n| format!(r#"{{"name":"{n}","generator":"tor","sources":["/x"]}}"#))
            .collect();
        serde_json::from_str(&format!(
            r#"{{"kind":"ListSources","version":3,"lists":[{}]}}"#,
            lists.join(",")
        ))
        .unwrap()
    }

    /// The plan of the `tor` lists `names`, with the ConfigMap's data `old` and the lists
    /// regenerated `fresh` (name, text).
    fn tor_plan(names: &[&str], old: &BTreeMap<String, String>, fresh: &[(&str, &str)]) -> Plan {
        Plan::new(&sources(names), old, &map(fresh), NOW).unwrap()
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn data(plan: &Plan) -> BTreeMap<String, String> {
        plan.configmap_layout(None).unwrap().data
    }

    #[test]
    fn a_failed_list_keeps_its_previous_content_and_unchanged_lists_keep_the_version() {
        let old = map(&[
            ("tor.txt", "192.0.2.1/32\n"),
            ("hosting.txt", "10.0.0.0/8\n"),
            ("version", "v1"),
        ]);
        let plan = tor_plan(&["tor", "hosting"], &old, &[("tor", "192.0.2.1/32\n")]);
        assert!(!plan.changed);
        assert_eq!(plan.version, "v1");
        assert_eq!(plan.kept, ["hosting"]);
        assert_eq!(data(&plan)["hosting.txt"], "10.0.0.0/8\n");
        let plan = tor_plan(&["tor", "hosting"], &old, &[("tor", "192.0.2.9/32\n")]);
        assert!(plan.changed);
        assert_eq!(plan.version, NOW);
        // A list dropped from the sources is a change (its key goes away).
        let plan = tor_plan(&["tor"], &old, &[("tor", "192.0.2.1/32\n")]);
        assert!(plan.changed);
        assert!(!data(&plan).contains_key("hosting.txt"));
    }

    #[test]
    fn lists_the_filter_would_refuse_are_refused_before_anything_is_written() {
        let wasmplugin = json!({"spec": {"pluginConfig": {"mode": "listed", "difficulty": 12}}});
        let fresh = tor_plan(&["tor"], &BTreeMap::new(), &[("tor", "192.0.2.1/32\n")]);
        assert!(
            fresh
                .check_wasmplugin_config(&wasmplugin, "edge/pow")
                .is_ok()
        );
        // A kept list that somebody edited by hand in the ConfigMap: it cannot be packed.
        let err = Plan::new(
            &sources(&["tor"]),
            &map(&[("tor.txt", "192.0.2.1/32\nnot-a-cidr\n")]),
            &BTreeMap::new(),
            NOW,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("the filter would refuse list tor"), "{err}");
        assert!(err.contains("not-a-cidr"), "{err}");
        // The rest of the pluginConfig counts too: a field the filter refuses.
        let odd = json!({"spec": {"pluginConfig": {"mode": "sometimes"}}});
        let err = fresh.check_wasmplugin_config(&odd, "edge/pow").unwrap_err();
        assert!(err.to_string().contains("mode"), "{err}");
    }

    /// `n` distinct /32s, as text.
    fn addresses(n: u32) -> String {
        (0..n)
            .map(|i| format!("11.{}.{}.{}/32\n", i >> 16, (i >> 8) & 255, i & 255))
            .collect()
    }

    #[test]
    fn the_configmap_keeps_text_while_it_fits_then_packs_the_largest_lists() {
        let (small, big) = (addresses(10), addresses(80_000));
        let plan = tor_plan(
            &["tor", "hosting"],
            &BTreeMap::new(),
            &[("tor", &small), ("hosting", &big)],
        );
        // 80,000 /32s are 1.3 MB of text: hosting goes packed, tor stays text.
        let layout = plan.configmap_layout(None).unwrap();
        assert_eq!(layout.data["tor.txt"], small);
        assert!(!layout.data.contains_key("hosting.txt"));
        let packed = &layout.binary_data["hosting.packed"];
        assert_eq!(packed, &plan.packed["hosting"].base64);
        // Read back as the previous lists: the same text, under the text key.
        let cm = plan.configmap(
            &Cluster {
                namespace: "edge".into(),
                configmap: "policy-lists".into(),
                wasmplugin: None,
                api_server: String::new(),
                ca_file: "ca".into(),
                token_file: "token".into(),
                now: NOW.into(),
            },
            None,
            &layout,
        );
        let previous = previous_of(Some(&cm)).unwrap();
        assert_eq!(previous["hosting.txt"], big);
        assert_eq!(previous["tor.txt"], small);
        assert_eq!(previous["version"], NOW);
        // Everything fits as text: no binaryData at all.
        let plan = tor_plan(&["tor"], &BTreeMap::new(), &[("tor", &small)]);
        let layout = plan.configmap_layout(None).unwrap();
        assert!(layout.binary_data.is_empty());
        let cm = json!({"binaryData": {"tor.packed": "AQ=="}});
        let err = previous_of(Some(&cm)).unwrap_err().to_string();
        assert!(err.contains("binaryData.tor.packed"), "{err}");
    }

    /// A tor list and two crawler lists, `googlebot` and `gptbot`.
    fn with_crawlers() -> ListSources {
        serde_json::from_value(json!({"kind": "ListSources", "version": 3, "lists": [
            {"name": "tor", "generator": "tor", "sources": ["/t"]},
            {"name": "googlebot", "generator": "crawlers", "sources": ["/g.json"],
             "tokens": ["Googlebot"]},
            {"name": "gptbot", "generator": "crawlers", "sources": ["/o.json"],
             "tokens": ["GPTBot"]},
        ]}))
        .unwrap()
    }

    #[test]
    fn crawler_lists_with_content_carry_their_tokens_and_a_kept_one_keeps_them() {
        // googlebot failed and keeps its previous version; gptbot failed with none to keep.
        let old = map(&[("googlebot.txt", "66.249.64.0/19\n"), ("version", "v1")]);
        let plan = Plan::new(
            &with_crawlers(),
            &old,
            &map(&[("tor", "192.0.2.1/32\n")]),
            NOW,
        )
        .unwrap();
        assert_eq!(plan.kept, ["googlebot"]);
        assert_eq!(
            plan.lists()["tokens"],
            json!({"googlebot": ["Googlebot"]}),
            "no tokens for gptbot, which the filter would refuse without its set"
        );
        // The filter takes them as they are.
        let wasmplugin = json!({"spec": {"pluginConfig": {}}});
        assert!(
            plan.check_wasmplugin_config(&wasmplugin, "edge/pow")
                .is_ok()
        );
        // The ConfigMap carries no token.
        assert!(data(&plan).values().all(|v| !v.contains("Googlebot")));
        // Without crawler lists, no `tokens` key at all.
        let plain = tor_plan(&["tor"], &BTreeMap::new(), &[("tor", "192.0.2.1/32\n")]);
        assert!(plain.lists().get("tokens").is_none());
    }

    #[test]
    fn tokens_the_wasmplugin_lacks_are_a_change_with_a_new_version() {
        let old = map(&[
            ("googlebot.txt", "66.249.64.0/19\n"),
            ("gptbot.txt", "52.230.152.0/24\n"),
            ("tor.txt", "192.0.2.1/32\n"),
            ("version", "v1"),
        ]);
        let fresh = map(&[
            ("tor", "192.0.2.1/32\n"),
            ("googlebot", "66.249.64.0/19\n"),
            ("gptbot", "52.230.152.0/24\n"),
        ]);
        let planned = || Plan::new(&with_crawlers(), &old, &fresh, NOW).unwrap();
        let with_tokens = |tokens: Value| json!({"spec": {"pluginConfig": {"lists": {"version": "v1", "tokens": tokens}}}});
        let mut plan = planned();
        assert!(!plan.changed);
        plan.compare_wasmplugin(&with_tokens(
            json!({"googlebot": ["Googlebot"], "gptbot": ["GPTBot"]}),
        ));
        assert!(!plan.changed, "the same tokens: nothing to write");
        assert_eq!(plan.version, "v1");
        for stale in [
            json!({"googlebot": ["Googlebot"]}),
            json!({"googlebot": ["Googlebot"], "gptbot": ["GPTBot", "ChatGPT-User"]}),
            json!("not a map"),
        ] {
            let mut plan = planned();
            plan.compare_wasmplugin(&with_tokens(stale.clone()));
            assert!(plan.changed, "{stale}");
            assert_eq!(plan.version, NOW);
        }
        let mut plan = planned();
        plan.compare_wasmplugin(&json!({"spec": {"pluginConfig": {"lists": {"version": "v1"}}}}));
        assert!(plan.changed, "a WasmPlugin from before the crawler lists");
    }

    #[test]
    fn the_size_check_counts_other_keys_and_refuses_over_one_mib_naming_the_lists() {
        let plan = tor_plan(&["tor"], &BTreeMap::new(), &[("tor", &addresses(20_000))]);
        assert!(plan.configmap_layout(None).is_ok());
        let notes = "x".repeat(CONFIGMAP_LIMIT - 50);
        let current = json!({"data": {"notes": notes, "tor.txt": "old"}});
        let err = plan.configmap_layout(Some(&current)).unwrap_err();
        let err = err.to_string();
        assert!(err.contains("over the 1048576-byte limit"), "{err}");
        assert!(
            err.contains("tor: 20000 prefixes, 288818 bytes as text, 74 bytes packed"),
            "{err}"
        );
        assert!(err.contains("nothing was written"), "{err}");
    }
}
