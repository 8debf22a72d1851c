//! What each fuzz target feeds its decoder. `fuzz/` (cargo-fuzz, outside the workspace)
//! calls [`run`] with the fuzzer's bytes; `tests/corpus.rs` replays the saved corpora through
//! the same calls in every CI run; [`seeds`] makes valid inputs with ferry's own encoders to
//! start from. Every decoder here reads bytes someone else wrote: a store, a repository, a
//! password holder. None may panic or allocate without bound.
#![warn(missing_docs)]

use std::sync::OnceLock;

use ferry_repo::crypto::{KeyFile, MasterKey};
use ferry_repo::index::{self, Index};
use ferry_repo::pack::{self, BlobKind, Entry};
use ferry_repo::tree::{Node, NodeKind, Tree};
use ferry_repo::{Id, Snapshot};
use ferry_wal::envelope::{self, Header};
use ferry_wal::{WalKey, WalName};

/// The fuzz targets, each the name of a file in `fuzz/fuzz_targets/` and of a corpus
/// directory in `fuzz/corpus/`.
pub const TARGETS: &[&str] = &[
    "key_file",
    "pack_header",
    "index",
    "tree",
    "snapshot",
    "blob",
    "wal_envelope",
    "listing",
];

/// A WAL file name for the envelope's associated data.
const WAL_NAME: &str = "000000010000000000000001";

fn master_key() -> &'static MasterKey {
    static KEY: OnceLock<MasterKey> = OnceLock::new();
    KEY.get_or_init(|| MasterKey::generate(Id::of(b"fuzz")))
}

fn wal_key() -> &'static WalKey {
    static KEY: OnceLock<WalKey> = OnceLock::new();
    KEY.get_or_init(|| WalKey::from_secret(&[7; 32]))
}

/// Feeds `data` to the decoder of `target`. Errors are the expected outcome for most inputs;
/// only a panic, an abort or an unbounded allocation is a finding.
pub fn run(target: &str, data: &[u8]) {
    match target {
        "key_file" => {
            // Parsing and every check made before Argon2 runs; the KDF itself is RustCrypto's.
            let _ = KeyFile::parse(data);
        }
        "pack_header" => {
            let _ = pack::decode_entries(data, "f");
            let _ = pack::read_header(data, master_key(), "f");
        }
        "index" => {
            if let Ok(packs) = index::decode(data, "f") {
                let mut idx = Index::default();
                for (p, e) in &packs {
                    idx.add_pack(*p, e);
                }
                idx.finish();
                for e in packs.iter().flat_map(|(_, e)| e) {
                    let _ = idx.get(&e.id);
                }
            }
        }
        "tree" => {
            if let Ok(t) = Tree::decode(data, "f") {
                for n in &t.nodes {
                    // What a restore decodes from a node before it writes anything.
                    let _ = n.checked_name();
                    let _ = n.name_bytes();
                    let _ = n.target.as_deref().map(hex::decode);
                    for (k, v) in &n.xattrs {
                        let _ = (hex::decode(k), hex::decode(v));
                    }
                }
            }
        }
        "snapshot" => {
            let _ = Snapshot::decode(data, "f");
        }
        "blob" => {
            let mut scratch = Vec::new();
            let _ = ferry_repo::blob::unpack(data, &mut scratch, "f");
        }
        "wal_envelope" => {
            let _ = Header::parse(data, "f");
            let _ = envelope::open(data, "f", WAL_NAME, None, envelope::MAX_LEN);
            let _ = envelope::open(data, "f", WAL_NAME, Some(wal_key()), envelope::MAX_LEN);
        }
        "listing" => {
            // Object names a listing returns: WAL files and repository ids.
            for line in String::from_utf8_lossy(data).lines() {
                let last = line.rsplit('/').next().unwrap_or_default();
                let _ = WalName::parse(last);
                let _ = Id::parse(last);
            }
        }
        other => panic!("no fuzz target {other}"),
    }
}

/// Valid inputs for `target`, made by ferry's own encoders: where the fuzzer starts.
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    let entry = |kind, n: u8| Entry {
        kind,
        id: Id::of(&[n]),
        offset: u32::from(n) * 100,
        len: 100,
        plain_len: 60,
    };
    let packs = vec![
        (
            Id::of(b"p1"),
            vec![entry(BlobKind::Data, 1), entry(BlobKind::Tree, 2)],
        ),
        (Id::of(b"p2"), vec![entry(BlobKind::Data, 3)]),
    ];
    match target {
        "key_file" => {
            let kf = KeyFile::wrap(master_key(), b"pw").expect("wrap");
            vec![serde_json::to_vec(&kf).expect("json")]
        }
        "pack_header" => {
            let mut p = pack::Packer::default();
            p.add(BlobKind::Data, Id::of(b"a"), &[1; 80], 40);
            p.add(BlobKind::Tree, Id::of(b"b"), &[2; 80], 40);
            let (_, bytes, _) = p.finish(master_key());
            // The plaintext blob list: an index file's entries for one pack.
            let plain = index::encode(&packs[..1])[36..].to_vec();
            vec![bytes, plain]
        }
        "index" => vec![index::encode(&packs), Vec::new()],
        "tree" => vec![serde_json::to_vec(&sample_tree()).expect("json")],
        "snapshot" => vec![serde_json::to_vec(&sample_snapshot()).expect("json")],
        "blob" => {
            let text = b"ferry blob ".repeat(200);
            let mut z = vec![1];
            z.extend(zstd::bulk::compress(&text, 1).expect("zstd"));
            let mut raw = vec![0];
            raw.extend_from_slice(&text[..50]);
            vec![raw, z]
        }
        "wal_envelope" => {
            let seg = b"WAL page ".repeat(1000);
            [None, Some(wal_key())]
                .into_iter()
                .map(|k| envelope::seal(&seg, 3, WAL_NAME, k).expect("seal").1)
                .collect()
        }
        "listing" => vec![format!(
            "wal/0000000100000000/{WAL_NAME}\nwal/0000000100000000/{WAL_NAME}.partial\n\
             wal/00000002.history\nindex/{}\n",
            Id::of(b"x").hex()
        )
        .into_bytes()],
        other => panic!("no fuzz target {other}"),
    }
}

fn sample_tree() -> Tree {
    let node = |name: &str, kind| Node {
        name: name.into(),
        name_hex: false,
        kind,
        mode: 0o644,
        uid: 1000,
        gid: 1000,
        mtime: 1,
        ctime: 2,
        inode: 3,
        dev: 4,
        nlink: 1,
        size: 5,
        content: vec![Id::of(b"c")],
        subtree: None,
        target: None,
        rdev: None,
        xattrs: vec![(hex::encode("user.a"), hex::encode("b"))],
    };
    let mut link = node("l", NodeKind::Symlink);
    link.target = Some(hex::encode("../x"));
    let mut dir = node("d", NodeKind::Dir);
    dir.subtree = Some(Id::of(b"t"));
    let mut odd = node(&hex::encode([0xff, b'a']), NodeKind::File);
    odd.name_hex = true;
    Tree {
        nodes: vec![node("f", NodeKind::File), link, dir, odd],
    }
}

fn sample_snapshot() -> Snapshot {
    Snapshot {
        time: 1_700_000_000,
        nanos: 1,
        hostname: "h".into(),
        paths: vec!["/srv".into()],
        tags: vec!["t".into()],
        tree: Id::of(b"root"),
        parent: Some(Id::of(b"parent")),
        summary: Default::default(),
        start: Some(1),
        extra: Some(serde_json::json!({"pg": {"label": "x"}})),
    }
}
