//! SASL for the listener: PLAIN and SCRAM-SHA-256/512 (RFC 5802, 7677),
//! with credentials from a file that holds only salted keys.
//!
//! The users file (TOML; written by `applier kafka-user`) has one entry per
//! user and mechanism:
//!
//! ```toml
//! [[user]]
//! name = "alice"
//! mechanism = "SCRAM-SHA-256"
//! salt = "<base64>"
//! iterations = 8192
//! stored_key = "<base64>"   # H(HMAC(SaltedPassword, "Client Key"))
//! server_key = "<base64>"   # HMAC(SaltedPassword, "Server Key")
//! ```
//!
//! No password is stored: SCRAM verifies the client's proof against the
//! stored key, and PLAIN derives the stored key from the password it is
//! given (with the entry's salt and iterations) and compares, in constant
//! time.

use std::collections::BTreeMap;
use std::path::Path;

use aws_lc_rs::{constant_time, digest, hmac, pbkdf2, rand};
use base64::Engine as _;
use serde::{Deserialize, Serialize};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// A SASL mechanism the gateway offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Mechanism {
    /// `PLAIN` (use over TLS only).
    #[serde(rename = "PLAIN")]
    Plain,
    /// `SCRAM-SHA-256`.
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    /// `SCRAM-SHA-512`.
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl Mechanism {
    /// The name clients send.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    /// The mechanism named `name`.
    pub fn from_name(name: &str) -> Option<Mechanism> {
        [
            Mechanism::Plain,
            Mechanism::ScramSha256,
            Mechanism::ScramSha512,
        ]
        .into_iter()
        .find(|m| m.name() == name)
    }

    fn hash(
        self,
    ) -> Option<(
        hmac::Algorithm,
        &'static digest::Algorithm,
        pbkdf2::Algorithm,
    )> {
        match self {
            Mechanism::Plain => None,
            Mechanism::ScramSha256 => Some((
                hmac::HMAC_SHA256,
                &digest::SHA256,
                pbkdf2::PBKDF2_HMAC_SHA256,
            )),
            Mechanism::ScramSha512 => Some((
                hmac::HMAC_SHA512,
                &digest::SHA512,
                pbkdf2::PBKDF2_HMAC_SHA512,
            )),
        }
    }
}

/// One user's salted SCRAM keys for one mechanism.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScramEntry {
    /// The user name.
    pub name: String,
    /// SCRAM-SHA-256 or SCRAM-SHA-512.
    pub mechanism: Mechanism,
    /// The salt, base64.
    pub salt: String,
    /// PBKDF2 iterations (at least 4096).
    pub iterations: u32,
    /// StoredKey, base64.
    pub stored_key: String,
    /// ServerKey, base64.
    pub server_key: String,
}

/// The users file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsersFile {
    /// Every entry.
    #[serde(default)]
    pub user: Vec<ScramEntry>,
}

/// Smallest iteration count accepted (RFC 7677's minimum).
pub const MIN_ITERATIONS: u32 = 4096;

impl ScramEntry {
    /// The salted keys of `password` for `name`, with a new random salt.
    pub fn derive(
        name: &str,
        password: &str,
        mechanism: Mechanism,
        iterations: u32,
    ) -> Result<ScramEntry, String> {
        let mut salt = [0u8; 24];
        rand::fill(&mut salt).map_err(|_| "no random salt".to_string())?;
        let (stored, server) = keys(mechanism, password, &salt, iterations)?;
        Ok(ScramEntry {
            name: name.to_string(),
            mechanism,
            salt: B64.encode(salt),
            iterations,
            stored_key: B64.encode(stored),
            server_key: B64.encode(server),
        })
    }
}

/// (StoredKey, ServerKey) of `password`.
fn keys(
    mechanism: Mechanism,
    password: &str,
    salt: &[u8],
    iterations: u32,
) -> Result<(Vec<u8>, Vec<u8>), String> {
    let (mac, hash, kdf) = mechanism.hash().ok_or("PLAIN has no keys")?;
    let rounds = std::num::NonZeroU32::new(iterations).ok_or("iterations must be more than 0")?;
    let mut salted = vec![0u8; hash.output_len()];
    pbkdf2::derive(kdf, rounds, salt, password.as_bytes(), &mut salted);
    let salted_key = hmac::Key::new(mac, &salted);
    let client_key = hmac::sign(&salted_key, b"Client Key");
    let stored = digest::digest(hash, client_key.as_ref()).as_ref().to_vec();
    let server = hmac::sign(&salted_key, b"Server Key").as_ref().to_vec();
    Ok((stored, server))
}

/// The credentials the listener checks.
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    entries: BTreeMap<(String, Mechanism), ScramEntry>,
}

impl Credentials {
    /// Reads the users file at `path`, naming the entry that is wrong.
    pub fn load(path: &Path) -> Result<Credentials, String> {
        let text =
            kafkalog::fsutil::read_to_string_bounded(path, kafkalog::fsutil::MAX_SMALL_FILE_BYTES)
                .map_err(|e| format!("{}: {e}", path.display()))?;
        let file: UsersFile =
            toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        Credentials::from_file(file).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The credentials of `file`.
    pub fn from_file(file: UsersFile) -> Result<Credentials, String> {
        let mut entries = BTreeMap::new();
        for (i, e) in file.user.into_iter().enumerate() {
            let at = format!("user entry {} ({:?})", i + 1, e.name);
            if e.mechanism == Mechanism::Plain {
                return Err(format!(
                    "{at}: mechanism PLAIN is checked against the SCRAM entries; store SCRAM-SHA-256 or SCRAM-SHA-512"
                ));
            }
            if e.iterations < MIN_ITERATIONS {
                return Err(format!(
                    "{at}: iterations {} is below {MIN_ITERATIONS}",
                    e.iterations
                ));
            }
            for (field, value) in [
                ("salt", &e.salt),
                ("stored_key", &e.stored_key),
                ("server_key", &e.server_key),
            ] {
                B64.decode(value)
                    .map_err(|err| format!("{at}: {field} is not base64: {err}"))?;
            }
            entries.insert((e.name.clone(), e.mechanism), e);
        }
        Ok(Credentials { entries })
    }

    /// The mechanisms offered: PLAIN and the SCRAM ones with an entry.
    pub fn mechanisms(&self) -> Vec<Mechanism> {
        let mut m: Vec<Mechanism> = self.entries.keys().map(|(_, m)| *m).collect();
        m.sort();
        m.dedup();
        m.insert(0, Mechanism::Plain);
        m
    }

    fn entry(&self, name: &str, mechanism: Mechanism) -> Option<&ScramEntry> {
        self.entries.get(&(name.to_string(), mechanism))
    }

    /// PLAIN: whether `password` is `name`'s (checked against its SCRAM
    /// keys).
    pub fn check_plain(&self, name: &str, password: &str) -> bool {
        [Mechanism::ScramSha512, Mechanism::ScramSha256]
            .into_iter()
            .any(|m| {
                let Some(e) = self.entry(name, m) else {
                    return false;
                };
                let (Ok(salt), Ok(stored)) = (B64.decode(&e.salt), B64.decode(&e.stored_key))
                else {
                    return false;
                };
                keys(m, password, &salt, e.iterations)
                    .is_ok_and(|(s, _)| constant_time::verify_slices_are_equal(&s, &stored).is_ok())
            })
    }
}

/// One SASL exchange on a connection.
#[derive(Debug)]
pub enum Exchange {
    /// PLAIN: one message.
    Plain,
    /// SCRAM, before the client's first message.
    ScramStart(Mechanism),
    /// SCRAM, after the server's first message.
    ScramFinal {
        /// The mechanism.
        mechanism: Mechanism,
        /// The user.
        user: String,
        /// client-first-message-bare.
        client_first_bare: String,
        /// server-first-message.
        server_first: String,
        /// The combined nonce.
        nonce: String,
    },
}

/// What one SaslAuthenticate step gives.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Send these bytes and wait for the next message.
    Continue(Vec<u8>),
    /// Authenticated as this user; send these bytes (maybe empty).
    Done(String, Vec<u8>),
    /// Refused (the message names why; no detail about which part failed).
    Failed(String),
}

impl Exchange {
    /// A new exchange for `mechanism`.
    pub fn new(mechanism: Mechanism) -> Exchange {
        match mechanism {
            Mechanism::Plain => Exchange::Plain,
            m => Exchange::ScramStart(m),
        }
    }

    /// Consumes the client's `message`.
    pub fn step(&mut self, credentials: &Credentials, message: &[u8]) -> Step {
        let failed = || Step::Failed("Authentication failed: invalid credentials".into());
        match std::mem::replace(self, Exchange::Plain) {
            Exchange::Plain => {
                // [authzid] NUL authcid NUL passwd
                let parts: Vec<&[u8]> = message.split(|&b| b == 0).collect();
                let [authzid, user, password] = parts.as_slice() else {
                    return Step::Failed("Authentication failed: malformed PLAIN message".into());
                };
                let (Ok(user), Ok(password)) =
                    (std::str::from_utf8(user), std::str::from_utf8(password))
                else {
                    return failed();
                };
                if !authzid.is_empty() && *authzid != user.as_bytes() {
                    return failed();
                }
                if credentials.check_plain(user, password) {
                    Step::Done(user.to_string(), Vec::new())
                } else {
                    failed()
                }
            }
            Exchange::ScramStart(mechanism) => {
                let Ok(text) = std::str::from_utf8(message) else {
                    return failed();
                };
                // gs2-header "n,," (no channel binding; an authzid is ignored).
                let Some(bare) = text
                    .strip_prefix("n,")
                    .and_then(|r| r.split_once(',').map(|(_, b)| b))
                else {
                    return Step::Failed(
                        "Authentication failed: channel binding is not supported".into(),
                    );
                };
                let mut user = None;
                let mut client_nonce = None;
                for attr in bare.split(',') {
                    if let Some(v) = attr.strip_prefix("n=") {
                        user = Some(v.replace("=2C", ",").replace("=3D", "="));
                    } else if let Some(v) = attr.strip_prefix("r=") {
                        client_nonce = Some(v.to_string());
                    }
                }
                let (Some(user), Some(client_nonce)) = (user, client_nonce) else {
                    return failed();
                };
                let Some(entry) = credentials.entry(&user, mechanism) else {
                    return failed();
                };
                let mut raw = [0u8; 18];
                if rand::fill(&mut raw).is_err() {
                    return failed();
                }
                let nonce = format!("{client_nonce}{}", B64.encode(raw));
                let server_first = format!("r={nonce},s={},i={}", entry.salt, entry.iterations);
                let reply = server_first.clone().into_bytes();
                *self = Exchange::ScramFinal {
                    mechanism,
                    user,
                    client_first_bare: bare.to_string(),
                    server_first,
                    nonce,
                };
                Step::Continue(reply)
            }
            Exchange::ScramFinal {
                mechanism,
                user,
                client_first_bare,
                server_first,
                nonce,
            } => {
                let Ok(text) = std::str::from_utf8(message) else {
                    return failed();
                };
                let Some((without_proof, proof)) = text.rsplit_once(",p=") else {
                    return failed();
                };
                // Kafka's rule (`ScramSaslServer`): the nonce must end with
                // the server's; librdkafka sends its own nonce in front of it
                // again, and the proof covers what was actually sent.
                if !without_proof
                    .split(',')
                    .any(|a| a.strip_prefix("r=").is_some_and(|r| r.ends_with(&nonce)))
                {
                    return failed();
                }
                let (Some(entry), Some((mac, hash, _))) =
                    (credentials.entry(&user, mechanism), mechanism.hash())
                else {
                    return failed();
                };
                let (Ok(proof), Ok(stored), Ok(server_key)) = (
                    B64.decode(proof),
                    B64.decode(&entry.stored_key),
                    B64.decode(&entry.server_key),
                ) else {
                    return failed();
                };
                let auth_message = format!("{client_first_bare},{server_first},{without_proof}");
                let signature = hmac::sign(&hmac::Key::new(mac, &stored), auth_message.as_bytes());
                if proof.len() != signature.as_ref().len() {
                    return failed();
                }
                let client_key: Vec<u8> = proof
                    .iter()
                    .zip(signature.as_ref())
                    .map(|(a, b)| a ^ b)
                    .collect();
                let check = digest::digest(hash, &client_key);
                if constant_time::verify_slices_are_equal(check.as_ref(), &stored).is_err() {
                    return failed();
                }
                let verifier =
                    hmac::sign(&hmac::Key::new(mac, &server_key), auth_message.as_bytes());
                Step::Done(
                    user,
                    format!("v={}", B64.encode(verifier.as_ref())).into_bytes(),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds() -> Credentials {
        Credentials::from_file(UsersFile {
            user: vec![
                ScramEntry::derive("alice", "s3cret", Mechanism::ScramSha256, 4096)
                    .expect("derive"),
                ScramEntry::derive("alice", "s3cret", Mechanism::ScramSha512, 4096)
                    .expect("derive"),
            ],
        })
        .expect("valid")
    }

    #[test]
    fn plain_checks_the_password_against_the_salted_keys() {
        let c = creds();
        let mut x = Exchange::new(Mechanism::Plain);
        assert_eq!(
            x.step(&c, b"\0alice\0s3cret"),
            Step::Done("alice".into(), vec![])
        );
        let mut x = Exchange::new(Mechanism::Plain);
        assert!(matches!(x.step(&c, b"\0alice\0wrong"), Step::Failed(_)));
        let mut x = Exchange::new(Mechanism::Plain);
        assert!(matches!(x.step(&c, b"garbage"), Step::Failed(_)));
    }

    /// A SCRAM client, as RFC 5802 describes it, against the server.
    fn scram_client(c: &Credentials, m: Mechanism, password: &str) -> Step {
        let (mac, hash, kdf) = m.hash().expect("scram");
        let mut x = Exchange::new(m);
        let first_bare = "n=alice,r=abcdefgh".to_string();
        let Step::Continue(server_first) = x.step(c, format!("n,,{first_bare}").as_bytes()) else {
            panic!("server-first");
        };
        let server_first = String::from_utf8(server_first).expect("utf-8");
        let attrs: BTreeMap<&str, &str> = server_first
            .split(',')
            .filter_map(|a| a.split_once('='))
            .collect();
        let salt = B64.decode(attrs["s"]).expect("salt");
        let iterations: u32 = attrs["i"].parse().expect("i");
        let mut salted = vec![0u8; hash.output_len()];
        pbkdf2::derive(
            kdf,
            std::num::NonZeroU32::new(iterations).expect("nz"),
            &salt,
            password.as_bytes(),
            &mut salted,
        );
        let client_key = hmac::sign(&hmac::Key::new(mac, &salted), b"Client Key");
        let stored = digest::digest(hash, client_key.as_ref());
        let without_proof = format!("c=biws,r={}", attrs["r"]);
        let auth = format!("{first_bare},{server_first},{without_proof}");
        let sig = hmac::sign(&hmac::Key::new(mac, stored.as_ref()), auth.as_bytes());
        let proof: Vec<u8> = client_key
            .as_ref()
            .iter()
            .zip(sig.as_ref())
            .map(|(a, b)| a ^ b)
            .collect();
        x.step(
            c,
            format!("{without_proof},p={}", B64.encode(proof)).as_bytes(),
        )
    }

    #[test]
    fn scram_accepts_the_right_password_and_refuses_a_wrong_one() {
        let c = creds();
        for m in [Mechanism::ScramSha256, Mechanism::ScramSha512] {
            assert!(
                matches!(scram_client(&c, m, "s3cret"), Step::Done(u, v) if u == "alice" && v.starts_with(b"v="))
            );
            assert!(matches!(scram_client(&c, m, "nope"), Step::Failed(_)));
        }
    }

    #[test]
    fn a_bad_users_file_names_the_entry() {
        let mut e = ScramEntry::derive("bob", "x", Mechanism::ScramSha256, 4096).expect("derive");
        e.iterations = 10;
        let err = Credentials::from_file(UsersFile { user: vec![e] }).expect_err("refused");
        assert!(
            err.contains("user entry 1 (\"bob\")") && err.contains("4096"),
            "{err}"
        );
    }
}
