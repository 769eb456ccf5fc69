//! The SSH session to the rescue system (libssh2 through `ssh2`). The rescue system's host key
//! is new at each rescue boot, so it is accepted for this session only: its fingerprint is
//! logged, and nothing is written to `known_hosts`.

use std::io::{self, BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use ssh2::Session;

use crate::login::Login;
use crate::progress::Progress;

/// Cipher preference (client to server and back), cheapest first *for libssh2*, measured by
/// `make bench` (client CPU per MB of image over loopback: chacha20-poly1305 1.8 ms,
/// aes128-ctr with hmac-sha2-256-etm 1.95 ms, aes128-gcm 2.35 ms; OpenSSH's `ssh` 1.15 ms).
/// AES-NI does not make AES the cheapest here: libssh2 calls the cipher once per 16-byte
/// block (transport.c), so the per-call overhead dominates, while
/// chacha20-poly1305 is called once per packet. It is also what OpenSSH picks by default.
const CIPHERS: &str = "chacha20-poly1305@openssh.com,aes128-ctr,aes256-ctr,aes128-gcm@openssh.com,aes256-gcm@openssh.com";
/// MAC preference, for the ciphers that need one: encrypt-then-MAC first (one pass over the
/// ciphertext, and the safer construction).
const MACS: &str =
    "hmac-sha2-256-etm@openssh.com,hmac-sha2-512-etm@openssh.com,hmac-sha2-256,hmac-sha2-512";

/// Whether an SSH server answers on `address` now: a TCP connection and an `SSH-` banner.
pub fn answers(address: SocketAddr, timeout: Duration) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&address, timeout) else {
        return false;
    };
    if stream.set_read_timeout(Some(timeout)).is_err() {
        return false;
    }
    let mut banner = [0u8; 4];
    stream.read_exact(&mut banner).is_ok() && &banner == b"SSH-"
}

/// Why a session to the rescue system failed.
#[derive(Debug, thiserror::Error)]
pub enum SshError {
    #[error("connecting to {address}: {source}")]
    Connect {
        address: SocketAddr,
        source: io::Error,
    },
    /// The SSH session could not be set up (libssh2, the algorithm preferences, the handshake).
    #[error("ssh {address}: {doing}: {source}")]
    Session {
        address: SocketAddr,
        doing: &'static str,
        source: ssh2::Error,
    },
    #[error("ssh {address}: no host key")]
    NoHostKey { address: SocketAddr },
    #[error("ssh {user}@{address}: key {} refused: {source}", key.display())]
    KeyRefused {
        user: String,
        address: SocketAddr,
        key: PathBuf,
        source: ssh2::Error,
    },
    #[error("ssh {user}@{address}: not authenticated")]
    NotAuthenticated { user: String, address: SocketAddr },
    /// A command's channel failed (opening it, reading its output, its end).
    #[error("`{command}`: {doing}: {source}")]
    Channel {
        command: String,
        doing: &'static str,
        source: io::Error,
    },
    #[error("reading the image after {sent} bytes: {source}")]
    ReadImage { sent: u64, source: io::Error },
    #[error("the connection was lost after {sent} bytes were sent: {source}")]
    LostMidStream { sent: u64, source: io::Error },
    #[error("ending the stream after {sent} bytes: {source}")]
    EndStream { sent: u64, source: io::Error },
    #[error(
        "the connection was lost after all {sent} bytes were sent, before `{command}` finished: {source}"
    )]
    LostAfterStream {
        sent: u64,
        command: String,
        source: io::Error,
    },
    #[error("`{command}` exited with {status}: {stderr}")]
    Exit {
        command: String,
        status: i32,
        stderr: String,
    },
}

/// One authenticated session to a rescue system.
pub struct Rescue {
    session: Session,
    /// `SHA256:<base64>` of the host key, as `ssh-keygen -l` prints it.
    pub host_key_fingerprint: String,
}

impl std::fmt::Debug for Rescue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rescue")
            .field("host_key_fingerprint", &self.host_key_fingerprint)
            .finish_non_exhaustive()
    }
}

/// What a command printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ran {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Rescue {
    /// Connects and authenticates with `login` (the agent's identity, or the key file).
    pub fn connect(
        address: SocketAddr,
        user: &str,
        login: &Login,
        timeout: Duration,
    ) -> Result<Rescue, SshError> {
        let tcp = TcpStream::connect_timeout(&address, timeout)
            .map_err(|source| SshError::Connect { address, source })?;
        let session_error = |doing| {
            move |source| SshError::Session {
                address,
                doing,
                source,
            }
        };
        let mut session = Session::new().map_err(session_error("new session"))?;
        session.set_timeout(u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX));
        session.set_tcp_stream(tcp);
        // The image write is bound by the cipher: the cheapest first (see CIPHERS). Names
        // libssh2 does not know are skipped; the server picks among the rest as usual.
        for (direction, methods) in [
            (ssh2::MethodType::CryptCs, CIPHERS),
            (ssh2::MethodType::CryptSc, CIPHERS),
            (ssh2::MethodType::MacCs, MACS),
            (ssh2::MethodType::MacSc, MACS),
        ] {
            session
                .method_pref(direction, methods)
                .map_err(session_error("algorithm preference"))?;
        }
        session.handshake().map_err(session_error("handshake"))?;
        let hash = session
            .host_key_hash(ssh2::HashType::Sha256)
            .ok_or(SshError::NoHostKey { address })?;
        let host_key_fingerprint = format!(
            "SHA256:{}",
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(hash)
        );
        login
            .authenticate(&session, user)
            .map_err(|source| SshError::KeyRefused {
                user: user.to_owned(),
                address,
                key: login.key().to_path_buf(),
                source,
            })?;
        if !session.authenticated() {
            return Err(SshError::NotAuthenticated {
                user: user.to_owned(),
                address,
            });
        }
        Ok(Rescue {
            session,
            host_key_fingerprint,
        })
    }

    /// The cipher negotiated for what this side sends.
    pub fn cipher(&self) -> String {
        self.session
            .methods(ssh2::MethodType::CryptCs)
            .unwrap_or("?")
            .to_owned()
    }

    /// A new channel running `command`.
    fn exec(&self, command: &str) -> Result<ssh2::Channel, SshError> {
        let failed = |doing| {
            move |e: ssh2::Error| SshError::Channel {
                command: command.to_owned(),
                doing,
                source: e.into(),
            }
        };
        let mut channel = self
            .session
            .channel_session()
            .map_err(failed("opening a channel"))?;
        channel.exec(command).map_err(failed("starting it"))?;
        Ok(channel)
    }

    /// Runs `command` and collects its output.
    pub fn run(&self, command: &str) -> Result<Ran, SshError> {
        self.run_with_input(command, &[])
    }

    /// Runs `command` with `input` on its standard input (then end of file), and collects its
    /// output. (How a password reaches `sudo -S`: never on a command line.)
    pub fn run_with_input(&self, command: &str, input: &[u8]) -> Result<Ran, SshError> {
        let failed = |doing| {
            move |source: io::Error| SshError::Channel {
                command: command.to_owned(),
                doing,
                source,
            }
        };
        let mut channel = self.exec(command)?;
        if !input.is_empty() {
            channel
                .write_all(input)
                .map_err(failed("writing its input"))?;
        }
        channel
            .send_eof()
            .map_err(|e| failed("ending its input")(e.into()))?;
        let mut stdout = String::new();
        channel
            .read_to_string(&mut stdout)
            .map_err(failed("reading its output"))?;
        let mut stderr = String::new();
        channel
            .stderr()
            .read_to_string(&mut stderr)
            .map_err(failed("reading its errors"))?;
        channel
            .wait_close()
            .map_err(|e| failed("waiting for its end")(e.into()))?;
        let status = channel
            .exit_status()
            .map_err(|e| failed("reading its status")(e.into()))?;
        Ok(Ran {
            status,
            stdout,
            stderr,
        })
    }

    /// Streams `image` into `command`'s stdin (the writer on the rescue side), after `prefix`
    /// (the line `sudo -S` reads its password from, or nothing); returns the number of image
    /// bytes sent. The image's buffer goes to the channel as it is (no copy), a megabyte at a
    /// time: libssh2 cuts it into packets itself. (What landed is checked by reading the disk
    /// back, not by hashing here: the CPU goes to the cipher.)
    pub fn stream(
        &self,
        command: &str,
        prefix: &[u8],
        mut image: impl BufRead,
        progress: &mut Progress,
    ) -> Result<u64, SshError> {
        let mut channel = self.exec(command)?;
        let mut sent = 0u64;
        channel
            .write_all(prefix)
            .map_err(|source| SshError::LostMidStream { sent, source })?;
        loop {
            let chunk = image
                .fill_buf()
                .map_err(|source| SshError::ReadImage { sent, source })?;
            if chunk.is_empty() {
                break;
            }
            let n = chunk.len();
            channel
                .write_all(chunk)
                .map_err(|source| SshError::LostMidStream { sent, source })?;
            image.consume(n);
            sent += n as u64;
            progress.advance(n as u64);
        }
        progress.finish();
        channel.send_eof().map_err(|e| SshError::EndStream {
            sent,
            source: e.into(),
        })?;
        // All sent; a connection lost now still leaves the disk unfinished, and says so.
        let lost = |source: io::Error| SshError::LostAfterStream {
            sent,
            command: command.to_owned(),
            source,
        };
        let mut stderr = String::new();
        channel.stderr().read_to_string(&mut stderr).map_err(lost)?;
        channel.wait_close().map_err(|e| lost(e.into()))?;
        let status = channel.exit_status().map_err(|e| lost(e.into()))?;
        if status != 0 {
            return Err(SshError::Exit {
                command: command.to_owned(),
                status,
                stderr: stderr.trim().to_owned(),
            });
        }
        Ok(sent)
    }
}
