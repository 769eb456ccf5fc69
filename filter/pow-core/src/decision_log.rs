//! One JSON line per request the filter answers itself (a challenge, a denial, a refused
//! solution), for the gateway's log: which rule decided and how, the lists the address is in,
//! the host, and the client's network (its /24 or /64, what a challenge is bound to), never its
//! full address, a cookie or a token. The glue writes at most one line per
//! [`INTERVAL_SECS`] per VM and says in the next line how many it left out, so a flood of
//! challenges costs a check, not a line each.

use crate::net::Net;

/// At most one decision line per this many seconds, per VM.
pub const INTERVAL_SECS: u64 = 1;

/// What the filter did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Challenge,
    Deny,
    VerifyFailed,
}

impl Event {
    pub fn name(self) -> &'static str {
        match self {
            Event::Challenge => "challenge",
            Event::Deny => "deny",
            Event::VerifyFailed => "verify_failed",
        }
    }
}

/// One decision, as the core saw it; formatted only when the glue's limiter lets it through.
#[derive(Debug, Clone)]
pub struct DecisionEvent<'a> {
    pub event: Event,
    /// The deciding rule (`None` for a refused solution: the verify endpoint is no rule's).
    pub rule: Option<&'a str>,
    /// `challenged`, `denied`, or `refused`.
    pub action: &'a str,
    /// The lists the address is in, in the table's order.
    pub lists: Vec<&'a str>,
    pub host: &'a str,
    pub network: Net,
    /// Why a solution was refused.
    pub reason: Option<&'a str>,
    pub difficulty: Option<u8>,
}

impl DecisionEvent<'_> {
    /// The JSON line (no newline), with `suppressed` lines left out since the last one.
    pub fn to_json(&self, suppressed: u64) -> String {
        let mut line = serde_json::json!({
            "msg": "pow-filter decision",
            "event": self.event.name(),
            "action": self.action,
            "lists": self.lists,
            "host": self.host,
            "network": network_text(&self.network),
        });
        if let Some(rule) = self.rule {
            line["rule"] = rule.into();
        }
        if let Some(reason) = self.reason {
            line["reason"] = reason.into();
        }
        if let Some(difficulty) = self.difficulty {
            line["difficulty"] = difficulty.into();
        }
        if suppressed > 0 {
            line["suppressed"] = suppressed.into();
        }
        line.to_string()
    }
}

/// A binding's network as text: `198.51.100.0/24`, `2001:db8:1:2::/64`, or `none` (the shared
/// network of requests without a usable address).
pub fn network_text(network: &Net) -> String {
    match network[0] {
        4 => format!(
            "{}/24",
            std::net::Ipv4Addr::new(network[1], network[2], network[3], 0)
        ),
        6 => {
            let mut octets = [0u8; 16];
            octets[..8].copy_from_slice(&network[1..9]);
            format!("{}/64", std::net::Ipv6Addr::from(octets))
        }
        _ => "none".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::{self, binding_net};

    #[test]
    fn a_line_names_the_network_never_the_address() {
        let event = DecisionEvent {
            event: Event::Challenge,
            rule: Some("list.tor"),
            action: "challenged",
            lists: vec!["tor"],
            host: "www.example.com",
            network: binding_net("185.220.101.7".parse().unwrap()),
            reason: None,
            difficulty: Some(20),
        };
        let line = event.to_json(3);
        let json: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(json["network"], "185.220.101.0/24");
        assert_eq!(json["rule"], "list.tor");
        assert_eq!(json["suppressed"], 3);
        assert!(!line.contains("185.220.101.7"), "{line}");
        let v6 = binding_net("2001:db8:1:2:3:4:5:6".parse().unwrap());
        assert_eq!(network_text(&v6), "2001:db8:1:2::/64");
        assert_eq!(network_text(&net::NO_ADDRESS), "none");
    }

    #[test]
    fn a_hostile_host_stays_one_json_string() {
        let event = DecisionEvent {
            event: Event::Deny,
            rule: Some("scrapers"),
            action: "denied",
            lists: Vec::new(),
            host: "x\"}\n{\"event\":\"forged",
            network: net::NO_ADDRESS,
            reason: None,
            difficulty: None,
        };
        let line = event.to_json(0);
        assert!(!line.contains('\n'));
        let json: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(json["event"], "deny");
        assert!(json.get("suppressed").is_none());
    }
}
