//! oci-image: the images the clusters run, built reproducibly without a container engine and
//! pushed to a registry through the OCI distribution API.
//!
//! ```text
//! oci-image filter --wasm pow_filter.wasm --out target/images/pow-filter     # prints the digest
//! oci-image lists --bin-dir target/x86_64-unknown-linux-musl/release \
//!                 --ca-bundle /etc/ssl/certs/ca-certificates.crt --out target/images/lists-refresh
//! oci-image backup --bin-dir target/x86_64-unknown-linux-musl/release \
//!                  --talosctl ~/.cache/edgepop/upstream/talosctl/<pin>/talosctl \
//!                  --age ~/.cache/edgepop/upstream/age/<pin>/age \
//!                  --ca-bundle /etc/ssl/certs/ca-certificates.crt --out target/images/etcd-backup
//! oci-image publish --edge-config config/edge.json \
//!                   --filter target/images/pow-filter --lists target/images/lists-refresh \
//!                   --backup target/images/etcd-backup \
//!                   > talos/_out/published-images.json                     # PublishedImages
//! ```
//!
//! - `filter`: Istio's "compat" Wasm image: one `application/vnd.oci.image.layer.v1.tar+gzip`
//!   layer holding `plugin.wasm` (istio pkg/wasm/imagefetcher.go, `extractOCIStandardImage`).
//! - `lists`: lists-refresh, lists-gen-asn, lists-gen-tor and lists-gen-crawlers (static
//!   binaries) and a CA bundle on no base image: no shell, no package manager, user 65532.
//! - `backup`: etcd-backup, with the talosctl and age it runs (static, at the pins
//!   `pipelines/upstream.sh` builds), and a CA bundle, the same way (see [`images`]).
//! - `publish`: pushes them to the edge config's `images.registry` (the backup image when
//!   `--backup` names it; the record's `etcd_backup` is absent otherwise); credentials come from
//!   `EDGEPOP_REGISTRY_USERNAME` and `EDGEPOP_REGISTRY_PASSWORD`, or from the docker-style auth
//!   file named by `EDGEPOP_REGISTRY_AUTH_FILE` (mode 0600), never from the command line.
//!
//! Every build is reproducible: same files, same manifest digest (see [`layout`]). The tar's
//! mtime is `SOURCE_DATE_EPOCH` when set, 0 otherwise.

pub mod images;
pub mod layout;
pub mod registry;

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};
use pop_common::exit::{Exit, OutputError, Report, WritingOutput};
use pop_common::input::{InputError, read_json};
use pop_common::records::{Digest, Kind, PublishedImage, PublishedImages, Version};
use pop_common::tool::Env;
use serde::Deserialize;

use crate::images::{Binary, backup_binaries, lists_binaries, program_image};
use crate::layout::{ImageSpec, Layout};
use crate::registry::{Client, Credentials, Host};

/// The repositories, under the configured registry.
pub const FILTER_REPOSITORY: &str = "pow-filter";
pub const LISTS_REPOSITORY: &str = "lists-refresh";
pub const BACKUP_REPOSITORY: &str = "etcd-backup";

/// Build the edge's OCI images reproducibly, and push them to a registry.
#[derive(Debug, Parser)]
#[command(name = "oci-image", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Where an image's layout is written, and its tag: the same for every image.
#[derive(Debug, Args)]
pub struct LayoutArgs {
    /// The OCI image layout directory to write (replaced when it is one already).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The tag recorded in the layout, and pushed by `publish`.
    #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
    pub tag: String,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The filter as a Wasm image (Istio's compat variant); prints its manifest digest.
    Filter {
        /// The filter module (`make filter` builds it).
        #[arg(long, value_name = "FILE")]
        wasm: PathBuf,
        #[command(flatten)]
        layout: LayoutArgs,
    },
    /// The lists-refresh image from static binaries; prints its manifest digest.
    Lists {
        /// Where lists-refresh and the generators it runs (static, musl) are.
        #[arg(long, value_name = "DIR")]
        bin_dir: PathBuf,
        /// The CA certificates (PEM) the binaries may use for https sources.
        #[arg(long, value_name = "FILE")]
        ca_bundle: PathBuf,
        #[command(flatten)]
        layout: LayoutArgs,
    },
    /// The etcd-backup image from static binaries; prints its manifest digest.
    Backup {
        /// Where etcd-backup (static, musl) is.
        #[arg(long, value_name = "DIR")]
        bin_dir: PathBuf,
        /// talosctl at its pin (static; `pipelines/upstream.sh build talosctl` prints where).
        #[arg(long, value_name = "FILE")]
        talosctl: PathBuf,
        /// age at its pin (static; `pipelines/upstream.sh build age` prints where).
        #[arg(long, value_name = "FILE")]
        age: PathBuf,
        /// The CA certificates (PEM) for Object Storage's https endpoint.
        #[arg(long, value_name = "FILE")]
        ca_bundle: PathBuf,
        #[command(flatten)]
        layout: LayoutArgs,
    },
    /// Push the layouts to the edge config's registry; writes a PublishedImages record.
    Publish {
        /// The edge config: its `images.registry` names where to push.
        #[arg(long, value_name = "FILE")]
        edge_config: PathBuf,
        /// The filter's image layout (`oci-image filter`).
        #[arg(long, value_name = "DIR")]
        filter: PathBuf,
        /// The lists image layout (`oci-image lists`).
        #[arg(long, value_name = "DIR")]
        lists: PathBuf,
        /// The etcd-backup image layout (`oci-image backup`), recorded as `etcd_backup`: the
        /// image the platform layer's backup CronJob runs.
        #[arg(long, value_name = "DIR")]
        backup: Option<PathBuf>,
        /// Also write the record to this file (atomically). It must be the file the edge
        /// config's `images.published` names, which render-edge reads.
        #[arg(long, value_name = "FILE")]
        record: Option<PathBuf>,
    },
}

/// What to do, resolved.
#[derive(Debug)]
pub enum Config {
    Build { spec: Box<ImageSpec>, out: PathBuf },
    Publish(Box<Publish>),
}

#[derive(Debug)]
pub struct Publish {
    /// `host[:port]/namespace`.
    pub registry: String,
    pub host: Host,
    pub credentials: Option<Credentials>,
    pub filter: PathBuf,
    pub lists: PathBuf,
    pub backup: Option<PathBuf>,
    pub record: Option<PathBuf>,
}

/// Why the tool stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Failed(String),
    #[error("cannot write the output: {0}")]
    Output(#[from] OutputError),
}

impl Report for Error {
    fn exit(&self) -> Exit {
        match self {
            Error::Input(_) | Error::Usage(_) => Exit::Usage,
            Error::Failed(_) | Error::Output(_) => Exit::Failure,
        }
    }
}

pub(crate) fn read_file(path: &Path, what: &str) -> Result<Vec<u8>, Error> {
    std::fs::read(path)
        .map_err(|e| Error::Usage(format!("{} ({what}): cannot read: {e}", path.display())))
}

fn mtime(env: &Env) -> Result<u64, Error> {
    match env.non_empty("SOURCE_DATE_EPOCH") {
        None => Ok(0),
        Some(text) => text.parse().map_err(|_| {
            Error::Usage(format!(
                "SOURCE_DATE_EPOCH=`{text}` is not a number of seconds since the epoch"
            ))
        }),
    }
}

/// The registry section of the edge config; the rest is render-edge's to check.
#[derive(Debug, Deserialize)]
struct EdgeImages {
    images: Option<ImagesSection>,
}

#[derive(Debug, Deserialize)]
struct ImagesSection {
    registry: String,
    published: Option<PathBuf>,
}

/// A path made absolute and without `.` or `..`, lexically: the record need not exist yet.
fn normalized(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in std::path::absolute(path).ok()?.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    Some(out)
}

/// `host[:port]/path` as a registry namespace: a host, then lowercase path components.
pub fn check_registry(registry: &str) -> Result<(), String> {
    if registry.contains("://") {
        return Err(format!(
            "`{registry}` must not have a scheme: write host/namespace"
        ));
    }
    let (host, path) = registry
        .split_once('/')
        .ok_or_else(|| format!("`{registry}` needs a namespace: host/namespace"))?;
    if host.is_empty()
        || !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
    {
        return Err(format!("`{host}` is not a registry host"));
    }
    for part in path.split('/') {
        let ok = !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
            && part.as_bytes()[0].is_ascii_alphanumeric()
            && part.as_bytes()[part.len() - 1].is_ascii_alphanumeric();
        if !ok {
            return Err(format!(
                "`{part}` in `{registry}` is not a repository path component (lowercase letters, \
                 digits, and . _ - between them)"
            ));
        }
    }
    Ok(())
}

/// The registry credentials from the environment, or from the auth file it names.
fn credentials(env: &Env, host: &str) -> Result<Option<Credentials>, Error> {
    let user = env.non_empty("EDGEPOP_REGISTRY_USERNAME");
    let password = env.non_empty("EDGEPOP_REGISTRY_PASSWORD");
    let file = env.non_empty("EDGEPOP_REGISTRY_AUTH_FILE");
    match (user, password, file) {
        (Some(_), Some(_), Some(_)) => Err(Error::Usage(
            "both EDGEPOP_REGISTRY_USERNAME/PASSWORD and EDGEPOP_REGISTRY_AUTH_FILE are set: \
             keep one"
                .into(),
        )),
        (Some(username), Some(password), None) => Ok(Some(Credentials {
            username: username.to_string(),
            password: password.to_string(),
        })),
        (Some(_), None, _) | (None, Some(_), _) => Err(Error::Usage(
            "EDGEPOP_REGISTRY_USERNAME and EDGEPOP_REGISTRY_PASSWORD go together".into(),
        )),
        (None, None, Some(file)) => auth_file(Path::new(file), host).map(Some),
        (None, None, None) => Ok(None),
    }
}

#[derive(Debug, Deserialize)]
struct AuthFile {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, AuthEntry>,
}

#[derive(Deserialize)]
struct AuthEntry {
    auth: Option<String>,
}

impl std::fmt::Debug for AuthEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthEntry(<redacted>)")
    }
}

/// A docker/podman-style auth file (`{"auths": {"host": {"auth": base64(user:password)}}}`),
/// which must be readable by its owner only.
fn auth_file(path: &Path, host: &str) -> Result<Credentials, Error> {
    use base64::Engine as _;
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path)
        .map_err(|e| Error::Usage(format!("{}: cannot read: {e}", path.display())))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(Error::Usage(format!(
            "{}: mode {mode:03o} lets others read the registry password: chmod 600 it",
            path.display()
        )));
    }
    let file: AuthFile = read_json(path)?;
    let entry = file.auths.get(host).ok_or_else(|| {
        Error::Input(InputError::field(
            path,
            "auths",
            format!("no entry for `{host}`"),
        ))
    })?;
    let field = format!("auths.{host}.auth");
    let decoded = entry
        .auth
        .as_deref()
        .and_then(|a| base64::engine::general_purpose::STANDARD.decode(a).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(|| {
            InputError::field(path, &field, "missing, or not base64 of user:password")
        })?;
    let (username, password) = decoded
        .split_once(':')
        .ok_or_else(|| InputError::field(path, &field, "not base64 of user:password"))?;
    Ok(Credentials {
        username: username.to_string(),
        password: password.to_string(),
    })
}

/// Checks the arguments and reads what each command needs; nothing is written here.
pub fn resolve(cli: Cli, env: &Env) -> Result<Config, Error> {
    match &cli.command {
        Command::Filter { wasm, layout } => {
            let module = read_file(wasm, "the filter module")?;
            if !module.starts_with(b"\0asm") {
                return Err(Error::Usage(format!(
                    "{}: not a WebAssembly module (no \\0asm header)",
                    wasm.display()
                )));
            }
            let spec = ImageSpec::wasm_plugin(module, mtime(env)?, layout.tag.clone());
            Ok(Config::Build {
                spec: Box::new(spec),
                out: layout.out.clone(),
            })
        }
        Command::Lists {
            bin_dir,
            ca_bundle,
            layout,
        } => program(&lists_binaries(bin_dir), ca_bundle, layout, env),
        Command::Backup {
            bin_dir,
            talosctl,
            age,
            ca_bundle,
            layout,
        } => program(
            &backup_binaries(bin_dir, talosctl, age),
            ca_bundle,
            layout,
            env,
        ),
        Command::Publish {
            edge_config,
            filter,
            lists,
            backup,
            record,
        } => {
            let layouts = (filter.as_path(), lists.as_path(), backup.as_deref());
            let publish = resolve_publish(env, edge_config, layouts, record.as_deref())?;
            Ok(Config::Publish(Box::new(publish)))
        }
    }
}

/// A program image's build: every file read and checked now, nothing written yet.
fn program(
    binaries: &[Binary],
    ca_bundle: &Path,
    layout: &LayoutArgs,
    env: &Env,
) -> Result<Config, Error> {
    let spec = program_image(binaries, ca_bundle, mtime(env)?, layout.tag.clone())?;
    Ok(Config::Build {
        spec: Box::new(spec),
        out: layout.out.clone(),
    })
}

/// Where publish pushes and with what credentials, from the edge config.
fn resolve_publish(
    env: &Env,
    edge_config: &Path,
    layouts: (&Path, &Path, Option<&Path>),
    record: Option<&Path>,
) -> Result<Publish, Error> {
    let config: EdgeImages = read_json(edge_config)?;
    if let Some(record) = record {
        let named = config.images.as_ref().and_then(|i| i.published.as_ref());
        let named = named.map(|p| match edge_config.parent() {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p.clone(),
        });
        let same = match &named {
            Some(named) => normalized(named).is_some() && normalized(named) == normalized(record),
            None => false,
        };
        if !same {
            return Err(Error::Input(InputError::field(
                edge_config,
                "images.published",
                format!(
                    "{} is not {} where the record goes: render-edge would read another \
                     (or no) record; make them name the same file",
                    named.map_or("(absent)".to_string(), |n| n.display().to_string()),
                    record.display()
                ),
            )));
        }
    }
    let registry = config
        .images
        .map(|i| i.registry.trim_end_matches('/').to_string())
        .ok_or_else(|| {
            InputError::field(
                edge_config,
                "images.registry",
                "required to publish: where the images go, such as \
                 rg.fr-par.scw.cloud/<namespace>",
            )
        })?;
    check_registry(&registry)
        .map_err(|why| InputError::field(edge_config, "images.registry", why))?;
    let host = registry.split('/').next().unwrap_or_default().to_string();
    let credentials = credentials(env, &host)?;
    Ok(Publish {
        host: Host::new(&host),
        registry,
        credentials,
        filter: layouts.0.to_path_buf(),
        lists: layouts.1.to_path_buf(),
        backup: layouts.2.map(Path::to_path_buf),
        record: record.map(Path::to_path_buf),
    })
}

/// Writes `bytes` to a temporary file beside `path`, then renames it into place.
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(bytes)?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Builds an image layout (printing its manifest digest) or publishes the layouts (printing the
/// PublishedImages record).
pub fn run(config: &Config, _input: impl Read, mut output: impl Write) -> Result<(), Error> {
    match config {
        Config::Build { spec, out } => {
            let built = layout::build(spec).map_err(|e| Error::Failed(e.to_string()))?;
            layout::write_layout(&built, &spec.tag, out)
                .map_err(|e| Error::Failed(format!("{}: {e}", out.display())))?;
            pop_common::info!(
                "{}: {} (layer {} bytes)",
                out.display(),
                built.manifest_digest,
                built.layer.len()
            );
            writeln!(output, "{}", built.manifest_digest).output()?;
            Ok(output.flush().output()?)
        }
        Config::Publish(publish) => publish_all(publish, output),
    }
}

/// Pushes every layout, each read and checked first (a broken one pushes nothing), then writes
/// the PublishedImages record.
fn publish_all(publish: &Publish, mut output: impl Write) -> Result<(), Error> {
    let filter = Layout::read(&publish.filter).map_err(Error::Usage)?;
    let lists = Layout::read(&publish.lists).map_err(Error::Usage)?;
    let backup = publish.backup.as_deref().map(Layout::read);
    let backup = backup.transpose().map_err(Error::Usage)?;
    let client = Client::new(publish.host.clone(), publish.credentials.clone());
    let push = |layout: &Layout, name: &str| push_one(&client, &publish.registry, layout, name);
    let record = PublishedImages {
        kind: Kind::new(),
        version: Version,
        registry: publish.registry.clone(),
        filter: push(&filter, FILTER_REPOSITORY)?,
        lists_refresh: push(&lists, LISTS_REPOSITORY)?,
        // Absent without --backup: the platform layer then refuses to render an etcd backup.
        etcd_backup: backup
            .as_ref()
            .map(|layout| push(layout, BACKUP_REPOSITORY))
            .transpose()?,
    };
    let mut text = serde_json::to_vec_pretty(&record)
        .map_err(|e| Error::Failed(format!("encoding the record: {e}")))?;
    text.push(b'\n');
    if let Some(path) = &publish.record {
        write_atomically(path, &text)
            .map_err(|e| Error::Failed(format!("{}: {e}", path.display())))?;
    }
    output.write_all(&text).output()?;
    Ok(output.flush().output()?)
}

/// Pushes one layout to `<registry>/<name>`; the record's entry for it.
fn push_one(
    client: &Client,
    registry: &str,
    layout: &Layout,
    name: &str,
) -> Result<PublishedImage, Error> {
    let path = registry.split_once('/').map(|(_, p)| p).unwrap_or_default();
    let digest = client
        .push(layout, &format!("{path}/{name}"))
        .map_err(|e| Error::Failed(e.0))?;
    pop_common::info!("pushed {registry}/{name}:{} as {digest}", layout.tag);
    Ok(PublishedImage {
        repository: format!("{registry}/{name}"),
        tag: layout.tag.clone(),
        digest: Digest::parse(&digest).map_err(Error::Failed)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_paths_compare_after_dot_dot_even_when_absent() {
        assert_eq!(
            normalized(Path::new("/tmp/x/cfg/../out/./r.json")),
            normalized(Path::new("/tmp/x/out/r.json"))
        );
        assert_ne!(
            normalized(Path::new("/tmp/x/cfg/r.json")),
            normalized(Path::new("/tmp/x/out/r.json"))
        );
    }

    #[test]
    fn registries_are_host_and_lowercase_namespace() {
        assert!(check_registry("rg.fr-par.scw.cloud/edgepop").is_ok());
        assert!(check_registry("127.0.0.1:5000/edgepop/test").is_ok());
        for bad in [
            "https://rg.fr-par.scw.cloud/edgepop",
            "rg.fr-par.scw.cloud",
            "rg.fr-par.scw.cloud/EdgePop",
            "rg.fr-par.scw.cloud//x",
            "/edgepop",
            "rg.fr-par.scw.cloud/-x",
        ] {
            assert!(check_registry(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn credentials_come_in_pairs_from_the_environment() {
        let env = Env::from_pairs([
            ("EDGEPOP_REGISTRY_USERNAME", "nologin"),
            ("EDGEPOP_REGISTRY_PASSWORD", "secret"),
        ]);
        let creds = credentials(&env, "rg.fr-par.scw.cloud").unwrap().unwrap();
        assert_eq!(creds.username, "nologin");
        let half = Env::from_pairs([("EDGEPOP_REGISTRY_USERNAME", "nologin")]);
        assert!(matches!(credentials(&half, "x"), Err(Error::Usage(_))));
        assert_eq!(credentials(&Env::default(), "x").unwrap(), None);
    }

    #[test]
    fn an_auth_file_others_can_read_is_refused_and_a_private_one_is_read() {
        use std::os::unix::fs::PermissionsExt;
        // base64("nologin:s3cret")
        let (_dir, file) = testkit::temp_file(
            "auth.json",
            r#"{"auths": {"rg.fr-par.scw.cloud": {"auth": "bm9sb2dpbjpzM2NyZXQ="}}}"#,
        );
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let env = Env::from_pairs([("EDGEPOP_REGISTRY_AUTH_FILE", file.as_os_str())]);
        let err = credentials(&env, "rg.fr-par.scw.cloud").unwrap_err();
        assert!(err.to_string().contains("chmod 600"), "{err}");
        assert!(!err.to_string().contains("s3cret"));
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let creds = credentials(&env, "rg.fr-par.scw.cloud").unwrap().unwrap();
        assert_eq!(creds.password, "s3cret");
        let err = credentials(&env, "ghcr.io").unwrap_err();
        assert!(err.to_string().contains("no entry for `ghcr.io`"), "{err}");
    }
}
