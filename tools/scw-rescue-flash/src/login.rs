//! How the rescue system is logged into, decided before any rescue boot: the ssh-agent's
//! identity for the key when an agent holds it, else the key file itself, which libssh2 can
//! only read without a passphrase. A key protected by one, with no agent holding it, is refused
//! then, naming the way out, rather than as "key refused" once the rescue boot is spent.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use ssh2::Session;

/// What the rescue session authenticates with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Login {
    /// The identity of the agent at `SSH_AUTH_SOCK` whose public key is this blob.
    Agent { public_key: Vec<u8>, key: PathBuf },
    /// The private key file, not encrypted.
    KeyFile(PathBuf),
}

/// Why no login can work.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error("cannot read the SSH key {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the SSH key {} is protected by a passphrase and {why}: this tool cannot ask for the passphrase; load it into an agent (eval \"$(ssh-agent)\"; ssh-add {}) and run again with SSH_AUTH_SOCK set; nothing was done",
        key.display(), key.display()
    )]
    Encrypted { key: PathBuf, why: String },
}

impl Login {
    /// Decides the login for the private key at `key`, given the agent socket the environment
    /// names (`SSH_AUTH_SOCK`, if any): the agent when it holds that key, else the file when it
    /// is not encrypted.
    pub fn resolve(key: &Path, agent_socket: Option<&OsStr>) -> Result<Login, LoginError> {
        let text = fs::read_to_string(key).map_err(|source| LoginError::Read {
            path: key.to_path_buf(),
            source,
        })?;
        let file = KeyFile::parse(&text);
        // The public key: from the private key's own header (OpenSSH format), else beside it.
        let public_key = file.public_key.clone().or_else(|| public_key_beside(key));
        let agent = match (agent_socket, &public_key) {
            (Some(_), Some(public_key)) => agent_holds(public_key),
            _ => Ok(false),
        };
        match (agent, public_key) {
            (Ok(true), Some(public_key)) => {
                return Ok(Login::Agent {
                    public_key,
                    key: key.to_path_buf(),
                });
            }
            (Err(why), _) if file.encrypted => {
                return Err(LoginError::Encrypted {
                    key: key.to_path_buf(),
                    why: format!("the ssh-agent at SSH_AUTH_SOCK cannot be read ({why})"),
                });
            }
            _ => {}
        }
        if file.encrypted {
            let why = if agent_socket.is_none() {
                "no ssh-agent runs (SSH_AUTH_SOCK is not set)"
            } else {
                "the ssh-agent at SSH_AUTH_SOCK does not hold it"
            };
            return Err(LoginError::Encrypted {
                key: key.to_path_buf(),
                why: why.to_owned(),
            });
        }
        Ok(Login::KeyFile(key.to_path_buf()))
    }

    /// Authenticates `session` as `user`.
    pub fn authenticate(&self, session: &Session, user: &str) -> Result<(), ssh2::Error> {
        match self {
            Login::KeyFile(key) => session.userauth_pubkey_file(user, None, key, None),
            Login::Agent { public_key, .. } => {
                let (agent, identity) = agent_identity(session, public_key)?;
                let identity = identity.ok_or_else(|| {
                    ssh2::Error::new(
                        ssh2::ErrorCode::Session(-18),
                        "the ssh-agent no longer holds the key",
                    )
                })?;
                agent.userauth(user, &identity)
            }
        }
    }

    /// The key file this login stands for (to name it in errors).
    pub fn key(&self) -> &Path {
        match self {
            Login::Agent { key, .. } | Login::KeyFile(key) => key,
        }
    }
}

/// What the private key file says of itself.
#[derive(Debug, Default, PartialEq, Eq)]
struct KeyFile {
    encrypted: bool,
    /// The public key blob, which the OpenSSH format keeps unencrypted in its header.
    public_key: Option<Vec<u8>>,
}

impl KeyFile {
    /// Reads an OpenSSH (`openssh-key-v1`: OpenSSH's PROTOCOL.key, its cipher name `none` when
    /// the key is not encrypted) or PEM private key (encrypted: `Proc-Type: 4,ENCRYPTED`, or
    /// PKCS#8's `ENCRYPTED PRIVATE KEY`).
    fn parse(text: &str) -> KeyFile {
        const OPENSSH: &str = "-----BEGIN OPENSSH PRIVATE KEY-----";
        if let Some(body) = text.trim_start().strip_prefix(OPENSSH) {
            let base64: String = body
                .lines()
                .take_while(|line| !line.starts_with("-----END"))
                .collect::<String>()
                .split_whitespace()
                .collect();
            return base64::engine::general_purpose::STANDARD
                .decode(base64)
                .ok()
                .and_then(|bytes| openssh_header(&bytes))
                .unwrap_or_default();
        }
        KeyFile {
            encrypted: text.contains("Proc-Type: 4,ENCRYPTED")
                || text.contains("BEGIN ENCRYPTED PRIVATE KEY"),
            public_key: None,
        }
    }
}

/// The cipher name and first public key of an `openssh-key-v1` blob: the magic, then strings
/// (a big-endian u32 length, then the bytes) cipher, KDF, KDF options, a u32 key count, and the
/// public keys.
fn openssh_header(bytes: &[u8]) -> Option<KeyFile> {
    let mut rest = bytes.strip_prefix(b"openssh-key-v1\0")?;
    let cipher = take_string(&mut rest)?;
    take_string(&mut rest)?; // KDF name
    take_string(&mut rest)?; // KDF options
    let (_count, tail) = rest.split_first_chunk::<4>()?;
    rest = tail;
    Some(KeyFile {
        encrypted: cipher != b"none",
        public_key: take_string(&mut rest).map(<[u8]>::to_vec),
    })
}

/// The next SSH string of `rest` (a big-endian u32 length, then the bytes), `rest` moved past it.
fn take_string<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let (length, tail) = rest.split_first_chunk::<4>()?;
    let length = usize::try_from(u32::from_be_bytes(*length)).ok()?;
    let (value, tail) = tail.split_at_checked(length)?;
    *rest = tail;
    Some(value)
}

/// The blob of `<key>.pub`, as ssh-keygen writes it beside the private key (`type base64
/// comment`), when there is one.
fn public_key_beside(key: &Path) -> Option<Vec<u8>> {
    let mut path = key.as_os_str().to_owned();
    path.push(".pub");
    let text = fs::read_to_string(path).ok()?;
    let base64 = text.split_whitespace().nth(1)?;
    base64::engine::general_purpose::STANDARD
        .decode(base64)
        .ok()
}

/// Whether the agent at `SSH_AUTH_SOCK` holds the key of this public blob.
fn agent_holds(public_key: &[u8]) -> Result<bool, ssh2::Error> {
    let session = Session::new()?;
    let (mut agent, identity) = agent_identity(&session, public_key)?;
    let _ = agent.disconnect();
    Ok(identity.is_some())
}

/// The agent at `SSH_AUTH_SOCK`, connected through `session`, and its identity of this public
/// blob, if it holds one.
fn agent_identity(
    session: &Session,
    public_key: &[u8],
) -> Result<(ssh2::Agent, Option<ssh2::PublicKey>), ssh2::Error> {
    let mut agent = session.agent()?;
    agent.connect()?;
    agent.list_identities()?;
    let identity = agent
        .identities()?
        .into_iter()
        .find(|identity| identity.blob() == public_key);
    Ok((agent, identity))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// An OpenSSH key blob with `cipher` and one public key `public`.
    fn openssh(cipher: &str, public: &[u8]) -> String {
        let mut blob = b"openssh-key-v1\0".to_vec();
        for field in [cipher.as_bytes(), b"none", b""] {
            blob.extend(u32::try_from(field.len()).unwrap().to_be_bytes());
            blob.extend(field);
        }
        blob.extend(1u32.to_be_bytes());
        blob.extend(u32::try_from(public.len()).unwrap().to_be_bytes());
        blob.extend(public);
        format!(
            "-----BEGIN OPENSSH PRIVATE KEY-----\n{}\n-----END OPENSSH PRIVATE KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(blob)
        )
    }

    #[test]
    fn a_key_file_says_whether_it_is_encrypted_and_which_public_key_it_holds() {
        let plain = KeyFile::parse(&openssh("none", b"pub"));
        assert_eq!(
            plain,
            KeyFile {
                encrypted: false,
                public_key: Some(b"pub".to_vec())
            }
        );
        assert!(KeyFile::parse(&openssh("aes256-ctr", b"pub")).encrypted);
        assert!(
            KeyFile::parse("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n").encrypted
        );
        assert!(KeyFile::parse("-----BEGIN ENCRYPTED PRIVATE KEY-----\n").encrypted);
        assert!(!KeyFile::parse("-----BEGIN RSA PRIVATE KEY-----\nMII\n").encrypted);
        // A truncated header reads as nothing known, not as a panic.
        assert_eq!(
            KeyFile::parse("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEA\n"),
            KeyFile::default()
        );
    }

    #[test]
    fn an_encrypted_key_without_an_agent_is_refused_naming_the_way_out() {
        let (_dir, key) = testkit::temp_file("id_ed25519", openssh("aes256-ctr", b"pub"));
        let message = Login::resolve(&key, None).unwrap_err().to_string();
        testkit::process::assert_says_all(
            &message,
            &[
                "passphrase",
                "SSH_AUTH_SOCK is not set",
                "ssh-add",
                "nothing was done",
            ],
        );
        fs::write(&key, openssh("none", b"pub")).unwrap();
        assert_eq!(Login::resolve(&key, None).unwrap(), Login::KeyFile(key));
    }
}
