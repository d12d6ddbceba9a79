//! `tokens create|list|revoke`: the federation server's access tokens in
//! `--db`. A token is printed once, at creation; the database keeps only
//! its hash. A revocation reaches a running server within its token cache
//! time (1 s by default), with no restart.

use clap::{Args, Subcommand};
use ms_smt_server::access::{Grants, issue_token, unix_now};
use ms_smt_server::{TokenRecord, TokenStore};
use serde_json::json;

use crate::Outcome;
use crate::db::{Access, Db};
use crate::error::{CliError, Res};
use crate::output::Output;

/// Arguments of `tokens`.
#[derive(Debug, Args)]
pub struct TokensArgs {
    #[command(subcommand)]
    command: TokensCommand,
}

#[derive(Debug, Subcommand)]
enum TokensCommand {
    /// Make a token and print it (the only time it is shown).
    Create {
        /// A grant, SCOPE:PATTERN: scope read, write, admin (admin includes
        /// write, which includes read) or metrics; pattern a namespace
        /// name, a prefix ending in '*', or '*'. Repeat for more, or
        /// separate with commas.
        #[arg(long = "grant", required = true, value_name = "SCOPE:PATTERN")]
        grants: Vec<String>,
        /// Whom or what the token is for (shown by `list`).
        #[arg(long, default_value = "")]
        label: String,
        /// Validity from now: a number and s, m, h or d (90d, 12h); none:
        /// until revoked.
        #[arg(long, value_name = "DURATION")]
        expires_in: Option<String>,
    },
    /// Every token: id, label, grants, created, expires, revoked (never the
    /// token itself).
    List,
    /// Revoke the token with this id.
    Revoke {
        /// The token's id (from `create` or `list`).
        id: String,
    },
}

impl TokensArgs {
    /// What the command does to the database.
    pub fn access(&self) -> Access {
        match self.command {
            // Tokens may be made before the server first opens the file.
            TokensCommand::Create { .. } => Access::Write,
            TokensCommand::Revoke { .. } => Access::WriteExisting,
            TokensCommand::List => Access::Read,
        }
    }
}

/// Seconds in `text` (`90d`, `12h`, `30m`, `45s`).
fn seconds(text: &str) -> Res<i64> {
    let bad = || CliError::BadDuration(text.to_owned());
    let split = text.len().checked_sub(1).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let n: i64 = number.parse().map_err(|_| bad())?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(scale).filter(|s| *s > 0).ok_or_else(bad)
}

fn record_json(r: &TokenRecord) -> serde_json::Value {
    json!({
        "id": r.id,
        "label": r.label,
        "grants": r.grants,
        "created_at": r.created_at,
        "expires_at": r.expires_at,
        "revoked_at": r.revoked_at,
    })
}

fn record_line(r: &TokenRecord, now: i64) -> String {
    let state = match (r.revoked_at, r.expires_at) {
        (Some(at), _) => format!("revoked at {at}"),
        (None, Some(at)) if at <= now => format!("expired at {at}"),
        (None, Some(at)) => format!("expires at {at}"),
        (None, None) => "no expiry".to_owned(),
    };
    format!(
        "{}  {}  [{}]  created {}  {}",
        r.id, r.label, r.grants, r.created_at, state
    )
}

/// Runs `tokens ...` on `db`.
pub async fn run(db: &Db, args: TokensArgs, out: Output) -> Res<Outcome> {
    match args.command {
        TokensCommand::Create {
            grants,
            label,
            expires_in,
        } => {
            let grants: Grants = grants.join(",").parse()?;
            let expires_at = match expires_in {
                Some(text) => Some(unix_now().saturating_add(seconds(&text)?)),
                None => None,
            };
            let issued = match db {
                Db::Sqlite(s) => issue_token(s, &label, &grants, expires_at).await?,
                Db::Postgres(s) => issue_token(s, &label, &grants, expires_at).await?,
            };
            let mut json = record_json(&issued.record);
            json["token"] = json!(issued.secret.expose());
            out.emit(json, || {
                format!(
                    "{}\ntoken id {} [{}]: shown once, keep it secret (the database holds only its hash)",
                    issued.secret.expose(),
                    issued.record.id,
                    issued.record.grants
                )
            });
        }
        TokensCommand::List => {
            let list = match db {
                Db::Sqlite(s) => TokenStore::open(s).await?.list().await?,
                Db::Postgres(s) => TokenStore::open(s).await?.list().await?,
            };
            let now = unix_now();
            out.emit(
                json!(list.iter().map(record_json).collect::<Vec<_>>()),
                || {
                    list.iter()
                        .map(|r| record_line(r, now))
                        .collect::<Vec<_>>()
                        .join("\n")
                },
            );
        }
        TokensCommand::Revoke { id } => {
            let now = unix_now();
            let revoked = match db {
                Db::Sqlite(s) => TokenStore::open(s).await?.revoke(&id, now).await?,
                Db::Postgres(s) => TokenStore::open(s).await?.revoke(&id, now).await?,
            };
            if !revoked {
                return Err(CliError::NoSuchToken(id));
            }
            out.emit(json!({ "revoked": id, "at": now }), || {
                format!("revoked {id}")
            });
        }
    }
    Ok(Outcome::Ok)
}

#[cfg(test)]
mod tests {
    use super::seconds;

    #[test]
    fn durations() {
        assert_eq!(seconds("90d").ok(), Some(90 * 86_400));
        assert_eq!(seconds("12h").ok(), Some(43_200));
        assert_eq!(seconds("45s").ok(), Some(45));
        for bad in ["", "d", "0d", "-1h", "5w", "1.5h"] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
    }
}
