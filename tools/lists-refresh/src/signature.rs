//! The directory response's own signatures (draft-meunier-http-message-signatures-directory-05,
//! section 4.2 "Binding keys to the directory authority"): the server signs its response once
//! per key of the directory, each signature covering `"@authority";req` (the authority the
//! client asked, RFC 9421 section 2.4's `req`), with `tag` `http-message-signatures-directory`
//! and `keyid` the key's RFC 7638 thumbprint; `created` and `expires` SHOULD be there. Clients
//! SHOULD ignore the keys that have no valid signature: that is what [`Signed::signing_keys`]
//! gives, the keys that do.
//!
//! The signature base is RFC 9421 section 2.5's: the `"@authority";req` line, then the
//! `@signature-params` line, both serialized with pow-core's structured-field writer (the one
//! the filter builds its bases with). A signature covering anything else is not supported: the
//! draft asks for the authority only, and a component this side cannot rebuild is never
//! guessed at.

use std::collections::BTreeSet;

use ed25519_dalek::Signature;
use pow_core::web_bot_auth::sf::{self, Bare, Member};
use pow_core::web_bot_auth::{CLOCK_SKEW_SECS, Ed25519Key};

/// The tag of a directory's response signature (directory-05, section 4.2).
pub const DIRECTORY_TAG: &str = "http-message-signatures-directory";

/// A directory response as its signatures are checked against it.
#[derive(Debug, Clone, Copy)]
pub struct Signed<'a> {
    /// The request's `@authority`, normalized (see `directory::authority_of`).
    pub authority: &'a str,
    /// The response's `Signature-Input` and `Signature`, their lines joined.
    pub input: Option<&'a str>,
    pub signature: Option<&'a str>,
    /// Unix seconds.
    pub now: u64,
}

impl Signed<'_> {
    /// The thumbprints of the `keys` whose signature of the response verifies; an error naming
    /// why each signature failed when none does.
    pub fn signing_keys(&self, keys: &[Ed25519Key]) -> Result<BTreeSet<String>, String> {
        let (Some(input), Some(signature)) = (self.input, self.signature) else {
            return Err("the response has no Signature-Input and Signature".to_owned());
        };
        let inputs = sf::parse_dictionary(input)
            .map_err(|_| "its Signature-Input is not a dictionary (RFC 9421 section 4.1)")?;
        let signatures = sf::parse_dictionary(signature)
            .map_err(|_| "its Signature is not a dictionary (RFC 9421 section 4.2)")?;
        let mut signing = BTreeSet::new();
        let mut why = Vec::new();
        for (label, member) in &inputs {
            match self.verify(keys, member, sf::member(&signatures, label)) {
                Ok(Some(thumbprint)) => {
                    signing.insert(thumbprint);
                }
                Ok(None) => {}
                Err(reason) => why.push(format!("`{label}` {reason}")),
            }
        }
        if signing.is_empty() {
            if why.is_empty() {
                why.push(format!("no signature is tagged `{DIRECTORY_TAG}`"));
            }
            return Err(why.join("; "));
        }
        Ok(signing)
    }

    /// One member of Signature-Input: `None` when it is not a directory signature, else the
    /// thumbprint of the key it verifies with, or why it does not.
    fn verify(
        &self,
        keys: &[Ed25519Key],
        member: &Member<'_>,
        signature: Option<&Member<'_>>,
    ) -> Result<Option<String>, &'static str> {
        let Member::InnerList(components, params) = member else {
            return Ok(None);
        };
        let string = |key: &str| match sf::param(params, key) {
            Some(Bare::String(s)) => Some(s.as_ref()),
            _ => None,
        };
        if string("tag") != Some(DIRECTORY_TAG) {
            return Ok(None);
        }
        if sf::param(params, "alg").is_some() && string("alg") != Some("ed25519") {
            return Err("is not an ed25519 signature");
        }
        let integer = |key: &str| match sf::param(params, key) {
            None => Ok(None),
            Some(Bare::Integer(i)) => u64::try_from(*i)
                .map(Some)
                .map_err(|_| "has a negative time"),
            Some(_) => Err("has a time that is not an integer"),
        };
        if integer("expires")?.is_some_and(|expires| self.now > expires) {
            return Err("has expired");
        }
        if integer("created")?
            .is_some_and(|created| created > self.now.saturating_add(CLOCK_SKEW_SECS))
        {
            return Err("was created in the future");
        }
        let authority_req = matches!(components.as_slice(), [item]
            if item.bare == Bare::String("@authority".into())
                && item.params == [("req", Bare::Boolean(true))]);
        if !authority_req {
            return Err("does not cover exactly \"@authority\";req, as the draft asks");
        }
        let keyid = string("keyid").ok_or("has no keyid")?;
        let key = keys
            .iter()
            .find(|k| k.thumbprint == keyid)
            .ok_or("names a key (keyid) the directory does not hold")?;
        let bytes: [u8; 64] = match signature {
            Some(Member::Item(sf::Item {
                bare: Bare::Bytes(b),
                ..
            })) => b.as_slice().try_into().map_err(|_| "is not 64 bytes")?,
            _ => return Err("has no Signature member of bytes"),
        };
        let mut base = String::new();
        for component in components {
            sf::write_item(&mut base, component);
            base.push_str(": ");
            base.push_str(self.authority);
            base.push('\n');
        }
        base.push_str("\"@signature-params\": ");
        sf::write_inner_list(&mut base, components, params);
        key.key
            .verify_strict(base.as_bytes(), &Signature::from_bytes(&bytes))
            .map_err(|_| "does not verify")?;
        Ok(Some(key.thumbprint.clone()))
    }
}
