//! Credentials, resolved as Scaleway's own tools resolve them (scaleway-sdk-go `scw/config.go`,
//! `scw/env.go`; the CLI and Terraform share that engine):
//!
//! 1. the config file: `$SCW_CONFIG_PATH`, else `$XDG_CONFIG_HOME/scw/config.yaml`, else
//!    `$HOME/.config/scw/config.yaml` (a missing default `config.yaml` falls back to
//!    `config.yml`); a missing file is an empty profile;
//! 2. its active profile: `$SCW_PROFILE`, else the file's `active_profile`, else the root keys;
//!    a named profile is merged over the root keys (a key it leaves out comes from the root);
//! 3. environment variables over the profile, key by key (`SCW_ACCESS_KEY`, `SCW_SECRET_KEY`,
//!    `SCW_DEFAULT_PROJECT_ID`, `SCW_API_URL`, ... and the legacy aliases).
//!
//! The secret key is a [`SecretKey`]: it has no `Display`, its `Debug` is redacted, and the only
//! way to read it is [`SecretKey::expose`], called where the `X-Auth-Token` header is set.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use pop_common::tool::Env;
use serde::Deserialize;

/// The public API, when neither the profile nor `SCW_API_URL` names another.
pub const DEFAULT_API_URL: &str = "https://api.scaleway.com";

/// A secret the API hands out or takes (an API key's secret key, a rescue password): no
/// `Display`, a redacted `Debug`, read only through [`Secret::expose`] where it is sent.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the one place that sends it (the `X-Auth-Token` header, SigV4's key, or
    /// `sudo -S`'s standard input).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// The secret key of an API key: never printed, logged or shown by `Debug`.
pub type SecretKey = Secret;

/// One profile of the config file (the root keys, or one entry of `profiles:`). Keys the file
/// may hold that this tool does not use (`send_telemetry`, `s3_*`) are ignored.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Profile {
    pub access_key: Option<String>,
    pub secret_key: Option<SecretKey>,
    pub api_url: Option<String>,
    pub insecure: Option<bool>,
    pub default_organization_id: Option<String>,
    pub default_project_id: Option<String>,
    pub default_region: Option<String>,
    pub default_zone: Option<String>,
}

impl Profile {
    /// `self` over `base`, key by key.
    fn over(self, base: Profile) -> Profile {
        Profile {
            access_key: self.access_key.or(base.access_key),
            secret_key: self.secret_key.or(base.secret_key),
            api_url: self.api_url.or(base.api_url),
            insecure: self.insecure.or(base.insecure),
            default_organization_id: self
                .default_organization_id
                .or(base.default_organization_id),
            default_project_id: self.default_project_id.or(base.default_project_id),
            default_region: self.default_region.or(base.default_region),
            default_zone: self.default_zone.or(base.default_zone),
        }
    }
}

/// The config file: the root profile, `active_profile` and `profiles:`.
#[derive(Debug, Default, Deserialize)]
pub struct ConfigFile {
    #[serde(flatten)]
    pub root: Profile,
    pub active_profile: Option<String>,
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
}

/// The environment variables that carry the secret key: `SCW_SECRET_KEY` and the SDK's legacy
/// names (scw/env.go: SCW_TOKEN, SCALEWAY_TOKEN and SCALEWAY_ACCESS_KEY all meant the secret in
/// the v1 tools). A program the tools run that does not talk to Scaleway gets none of them.
pub const SECRET_VARIABLES: [&str; 4] = [
    "SCW_SECRET_KEY",
    "SCW_TOKEN",
    "SCALEWAY_TOKEN",
    "SCALEWAY_ACCESS_KEY",
];

/// What the tool uses, once resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: SecretKey,
    pub project_id: String,
    pub organization_id: Option<String>,
    /// Without a trailing slash.
    pub api_url: String,
    /// Where the keys came from: the environment variables that gave them, or the profile and
    /// file read, or both (for `make check`).
    pub source: String,
}

impl Credentials {
    /// The access key Object Storage is signed with: `ACCESS_KEY@PROJECT_ID`, so that buckets
    /// are made and read in the project everything else is (the bare key acts in the key's
    /// preferred Object Storage project: scaleway/docs-content
    /// pages/iam/api-cli/using-api-key-object-storage; the Block import takes only a bucket of
    /// the snapshot's own project).
    pub fn object_storage_access_key(&self) -> String {
        format!("{}@{}", self.access_key, self.project_id)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("{}: cannot read the Scaleway config: {message}", path.display())]
    Read { path: PathBuf, message: String },
    // The parser's own message is left out: it may quote a value, and a value may be a secret.
    #[error("{}: the Scaleway config is not valid YAML (near {location})", path.display())]
    Syntax { path: PathBuf, location: String },
    #[error("{}: profile `{name}` (from {origin}) does not exist in `profiles:`", path.display())]
    NoProfile {
        path: PathBuf,
        name: String,
        origin: &'static str,
    },
    #[error(
        "no {what}: set {env} or `{key}` in the active profile of {}",
        path.display()
    )]
    Missing {
        what: &'static str,
        env: &'static str,
        key: &'static str,
        path: PathBuf,
    },
    #[error("environment variable {0} is not valid UTF-8")]
    NotUnicode(String),
    #[error(transparent)]
    Endpoint(#[from] crate::http::EndpointError),
}

/// Where the config file is, and whether it is the default one (which falls back to
/// `config.yml`).
pub fn config_path(env: &Env) -> (PathBuf, bool) {
    if let Some(path) = env.non_empty("SCW_CONFIG_PATH") {
        return (PathBuf::from(path), false);
    }
    let dir = match env.non_empty("XDG_CONFIG_HOME") {
        Some(xdg) => PathBuf::from(xdg).join("scw"),
        None => PathBuf::from(env.non_empty("HOME").unwrap_or(".")).join(".config/scw"),
    };
    (dir.join("config.yaml"), true)
}

/// Reads the config file (a missing one is empty) and resolves the credentials.
pub fn load(env: &Env) -> Result<Credentials, CredentialsError> {
    let (path, default) = config_path(env);
    // The SDK falls back to `config.yml` when the default `config.yaml` is missing; with neither
    // there, the messages name `config.yaml`, the file to create.
    let legacy = path.with_file_name("config.yml");
    let path = if default && !path.exists() && legacy.exists() {
        legacy
    } else {
        path
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
        Err(err) => {
            return Err(CredentialsError::Read {
                path,
                message: err.to_string(),
            });
        }
    };
    resolve(env, &path, text.as_deref())
}

/// Where the keys that make the credentials came from, for [`Credentials::source`].
#[derive(Debug, Default)]
struct Origins {
    /// The environment variables that gave a key.
    env: Vec<&'static str>,
    /// The profile's keys that gave one.
    file: Vec<&'static str>,
}

impl Origins {
    /// The variable's value when one of them is set, else the profile's `key`; noted.
    fn pick<T>(
        &mut self,
        from_env: Option<(&'static str, T)>,
        from_file: Option<T>,
        key: &'static str,
    ) -> Option<T> {
        match (from_env, from_file) {
            (Some((name, value)), _) => {
                self.env.push(name);
                Some(value)
            }
            (None, Some(value)) => {
                self.file.push(key);
                Some(value)
            }
            (None, None) => None,
        }
    }

    /// What they say: the variables, the profile (`profile` names it and its file), or both.
    fn describe(&self, profile: &str) -> String {
        let variables = |names: &[&str]| match names {
            [one] => format!("the environment variable {one}"),
            many => format!("the environment variables {}", many.join(", ")),
        };
        match (self.env.is_empty(), self.file.is_empty()) {
            (false, true) => variables(&self.env),
            (true, _) => profile.to_owned(),
            (false, false) => format!(
                "{}, and {} from {profile}",
                variables(&self.env),
                self.file.join(", ")
            ),
        }
    }
}

/// The first of `names` that the environment sets to something, with its name.
fn first_var(
    env: &Env,
    names: &[&'static str],
) -> Result<Option<(&'static str, String)>, CredentialsError> {
    for name in names {
        let value = env
            .get(name)
            .map_err(|_| CredentialsError::NotUnicode((*name).to_owned()))?;
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            return Ok(Some((name, value.to_owned())));
        }
    }
    Ok(None)
}

/// The config file's text decoded (none, or only blanks, is an empty file).
fn parse_file(path: &Path, text: Option<&str>) -> Result<ConfigFile, CredentialsError> {
    match text {
        None => Ok(ConfigFile::default()),
        Some(text) if text.trim().is_empty() => Ok(ConfigFile::default()),
        Some(text) => serde_norway::from_str(text).map_err(|err| CredentialsError::Syntax {
            path: path.to_path_buf(),
            location: err
                .location()
                .map(|l| format!("line {}, column {}", l.line(), l.column()))
                .unwrap_or_else(|| "an unknown place".into()),
        }),
    }
}

/// The profile `SCW_PROFILE` or `active_profile` names, merged over the root keys (or the root
/// keys alone), and how to name it.
fn active_profile(
    env: &Env,
    file: ConfigFile,
    path: &Path,
) -> Result<(Profile, String), CredentialsError> {
    let (name, origin) = match first_var(env, &["SCW_PROFILE"])? {
        Some((_, name)) => (Some(name), "SCW_PROFILE"),
        None => (file.active_profile.clone(), "active_profile"),
    };
    let Some(name) = name else {
        let described = format!("the default profile of {}", path.display());
        return Ok((file.root, described));
    };
    match file.profiles.get(&name) {
        Some(named) => {
            let described = format!("profile `{name}` of {}", path.display());
            Ok((named.clone().over(file.root), described))
        }
        None => Err(CredentialsError::NoProfile {
            path: path.to_path_buf(),
            name,
            origin,
        }),
    }
}

/// The pure part: `text` is the config file's content (`None` when there is none).
pub fn resolve(
    env: &Env,
    path: &Path,
    text: Option<&str>,
) -> Result<Credentials, CredentialsError> {
    let file = parse_file(path, text)?;
    let (profile, profile_named) = active_profile(env, file, path)?;
    let missing = |what, env, key| CredentialsError::Missing {
        what,
        env,
        key,
        path: path.to_path_buf(),
    };
    let mut origins = Origins::default();
    let access_key = origins
        .pick(
            first_var(env, &["SCW_ACCESS_KEY"])?,
            profile.access_key,
            "access_key",
        )
        .ok_or_else(|| missing("access key", "SCW_ACCESS_KEY", "access_key"))?;
    let secret_names = SECRET_VARIABLES;
    let secret_key = origins
        .pick(
            first_var(env, &secret_names)?.map(|(name, value)| (name, Secret(value))),
            profile.secret_key,
            "secret_key",
        )
        .ok_or_else(|| missing("secret key", "SCW_SECRET_KEY", "secret_key"))?;
    let project_id = origins
        .pick(
            first_var(env, &["SCW_DEFAULT_PROJECT_ID"])?,
            profile.default_project_id,
            "default_project_id",
        )
        .ok_or_else(|| missing("project id", "SCW_DEFAULT_PROJECT_ID", "default_project_id"))?;
    let organization_id = first_var(env, &["SCW_DEFAULT_ORGANIZATION_ID", "SCW_ORGANIZATION"])?
        .map(|(_, value)| value)
        .or(profile.default_organization_id);
    let (api_url, api_url_from) = match first_var(env, &["SCW_API_URL"])? {
        Some((_, url)) => (url, "SCW_API_URL".to_owned()),
        None => match profile.api_url {
            Some(url) => (url, format!("api_url of {profile_named}")),
            None => (DEFAULT_API_URL.to_owned(), "the default API URL".to_owned()),
        },
    };
    // The secret key goes to this endpoint with every call.
    crate::http::check_endpoint(&api_url_from, &api_url)?;
    let api_url = api_url.trim_end_matches('/').to_owned();
    Ok(Credentials {
        access_key,
        secret_key,
        project_id,
        organization_id,
        api_url,
        source: origins.describe(&profile_named),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    const FILE: &str = "\
access_key: SCWROOTROOTROOTROOTRO
secret_key: 11111111-1111-4111-8111-111111111111
default_project_id: root-project
api_url: https://root.example
active_profile: work
profiles:
  work:
    access_key: SCWWORKWORKWORKWORKWO
    secret_key: 22222222-2222-4222-8222-222222222222
  other:
    default_project_id: other-project
";

    fn env(pairs: &[(&str, &str)]) -> Env {
        Env::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    fn creds(pairs: &[(&str, &str)], text: Option<&str>) -> Result<Credentials, CredentialsError> {
        resolve(&env(pairs), Path::new("/cfg.yaml"), text)
    }

    /// The message of the error these variables and this file are refused with.
    fn refusal(pairs: &[(&str, &str)], text: Option<&str>) -> String {
        creds(pairs, text).unwrap_err().to_string()
    }

    /// Asserts that these variables and this file are refused with a message that names every one
    /// of `names`.
    #[track_caller]
    fn assert_refused_naming(pairs: &[(&str, &str)], text: Option<&str>, names: &[&str]) {
        let err = refusal(pairs, text);
        for name in names {
            assert!(err.contains(name), "{err}");
        }
    }

    #[test]
    fn the_active_profile_is_merged_over_the_root() {
        let c = creds(&[], Some(FILE)).unwrap();
        assert_eq!(c.access_key, "SCWWORKWORKWORKWORKWO");
        assert_eq!(
            c.secret_key.expose(),
            "22222222-2222-4222-8222-222222222222"
        );
        // Not in `work`: from the root.
        assert_eq!(c.project_id, "root-project");
        assert_eq!(c.api_url, "https://root.example");
        assert!(c.source.contains("`work`"));
    }

    #[test]
    fn scw_profile_wins_over_active_profile() {
        let c = creds(&[("SCW_PROFILE", "other")], Some(FILE)).unwrap();
        assert_eq!(c.access_key, "SCWROOTROOTROOTROOTRO");
        assert_eq!(c.project_id, "other-project");
    }

    #[test]
    fn without_any_profile_name_the_root_keys_are_used() {
        let text = FILE.replace("active_profile: work\n", "");
        let c = creds(&[], Some(&text)).unwrap();
        assert_eq!(c.access_key, "SCWROOTROOTROOTROOTRO");
        assert_eq!(
            c.secret_key.expose(),
            "11111111-1111-4111-8111-111111111111"
        );
    }

    #[test]
    fn the_environment_wins_over_every_profile_key_by_key() {
        let c = creds(
            &[
                ("SCW_SECRET_KEY", "33333333-3333-4333-8333-333333333333"),
                ("SCW_API_URL", "http://127.0.0.1:9/"),
            ],
            Some(FILE),
        )
        .unwrap();
        assert_eq!(
            c.secret_key.expose(),
            "33333333-3333-4333-8333-333333333333"
        );
        assert_eq!(c.api_url, "http://127.0.0.1:9");
        // Not in the environment: still the profile's.
        assert_eq!(c.access_key, "SCWWORKWORKWORKWORKWO");
    }

    #[test]
    fn an_api_url_in_plain_http_is_refused_unless_on_loopback() {
        assert_refused_naming(
            &[("SCW_API_URL", "http://api.example.com")],
            Some(FILE),
            &["SCW_API_URL", "plain http"],
        );
        let text = FILE.replace("https://root.example", "http://root.example");
        assert_refused_naming(&[], Some(&text), &["api_url of profile `work`"]);
        let c = creds(&[("SCW_API_URL", "http://127.0.0.1:9/")], Some(FILE)).unwrap();
        assert_eq!(c.api_url, "http://127.0.0.1:9");
    }

    #[test]
    fn the_legacy_secret_names_are_read_after_the_current_one() {
        let c = creds(&[("SCW_TOKEN", "legacy")], Some(FILE)).unwrap();
        assert_eq!(c.secret_key.expose(), "legacy");
        let c = creds(
            &[("SCW_TOKEN", "legacy"), ("SCW_SECRET_KEY", "new")],
            Some(FILE),
        )
        .unwrap();
        assert_eq!(c.secret_key.expose(), "new");
    }

    #[test]
    fn environment_only_works_without_a_file() {
        let c = creds(
            &[
                ("SCW_ACCESS_KEY", "SCWENVENVENVENVENVENV"),
                ("SCW_SECRET_KEY", "s"),
                ("SCW_DEFAULT_PROJECT_ID", "p"),
            ],
            None,
        )
        .unwrap();
        assert_eq!(c.api_url, DEFAULT_API_URL);
        assert_eq!(c.project_id, "p");
        // No file was read: the source says the variables, and no file.
        assert_eq!(
            c.source,
            "the environment variables SCW_ACCESS_KEY, SCW_SECRET_KEY, SCW_DEFAULT_PROJECT_ID"
        );
    }

    #[test]
    fn the_source_names_the_variables_and_the_profile_keys_that_gave_a_key() {
        let c = creds(&[], Some(FILE)).unwrap();
        assert_eq!(c.source, "profile `work` of /cfg.yaml");
        let text = FILE.replace("active_profile: work\n", "");
        assert_eq!(
            creds(&[], Some(&text)).unwrap().source,
            "the default profile of /cfg.yaml"
        );
        let c = creds(&[("SCW_TOKEN", "legacy")], Some(FILE)).unwrap();
        assert_eq!(
            c.source,
            "the environment variable SCW_TOKEN, and access_key, default_project_id from \
             profile `work` of /cfg.yaml"
        );
    }

    #[test]
    fn without_any_file_the_default_config_yaml_is_named_not_config_yml() {
        let home = tempfile::tempdir().unwrap();
        let home_str = home.path().to_str().unwrap();
        let err = load(&env(&[("HOME", home_str), ("SCW_ACCESS_KEY", "a")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains(".config/scw/config.yaml"), "{err}");
        // A `config.yml` alone is read, as the SDK reads it.
        let dir = home.path().join(".config/scw");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("config.yml"), FILE).unwrap();
        let c = load(&env(&[("HOME", home_str)])).unwrap();
        assert!(c.source.ends_with(".config/scw/config.yml"), "{}", c.source);
    }

    #[test]
    fn a_missing_key_names_the_variable_and_the_file_key() {
        assert_refused_naming(
            &[("SCW_ACCESS_KEY", "a")],
            None,
            &["SCW_SECRET_KEY", "secret_key"],
        );
    }

    #[test]
    fn a_profile_that_does_not_exist_is_refused_with_its_origin() {
        assert_refused_naming(
            &[("SCW_PROFILE", "nope")],
            Some(FILE),
            &["`nope`", "SCW_PROFILE"],
        );
    }

    #[test]
    fn the_config_path_follows_the_sdk_order() {
        let (p, default) = config_path(&env(&[("SCW_CONFIG_PATH", "/x.yaml"), ("HOME", "/h")]));
        assert_eq!((p, default), (PathBuf::from("/x.yaml"), false));
        let (p, _) = config_path(&env(&[("XDG_CONFIG_HOME", "/xdg"), ("HOME", "/h")]));
        assert_eq!(p, PathBuf::from("/xdg/scw/config.yaml"));
        let (p, default) = config_path(&env(&[("HOME", "/h")]));
        assert_eq!(
            (p, default),
            (PathBuf::from("/h/.config/scw/config.yaml"), true)
        );
    }

    #[test]
    fn the_secret_never_shows_in_debug_or_in_errors() {
        let c = creds(&[], Some(FILE)).unwrap();
        let debug = format!("{c:?}");
        assert!(!debug.contains("22222222"), "{debug}");
        assert!(debug.contains("<redacted>"));
        // A YAML error quotes no value.
        let bad = "secret_key: 44444444-4444\n  : [\n";
        let err = refusal(&[], Some(bad));
        assert!(!err.contains("44444444"), "{err}");
    }
}
