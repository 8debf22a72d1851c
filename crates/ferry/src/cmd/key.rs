//! `ferry key`: the key files that wrap the repository's one master key under passwords.
//! None of these commands re-encrypts data: removing a key file ends that password's access
//! only for whoever has not kept a copy of the file (or the master key) before.

use std::path::Path;

use anyhow::{bail, Context, Result};
use ferry_repo::Id;

use crate::cli::{Global, KeyCmd};
use crate::cmd::repo::open;
use crate::ctx::Ctx;
use crate::output::Output;
use crate::password::password;

pub async fn run(cmd: &KeyCmd, ctx: &mut Ctx) -> Result<()> {
    let (g, stores, out) = ctx.parts();
    let repo = open(g, stores).await?;
    match cmd {
        KeyCmd::Passwd(n) => {
            let new = new_password(g, n.new_password_file.as_deref())?;
            let id = repo.add_key(&new).await?;
            // The old key file goes only once the new one is stored; other keys stay.
            if let Some(old) = repo.opened_with() {
                repo.remove_key(&old).await?;
            }
            say(out, id, "password changed");
        }
        KeyCmd::Add(n) => {
            let new = new_password(g, n.new_password_file.as_deref())?;
            let id = repo.add_key(&new).await?;
            say(out, id, "key added");
        }
        KeyCmd::List => list(&repo, out).await?,
        KeyCmd::Remove { id } => {
            let keys = repo.keys().await?;
            let id = unique(&keys, id)?;
            if Some(id) == repo.opened_with() {
                bail!(
                    "key {} opened the repository: remove it with another password",
                    id.short()
                );
            }
            repo.remove_key(&id).await?;
            say(out, id, "key removed");
        }
    }
    Ok(())
}

fn say(out: &Output, id: Id, what: &str) {
    if out.json {
        println!("{}", serde_json::json!({ "key": id }));
    } else {
        eprintln!("{what} (key {})", id.short());
    }
}

async fn list(repo: &ferry_repo::Repo, out: &Output) -> Result<()> {
    let mut rows = Vec::new();
    for id in repo.keys().await? {
        // A damaged key file is listed as such, so that it can be removed.
        let kf = repo.key_file(&id).await.ok();
        rows.push((id, kf));
    }
    let current = repo.opened_with();
    if out.json {
        let v: Vec<_> = rows
            .iter()
            .map(|(id, kf)| {
                serde_json::json!({
                    "id": id,
                    "current": Some(*id) == current,
                    "damaged": kf.is_none(),
                    "created": kf.as_ref().and_then(|k| k.created),
                    "host": kf.as_ref().and_then(|k| k.host.clone()),
                    "user": kf.as_ref().and_then(|k| k.user.clone()),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(" {:<10} {:<21} {:<16} user", "id", "created", "host");
    for (id, kf) in &rows {
        let mark = if Some(*id) == current { '*' } else { ' ' };
        let Some(k) = kf else {
            println!("{mark}{:<10} (damaged)", id.short());
            continue;
        };
        let created = k.created.map_or_else(|| "-".to_string(), super::repo::when);
        println!(
            "{mark}{:<10} {:<21} {:<16} {}",
            id.short(),
            created,
            k.host.as_deref().unwrap_or("-"),
            k.user.as_deref().unwrap_or("-")
        );
    }
    Ok(())
}

/// The key file `prefix` names: a unique prefix of its id.
fn unique(keys: &[Id], prefix: &str) -> Result<Id> {
    let p = prefix.to_ascii_lowercase();
    let hits: Vec<&Id> = keys.iter().filter(|k| k.hex().starts_with(&p)).collect();
    match hits.as_slice() {
        [one] => Ok(**one),
        [] => bail!("no key {prefix}"),
        _ if p.is_empty() => bail!("give a key id"),
        more => bail!("{prefix} matches {} keys: give more digits", more.len()),
    }
}

/// The new password: FERRY_NEW_PASSWORD, the file, or a prompt (asked twice).
fn new_password(g: &Global, file: Option<&Path>) -> Result<Vec<u8>> {
    let new = match (std::env::var_os("FERRY_NEW_PASSWORD"), file) {
        (Some(p), _) => p.into_encoded_bytes(),
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("new password file {}", f.display()))?
            .trim_end_matches(['\n', '\r'])
            .as_bytes()
            .to_vec(),
        (None, None) => {
            if std::env::var_os("FERRY_PASSWORD").is_some() {
                bail!("set the new password with FERRY_NEW_PASSWORD or --new-password-file");
            }
            let g2 = Global {
                password_file: None,
                password_command: None,
                ..g.clone()
            };
            password(&g2, true)?
        }
    };
    if new.is_empty() {
        bail!("empty password");
    }
    Ok(new)
}
