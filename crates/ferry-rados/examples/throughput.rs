//! The store alone, without the transfer engine: SIZE bytes (default 1 GiB) written as one
//! upload of one-object-set blocks, `DEPTH` blocks in flight, then read back the same way,
//! checked. Shows what the RADOS store can do when nothing else spends the CPU.
//!   CEPH_CONF=... cargo run --release --example throughput -- POOL [SIZE_MIB] [DEPTH]

#[tokio::main]
async fn main() -> ferry_store::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let pool = args.get(1).map_or("ferry", String::as_str);
    let mib: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let depth: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(16);
    use bytes::Bytes;
    use ferry_store::{Meta, Store};
    use futures::{StreamExt, TryStreamExt};
    use std::time::Instant;

    // The example is a program of its own: its environment is its settings.
    let cfg = ferry_rados::Config {
        conf: std::env::var_os("CEPH_CONF").map(Into::into),
        ..Default::default()
    };
    let s = ferry_rados::RadosStore::with(pool, cfg, ferry_rados::Layout::default())?;
    let block = s.layout().set_size();
    let size = mib << 20;
    // One random block reused: the point is the store, not the data generator.
    let data = Bytes::from(
        (0..block)
            .map(|i| (i * 7919 % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let n = size.div_ceil(block);
    let key = format!("throughput-{}", std::process::id());

    let t = Instant::now();
    let up = s.start_upload(&key, &Meta::new()).await?;
    let ids: Vec<_> = futures::stream::iter(0..n)
        .map(|i| {
            let len = block.min(size - i * block) as usize;
            s.put_block(&up, i as usize, i * block, data.slice(..len))
        })
        .buffered(depth)
        .try_collect()
        .await?;
    s.complete_upload(&up, ids, &Meta::new()).await?;
    let w = t.elapsed().as_secs_f64();

    let t = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let (s, key, data) = (&s, &key, &data);
            async move {
                let end = (i * block + block).min(size);
                let got = s.get_range(key, i * block..end).await?;
                assert!(got == data[..got.len()], "block {i} differs");
                Ok::<_, ferry_store::Error>(())
            }
        })
        .buffer_unordered(depth)
        .try_collect::<Vec<()>>()
        .await?;
    let r = t.elapsed().as_secs_f64();
    s.delete(&key).await?;
    let mbps = |secs: f64| size as f64 / secs / 1e6;
    println!(
        "store alone, {size} bytes, {depth} blocks in flight: write {:.1} MB/s, read {:.1} MB/s",
        mbps(w),
        mbps(r)
    );
    Ok(())
}
