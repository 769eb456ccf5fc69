//! Which HMAC secret the filter uses, decided from the configuration and the VM environment.
//!
//! The current secret is the pluginConfig's `demo_secret` when there is one (the demo only), else
//! the variable `secret_env`; the previous secret, still accepted during a rotation, is the
//! variable `previous_secret_env`. Secrets are bytes: a value that is not UTF-8 is a secret like
//! any other, and its length is counted in bytes. A current secret missing, empty or shorter than
//! [`MIN_SECRET_LEN`] disarms the filter (said at CRITICAL); a previous secret in that state is
//! ignored (said at WARN).

use crate::config::{MIN_SECRET_LEN, PluginConfig};
use crate::crypto::{KeyError, Keys};
use crate::filter::metric;

/// How loud a notice is (the glue maps it onto the host's log levels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Warn,
    Critical,
}

/// A line the glue logs at configure time. Never contains a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub severity: Severity,
    pub text: String,
}

/// The outcome: keys when the filter is armed, and what to say about it.
#[derive(Debug)]
pub struct SecretChoice {
    pub keys: Option<Keys>,
    pub notices: Vec<Notice>,
}

/// Chooses the keys. `env` reads a variable of the VM environment as bytes (`None` when unset).
pub fn choose(config: &PluginConfig, env: &dyn Fn(&str) -> Option<Vec<u8>>) -> SecretChoice {
    let mut notices = Vec::new();
    let current = match &config.demo_secret {
        Some(demo) => {
            notices.push(Notice {
                severity: Severity::Warn,
                text: "pow-filter: using demo_secret from the pluginConfig: for the demo only, \
                       never in production"
                    .to_owned(),
            });
            Some(demo.as_bytes().to_vec())
        }
        None => env(&config.secret_env),
    };
    let previous = env(&config.previous_secret_env);
    let keys = match Keys::new(current.as_deref(), previous.as_deref()) {
        Ok((keys, warning)) => {
            if let Some(w) = warning {
                notices.push(Notice {
                    severity: Severity::Warn,
                    text: format!(
                        "pow-filter: previous secret `{}` ignored: {w}",
                        config.previous_secret_env
                    ),
                });
            }
            Some(keys)
        }
        Err(e) => {
            let why = match e {
                KeyError::Missing if config.demo_secret.is_some() => {
                    "demo_secret is empty".to_owned()
                }
                KeyError::Missing => format!(
                    "`{}` is not set (or empty) in the VM environment",
                    config.secret_env
                ),
                KeyError::TooShort(n) => format!(
                    "the HMAC secret in `{}` is {n} bytes long, shorter than {MIN_SECRET_LEN}",
                    if config.demo_secret.is_some() {
                        "demo_secret"
                    } else {
                        config.secret_env.as_str()
                    }
                ),
            };
            notices.push(Notice {
                severity: Severity::Critical,
                text: format!(
                    "pow-filter: NOT PROTECTING: {why}; every request passes unchallenged \
                     (set a secret of at least {MIN_SECRET_LEN} bytes; counted in {})",
                    metric::UNPROTECTED
                ),
            });
            None
        }
    };
    SecretChoice { keys, notices }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{self, Binding};

    const A: &[u8] = b"current-secret-of-at-least-32-bytes";
    const B: &[u8] = b"previous-secret-of-at-least-32-bytes";

    fn config(json: &str) -> PluginConfig {
        PluginConfig::from_json(json.as_bytes()).unwrap()
    }

    fn env_of(vars: &'static [(&'static str, &'static [u8])]) -> impl Fn(&str) -> Option<Vec<u8>> {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_vec())
        }
    }

    /// Which key a choice signs with: the cookie it issues checks under `key` alone.
    fn signs_with(choice: &SecretChoice, key: &[u8]) -> bool {
        let b = Binding::new([0; 9], "ua", "h").unwrap();
        let Some(keys) = &choice.keys else {
            return false;
        };
        let cookie = crypto::issue_cookie(keys, &b, 1000, 8);
        let only = Keys::new(Some(key), None).unwrap().0;
        crypto::check_cookie(&only, &b, &cookie, 900, 1000).is_ok()
    }

    #[test]
    fn the_current_variable_wins_and_the_previous_is_also_accepted() {
        let choice = choose(
            &config("{}"),
            &env_of(&[("POW_HMAC_SECRET", A), ("POW_HMAC_SECRET_PREVIOUS", B)]),
        );
        assert!(signs_with(&choice, A));
        assert!(!signs_with(&choice, B));
        assert!(choice.notices.is_empty(), "{:?}", choice.notices);
        let b = Binding::new([0; 9], "ua", "h").unwrap();
        let old = Keys::new(Some(B), None).unwrap().0;
        let cookie = crypto::issue_cookie(&old, &b, 1000, 8);
        let keys = choice.keys.as_ref().unwrap();
        assert_eq!(crypto::check_cookie(keys, &b, &cookie, 900, 1000), Ok(8));
    }

    #[test]
    fn the_demo_secret_wins_over_the_environment_and_is_warned_about() {
        let choice = choose(
            &config(r#"{"demo_secret": "demo-secret-of-at-least-32-bytes!!"}"#),
            &env_of(&[("POW_HMAC_SECRET", A)]),
        );
        assert!(signs_with(&choice, b"demo-secret-of-at-least-32-bytes!!"));
        assert_eq!(choice.notices.len(), 1);
        assert_eq!(choice.notices[0].severity, Severity::Warn);
        assert!(choice.notices[0].text.contains("demo_secret"));
    }

    #[test]
    fn a_missing_or_short_current_secret_disarms_and_says_why() {
        let missing = choose(&config("{}"), &env_of(&[]));
        assert!(missing.keys.is_none());
        assert_eq!(missing.notices[0].severity, Severity::Critical);
        assert!(
            missing.notices[0]
                .text
                .contains("`POW_HMAC_SECRET` is not set")
        );
        let empty = choose(&config("{}"), &env_of(&[("POW_HMAC_SECRET", b"")]));
        assert!(empty.keys.is_none());
        let short = choose(
            &config("{}"),
            &env_of(&[("POW_HMAC_SECRET", b"0123456789")]),
        );
        assert!(short.keys.is_none());
        assert!(short.notices[0].text.contains("10 bytes long"));
        assert!(short.notices[0].text.contains("POW_HMAC_SECRET"));
    }

    #[test]
    fn a_short_previous_secret_is_ignored_with_a_warning() {
        let choice = choose(
            &config("{}"),
            &env_of(&[
                ("POW_HMAC_SECRET", A),
                ("POW_HMAC_SECRET_PREVIOUS", b"short"),
            ]),
        );
        assert!(signs_with(&choice, A));
        assert_eq!(choice.notices.len(), 1);
        assert_eq!(choice.notices[0].severity, Severity::Warn);
        assert!(choice.notices[0].text.contains("POW_HMAC_SECRET_PREVIOUS"));
        assert!(choice.notices[0].text.contains("5 bytes"));
    }

    #[test]
    fn a_secret_that_is_not_utf8_is_a_secret_measured_in_bytes() {
        // 32 bytes, none of them valid UTF-8 on its own.
        const RAW: &[u8] = &[0xff; 32];
        let choice = choose(&config("{}"), &env_of(&[("POW_HMAC_SECRET", RAW)]));
        assert!(signs_with(&choice, RAW));
        // 16 two-byte characters: 32 bytes although 16 characters.
        let wide = "é".repeat(16);
        let bytes: &'static [u8] = Box::leak(wide.into_bytes().into_boxed_slice());
        let vars: &'static [(&'static str, &'static [u8])] =
            Box::leak(vec![("POW_HMAC_SECRET", bytes)].into_boxed_slice());
        assert!(choose(&config("{}"), &env_of(vars)).keys.is_some());
    }
}
