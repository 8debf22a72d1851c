//! `ferry ls` and `ferry mkdir`.

use anyhow::Result;
use ferry_store::Scheme;

use crate::ctx::Ctx;

pub async fn ls(url: &str, ctx: &mut Ctx) -> Result<()> {
    let place = ctx.stores.open(url)?;
    let out = &ctx.out;
    if place.loc.scheme == Scheme::Stdio {
        anyhow::bail!("'-' cannot be listed");
    }
    let prefix = place.key.clone();
    // A key names one object if it exists; otherwise it is a prefix.
    let objects = match place.store.head(&prefix).await {
        Ok(one) if !prefix.is_empty() && !place.dir_hint => vec![one],
        _ => place.store.list(&prefix).await?,
    };
    if out.json {
        let v: Vec<_> = objects
            .iter()
            .map(|o| serde_json::json!({"key": place.show(&o.key), "size": o.size}))
            .collect();
        println!("{}", serde_json::to_string(&v)?);
    } else {
        for o in &objects {
            println!("{:>14}  {}", o.size, place.show(&o.key));
        }
    }
    Ok(())
}

pub async fn mkdir(url: &str, ctx: &mut Ctx) -> Result<()> {
    let place = ctx.stores.open(url)?;
    let out = &ctx.out;
    let created = match place.loc.scheme {
        Scheme::Stdio => anyhow::bail!("'-' is not a place to create"),
        Scheme::Local => std::fs::create_dir_all(place.path()).map(|_| true)?,
        _ if !place.key.is_empty() => {
            anyhow::bail!(
                "{}: mkdir creates a bucket or container; prefixes need no creation",
                place.loc
            )
        }
        _ => match place.store.create_root().await {
            Ok(()) => true,
            Err(ferry_store::Error::AlreadyExists(_)) => false,
            Err(e) => return Err(e.into()),
        },
    };
    if out.json {
        println!("{}", serde_json::json!({"url": url, "created": created}));
    } else if !created {
        eprintln!("{url} already exists");
    }
    Ok(())
}
