//! What one run applies: every list with content (fresh, or the previous one kept when its
//! generator failed), the User-Agent tokens of its crawler lists, the version stamp, the size
//! checks, and the two objects it server-side applies (the ConfigMap's data and the
//! WasmPlugin's `pluginConfig.lists`).

use std::collections::BTreeMap;

use lists_core::records::ListSources;
use serde_json::{Value, json};

use crate::{CONFIGMAP_LIMIT, Cluster, OBJECT_LIMIT, RefreshError};

/// The ConfigMap key of a list.
pub fn key_of(name: &str) -> String {
    format!("{name}.txt")
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

/// What will be applied.
#[derive(Debug)]
pub(crate) struct Plan {
    /// Every list of the sources that has content: fresh, or the previous one kept.
    pub(crate) sets: BTreeMap<String, String>,
    /// The tokens of every crawler list in `sets`, from the sources: a kept list keeps them too.
    pub(crate) tokens: BTreeMap<String, Vec<String>>,
    pub(crate) fresh: Vec<String>,
    pub(crate) kept: Vec<String>,
    pub(crate) changed: bool,
    pub(crate) version: String,
    pub(crate) old_version: Option<String>,
    now: String,
}

impl Plan {
    /// `now` stamps the version when anything changed.
    pub(crate) fn new(
        sources: &ListSources,
        old: &BTreeMap<String, String>,
        fresh: &BTreeMap<String, String>,
        now: &str,
    ) -> Plan {
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
        // Only lists with content: the filter refuses tokens of a list it does not have.
        let tokens = sources
            .lists
            .iter()
            .filter(|list| !list.tokens.is_empty() && sets.contains_key(&list.name))
            .map(|list| (list.name.clone(), list.tokens.clone()))
            .collect();
        Plan {
            sets,
            tokens,
            fresh: fresh_names,
            kept,
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
        }
    }

    /// The tokens live in the sources, not in the ConfigMap: a WasmPlugin whose lists carry
    /// other tokens (a token added to the sources, a first run with crawler lists) is out of
    /// date even when no set changed. That is a change, stamped with a new version.
    pub(crate) fn compare_tokens(&mut self, wasmplugin: &Value) {
        let current: Option<BTreeMap<String, Vec<String>>> =
            match wasmplugin.pointer("/spec/pluginConfig/lists/tokens") {
                None => Some(BTreeMap::new()),
                Some(tokens) => serde_json::from_value(tokens.clone()).ok(),
            };
        if current.as_ref() != Some(&self.tokens) {
            self.changed = true;
            self.version.clone_from(&self.now);
        }
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

    /// The ConfigMap's data this job owns.
    pub(crate) fn data(&self) -> BTreeMap<String, String> {
        let mut data: BTreeMap<String, String> = self
            .sets
            .iter()
            .map(|(name, text)| (key_of(name), text.clone()))
            .collect();
        data.insert("version".into(), self.version.clone());
        data.insert("generated_at".into(), self.version.clone());
        data
    }

    /// Refuses a ConfigMap over 1 MiB: ours plus the keys other managers put there.
    pub(crate) fn check_size(&self, current: Option<&Value>) -> Result<(), RefreshError> {
        let ours = self.data();
        let others: usize = data_of(current)
            .iter()
            .filter(|(k, _)| !(k.ends_with(".txt") || *k == "version" || *k == "generated_at"))
            .map(|(k, v)| k.len() + v.len())
            .sum();
        let binary: usize = current
            .and_then(|o| o.get("binaryData"))
            .and_then(Value::as_object)
            .map(|b| {
                b.iter()
                    .map(|(k, v)| k.len() + v.as_str().map_or(0, |s| s.len() / 4 * 3))
                    .sum()
            })
            .unwrap_or(0);
        let size: usize =
            ours.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() + others + binary;
        if size > CONFIGMAP_LIMIT {
            return Err(RefreshError::TooLarge {
                what: "policy-lists ConfigMap",
                size,
                limit: CONFIGMAP_LIMIT,
                detail: Some(self.summary()),
            });
        }
        Ok(())
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
        }
        let size = json_len(&object) + json_len(&self.lists());
        if size > OBJECT_LIMIT {
            return Err(RefreshError::TooLarge {
                what: "WasmPlugin",
                size,
                limit: OBJECT_LIMIT,
                detail: None,
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
        }
        let refused = |reason: String| RefreshError::FilterRefuses {
            wasmplugin: wasmplugin.to_owned(),
            reason,
        };
        let bytes = serde_json::to_vec(&config).map_err(|e| refused(e.to_string()))?;
        let decoded =
            pow_core::PluginConfig::from_json(&bytes).map_err(|e| refused(e.to_string()))?;
        pow_core::Filter::new(decoded, None, [0; 32]).map_err(refused)?;
        Ok(())
    }

    /// The filter's `lists` object; `tokens` only when a list has some, so that lists without
    /// crawlers read as they always did.
    pub(crate) fn lists(&self) -> Value {
        let mut lists =
            json!({"version": self.version, "generated_at": self.version, "sets": self.sets});
        if !self.tokens.is_empty() {
            lists["tokens"] = json!(self.tokens);
        }
        lists
    }

    pub(crate) fn configmap(&self, cluster: &Cluster, current: Option<&Value>) -> Value {
        let mut metadata = json!({"name": cluster.configmap, "namespace": cluster.namespace});
        // Optimistic concurrency: if someone wrote the ConfigMap since we read it, the apply
        // fails with 409 instead of overwriting what we did not read.
        if let Some(rv) = current.and_then(|o| o.pointer("/metadata/resourceVersion")) {
            metadata["resourceVersion"] = rv.clone();
        }
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": self.data()})
    }

    pub(crate) fn wasmplugin(&self, cluster: &Cluster, name: &str) -> Value {
        json!({
            "apiVersion": "extensions.istio.io/v1alpha1",
            "kind": "WasmPlugin",
            "metadata": {"name": name, "namespace": cluster.namespace},
            "spec": {"pluginConfig": {"lists": self.lists()}},
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
            r#"{{"kind":"ListSources","version":2,"lists":[{}]}}"#,
            lists.join(",")
        ))
        .unwrap()
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_failed_list_keeps_its_previous_content_and_unchanged_lists_keep_the_version() {
        let old = map(&[
            ("tor.txt", "192.0.2.1/32\n"),
            ("hosting.txt", "10.0.0.0/8\n"),
            ("version", "v1"),
        ]);
        let plan = Plan::new(
            &sources(&["tor", "hosting"]),
            &old,
            &map(&[("tor", "192.0.2.1/32\n")]),
            NOW,
        );
        assert!(!plan.changed);
        assert_eq!(plan.version, "v1");
        assert_eq!(plan.kept, ["hosting"]);
        assert_eq!(plan.data()["hosting.txt"], "10.0.0.0/8\n");
        let plan = Plan::new(
            &sources(&["tor", "hosting"]),
            &old,
            &map(&[("tor", "192.0.2.9/32\n")]),
            NOW,
        );
        assert!(plan.changed);
        assert_eq!(plan.version, NOW);
        // A list dropped from the sources is a change (its key goes away).
        let plan = Plan::new(
            &sources(&["tor"]),
            &old,
            &map(&[("tor", "192.0.2.1/32\n")]),
            NOW,
        );
        assert!(plan.changed);
        assert!(!plan.data().contains_key("hosting.txt"));
    }

    #[test]
    fn lists_the_filter_would_refuse_are_refused_before_anything_is_written() {
        let wasmplugin = json!({"spec": {"pluginConfig": {"mode": "listed", "difficulty": 12}}});
        let fresh = Plan::new(
            &sources(&["tor"]),
            &BTreeMap::new(),
            &map(&[("tor", "192.0.2.1/32\n")]),
            NOW,
        );
        assert!(
            fresh
                .check_wasmplugin_config(&wasmplugin, "edge/pow")
                .is_ok()
        );
        // A kept list that somebody edited by hand in the ConfigMap.
        let kept = Plan::new(
            &sources(&["tor"]),
            &map(&[("tor.txt", "192.0.2.1/32\nnot-a-cidr\n")]),
            &BTreeMap::new(),
            NOW,
        );
        let err = kept
            .check_wasmplugin_config(&wasmplugin, "edge/pow")
            .unwrap_err()
            .to_string();
        assert!(err.contains("edge/pow"), "{err}");
        assert!(err.contains("lists.sets.tor"), "{err}");
        assert!(err.contains("not-a-cidr"), "{err}");
        // The rest of the pluginConfig counts too: a field the filter refuses.
        let odd = json!({"spec": {"pluginConfig": {"mode": "sometimes"}}});
        let err = fresh.check_wasmplugin_config(&odd, "edge/pow").unwrap_err();
        assert!(err.to_string().contains("mode"), "{err}");
    }

    /// A tor list and two crawler lists, `googlebot` and `gptbot`.
    fn with_crawlers() -> ListSources {
        serde_json::from_value(json!({"kind": "ListSources", "version": 2, "lists": [
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
        );
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
        assert!(plan.data().values().all(|v| !v.contains("Googlebot")));
        // Without crawler lists, no `tokens` key at all.
        let plain = Plan::new(
            &sources(&["tor"]),
            &BTreeMap::new(),
            &map(&[("tor", "192.0.2.1/32\n")]),
            NOW,
        );
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
        let planned = || Plan::new(&with_crawlers(), &old, &fresh, NOW);
        let with_tokens = |tokens: Value| json!({"spec": {"pluginConfig": {"lists": {"version": "v1", "tokens": tokens}}}});
        let mut plan = planned();
        assert!(!plan.changed);
        plan.compare_tokens(&with_tokens(
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
            plan.compare_tokens(&with_tokens(stale.clone()));
            assert!(plan.changed, "{stale}");
            assert_eq!(plan.version, NOW);
        }
        let mut plan = planned();
        plan.compare_tokens(&json!({"spec": {"pluginConfig": {"lists": {"version": "v1"}}}}));
        assert!(plan.changed, "a WasmPlugin from before the crawler lists");
    }

    #[test]
    fn the_size_check_counts_other_keys_and_refuses_over_one_mib() {
        let big = "x".repeat(CONFIGMAP_LIMIT / 2);
        let plan = Plan::new(
            &sources(&["tor"]),
            &BTreeMap::new(),
            &map(&[("tor", &big)]),
            NOW,
        );
        assert!(plan.check_size(None).is_ok());
        let current = json!({"data": {"notes": big, "tor.txt": "old"}});
        let err = plan.check_size(Some(&current)).unwrap_err();
        assert!(
            err.to_string().contains("over the 1048576-byte limit"),
            "{err}"
        );
    }
}
