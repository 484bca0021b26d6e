//! `svcd token issue`: a token signed with the daemon's key, printed to standard output and,
//! on request, written as the token file freva-client reads (`--token-file`).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::process::ExitCode;

use anyhow::Context;
use serde_json::json;
use svc_daemon::{Auth, Config};

use crate::cli::TokenCommand;

pub(crate) fn run(config: &Config, command: TokenCommand) -> anyhow::Result<ExitCode> {
    let TokenCommand::Issue {
        user,
        admin,
        ttl,
        token_file,
    } = command;
    anyhow::ensure!(!user.trim().is_empty(), "--user must not be empty");
    let auth = Auth::open(config)?;
    let (token, expires) = auth.issue(&user, admin, ttl)?;
    if let Some(path) = token_file {
        // The shape freva-client's token store uses; the same token serves as refresh token.
        let file = json!({
            "access_token": token,
            "token_type": "Bearer",
            "expires": expires,
            "refresh_token": token,
            "refresh_expires": expires,
            "scope": "",
            "headers": { "Authorization": format!("Bearer {token}") },
        });
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        writeln!(out, "{file:#}").with_context(|| format!("cannot write {}", path.display()))?;
    }
    println!("{token}");
    Ok(ExitCode::SUCCESS)
}
