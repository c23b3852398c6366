//! `applier kafka-user`: add or replace a user in the Kafka listener's SASL
//! users file (salted SCRAM keys only; the password is read from stdin and
//! never stored).

use std::io::BufRead;
use std::path::PathBuf;

use gateway::sasl::{Credentials, MIN_ITERATIONS, Mechanism, ScramEntry, UsersFile};

/// Settings of `kafka-user`.
#[derive(clap::Args)]
pub(crate) struct KafkaUserArgs {
    /// The users file (created when missing; given to --kafka-sasl-users).
    #[arg(long, value_name = "FILE")]
    users_file: PathBuf,
    /// The user name.
    #[arg(long, value_name = "NAME")]
    name: String,
    /// PBKDF2 iterations (at least 4096).
    #[arg(long, value_name = "N", default_value_t = 8192)]
    iterations: u32,
}

pub(crate) fn run(args: KafkaUserArgs) -> anyhow::Result<u8> {
    if args.iterations < MIN_ITERATIONS {
        anyhow::bail!("--iterations {} is below {MIN_ITERATIONS}", args.iterations);
    }
    if args.name.is_empty() || args.name.contains(['\0', ',', '=']) {
        anyhow::bail!(
            "--name {:?}: a user name is not empty and has no NUL, ',' or '='",
            args.name
        );
    }
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let password = line.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        eprintln!(
            "applier: no password on stdin (e.g. printf '%s\\n' \"$PASSWORD\" | applier kafka-user ...)"
        );
        return Ok(2);
    }
    let mut file: UsersFile = match std::fs::read_to_string(&args.users_file) {
        Ok(text) => toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", args.users_file.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => UsersFile::default(),
        Err(e) => anyhow::bail!("{}: {e}", args.users_file.display()),
    };
    file.user.retain(|u| u.name != args.name);
    for m in [Mechanism::ScramSha256, Mechanism::ScramSha512] {
        file.user.push(
            ScramEntry::derive(&args.name, password, m, args.iterations)
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        );
    }
    Credentials::from_file(file.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let text = format!(
        "# SASL users of the segmirror Kafka listener (--kafka-sasl-users): salted SCRAM keys\n# (RFC 5802); no password is stored. Written by `applier kafka-user`.\n{}",
        toml::to_string(&file)?
    );
    kafkalog::fsutil::write_atomic(&args.users_file, text.as_bytes(), true)?;
    eprintln!(
        "user {} written to {} (SCRAM-SHA-256, SCRAM-SHA-512; PLAIN checks against them)",
        args.name,
        args.users_file.display()
    );
    Ok(0)
}
