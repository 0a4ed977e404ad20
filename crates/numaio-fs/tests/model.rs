//! Model-based crash test: random operation sequences run against the file system and an
//! in-memory reference model; at random points the power is cut
//! ([`MemStore::crash`]), the volume is mounted again, and what it holds must equal the
//! model as of the last commit (every `fsync`/`sync`), plus the data of files `fdatasync`
//! made durable without a commit.
//!
//! `NUMAIO_FS_MODEL_SEQS` (default 200) sets the number of sequences,
//! `NUMAIO_FS_MODEL_SEED` the first seed; a failure names its seed.

use numaio_fs::fsck::{fsck, FsckOptions};
use numaio_fs::meta::Kind;
use numaio_fs::store::{BlockStore, CrashMode, MemStore};
use numaio_fs::*;
use numaio_testkit::{env_u64, Rng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

const ROOT: u64 = 1;

#[derive(Debug, Clone, PartialEq)]
struct MInode {
    kind: Kind,
    data: Vec<u8>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    entries: BTreeMap<Vec<u8>, u64>,
    parent: u64,
    /// Home node: a top-level directory's from the round robin, everything else its
    /// parent directory's at create (the root has none).
    home: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Default)]
struct Model {
    inodes: BTreeMap<u64, MInode>,
    /// Home of the newest top-level directory: the round robin goes on after it.
    last_home: Option<u32>,
}

impl Model {
    fn new() -> Model {
        let mut m = Model::default();
        m.inodes.insert(ROOT, MInode::new(Kind::Dir, ROOT));
        m
    }

    fn refs(&self, ino: u64) -> usize {
        self.inodes
            .values()
            .flat_map(|i| i.entries.values())
            .filter(|&&e| e == ino)
            .count()
    }

    fn nlink(&self, ino: u64) -> u32 {
        let i = &self.inodes[&ino];
        if i.kind == Kind::Dir {
            2 + i
                .entries
                .values()
                .filter(|e| self.inodes[e].kind == Kind::Dir)
                .count() as u32
        } else {
            self.refs(ino) as u32
        }
    }

    fn of_kind(&self, k: Kind) -> Vec<u64> {
        self.inodes
            .iter()
            .filter(|(_, i)| i.kind == k)
            .map(|(&n, _)| n)
            .collect()
    }

    fn drop_if_unreferenced(&mut self, ino: u64) {
        if self.refs(ino) == 0 {
            self.inodes.remove(&ino);
        }
    }

    /// The home of a new inode in directory `d`. Top-level directories take the volume's
    /// nodes round robin after the last one given, skipping nodes without free blocks
    /// (`free`: per node, ascending node ids, as `statfs` lists them).
    fn home_for(&mut self, d: u64, kind: Kind, free: &[(u32, u64)]) -> Option<u32> {
        if d != ROOT || kind != Kind::Dir {
            return self.inodes[&d].home;
        }
        let n = free.len();
        let first = self
            .last_home
            .map_or(0, |l| free.iter().take_while(|x| x.0 <= l).count());
        let home = (0..n)
            .map(|i| free[(first + i) % n])
            .find(|x| x.1 > 0)
            .map(|x| x.0)
            .expect("a node with free blocks");
        self.last_home = Some(home);
        Some(home)
    }

    fn in_subtree(&self, mut d: u64, top: u64) -> bool {
        loop {
            if d == top {
                return true;
            }
            if d == ROOT {
                return false;
            }
            d = self.inodes[&d].parent;
        }
    }

    /// Applies a rename if the rules allow it; `false` when it must fail.
    fn rename(&mut self, sd: u64, sn: &[u8], dd: u64, dn: &[u8]) -> bool {
        let Some(&src) = self.inodes[&sd].entries.get(sn) else {
            return false;
        };
        let sk = self.inodes[&src].kind;
        let dst = self.inodes[&dd].entries.get(dn).copied();
        if let Some(t) = dst {
            if t == src {
                return true;
            }
            let tk = self.inodes[&t].kind;
            match (sk == Kind::Dir, tk == Kind::Dir) {
                (true, false) | (false, true) => return false,
                (true, true) if !self.inodes[&t].entries.is_empty() => return false,
                _ => {}
            }
        }
        if sk == Kind::Dir && self.in_subtree(dd, src) {
            return false;
        }
        if let Some(t) = dst {
            self.inodes.get_mut(&dd).unwrap().entries.remove(dn);
            self.drop_if_unreferenced(t);
        }
        self.inodes.get_mut(&sd).unwrap().entries.remove(sn);
        self.inodes
            .get_mut(&dd)
            .unwrap()
            .entries
            .insert(dn.to_vec(), src);
        if sk == Kind::Dir {
            self.inodes.get_mut(&src).unwrap().parent = dd;
        }
        true
    }
}

impl MInode {
    fn new(kind: Kind, parent: u64) -> MInode {
        MInode {
            kind,
            data: Vec::new(),
            xattrs: BTreeMap::new(),
            entries: BTreeMap::new(),
            parent,
            home: None,
        }
    }
}

fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    let mut buf = vec![0u8; size as usize];
    assert_eq!(fs.read(ino, 0, &mut buf).unwrap(), size as usize);
    buf
}

/// The file system holds exactly the model (`skip_data`: files whose content may differ).
fn check(fs: &Fs, m: &Model, skip_data: &BTreeSet<u64>, ctx: &str) {
    assert_eq!(
        fs.meta_snapshot().last_home,
        m.last_home,
        "{ctx}: directory round robin"
    );
    assert_eq!(
        fs.statfs().files,
        m.inodes.len() as u64,
        "{ctx}: inode count"
    );
    for (&ino, mi) in &m.inodes {
        let a = fs
            .getattr(ino)
            .unwrap_or_else(|e| panic!("{ctx}: inode {ino}: {e}"));
        assert_eq!(a.kind, mi.kind, "{ctx}: inode {ino} kind");
        assert_eq!(a.home, mi.home, "{ctx}: inode {ino} home node");
        assert_eq!(a.nlink, m.nlink(ino), "{ctx}: inode {ino} nlink");
        let x: BTreeMap<Vec<u8>, Vec<u8>> = fs
            .listxattr(ino)
            .unwrap()
            .into_iter()
            .filter(|n| n != PLACEMENT_XATTR)
            .map(|n| {
                let v = fs.getxattr(ino, &n).unwrap();
                (n, v)
            })
            .collect();
        assert_eq!(x, mi.xattrs, "{ctx}: inode {ino} xattrs");
        match mi.kind {
            Kind::File => {
                assert_eq!(a.size, mi.data.len() as u64, "{ctx}: inode {ino} size");
                if !skip_data.contains(&ino) {
                    assert!(read_all(fs, ino) == mi.data, "{ctx}: inode {ino} content");
                    check_seek(fs, ino, &mi.data, &format!("{ctx}: inode {ino}"));
                }
            }
            Kind::Dir => {
                let mut got = BTreeMap::new();
                let mut cookie = 0;
                loop {
                    let b = fs.readdir(ino, cookie).unwrap();
                    if b.is_empty() {
                        break;
                    }
                    for e in b {
                        cookie = e.cookie;
                        if e.name != b"." && e.name != b".." {
                            got.insert(e.name, e.ino);
                        }
                    }
                }
                assert_eq!(got, mi.entries, "{ctx}: directory {ino} entries");
                assert_eq!(
                    fs.lookup(ino, b"..", &Caller::root_on(0)).unwrap().ino,
                    mi.parent,
                    "{ctx}: directory {ino} parent"
                );
            }
            Kind::Symlink => {
                assert_eq!(fs.readlink(ino).unwrap(), mi.data, "{ctx}: symlink {ino}");
                assert_eq!(a.size, mi.data.len() as u64, "{ctx}: symlink {ino} size");
            }
            // The model makes no special files.
            k => panic!("{ctx}: inode {ino} is a {k:?}, which the model never made"),
        }
    }
}

/// SEEK_DATA and SEEK_HOLE from a few offsets agree with the content `data`: only zeros
/// are skipped on the way to data, a hole found reads as zeros to its block's end, and
/// both fail with ENXIO at the end.
fn check_seek(fs: &Fs, ino: u64, data: &[u8], ctx: &str) {
    let size = data.len() as u64;
    let zeros = |a: u64, b: u64| data[a as usize..b as usize].iter().all(|&x| x == 0);
    for off in [0, size / 3, size / 2, size.saturating_sub(1), size] {
        if off >= size {
            for w in [SEEK_DATA, SEEK_HOLE] {
                let e = fs.seek(ino, off, w).unwrap_err();
                assert_eq!(e.errno(), libc::ENXIO, "{ctx}: seek {w} at the end");
            }
            continue;
        }
        match fs.seek(ino, off, SEEK_DATA) {
            Ok(d) => assert!(
                d >= off && d < size && zeros(off, d),
                "{ctx}: SEEK_DATA({off}) = {d}"
            ),
            Err(e) => assert!(
                e.errno() == libc::ENXIO && zeros(off, size),
                "{ctx}: SEEK_DATA({off}): {e}"
            ),
        }
        let h = fs.seek(ino, off, SEEK_HOLE).unwrap();
        let block_end = (h / BLOCK_SIZE + 1) * BLOCK_SIZE;
        assert!(
            h >= off && h <= size && zeros(h, block_end.min(size)),
            "{ctx}: SEEK_HOLE({off}) = {h}"
        );
    }
}

const NAMES: [&[u8]; 6] = [b"a", b"b", b"c", b"d", b"e\xff", b"f"];

struct Run {
    rng: Rng,
    store: Arc<MemStore>,
    fs: Fs,
    model: Model,
    committed: Model,
    commits: u64,
    /// Files whose blocks were written or cut since the last commit.
    touched: BTreeSet<u64>,
    /// Files overwritten since the last commit whose device an `fdatasync` of another file
    /// synced without a commit: their blocks hold the old or the new data.
    partly_synced: BTreeSet<u64>,
    seed: u64,
}

impl Run {
    fn new(seed: u64) -> Run {
        let store = Arc::new(MemStore::new(&[(0, 2 << 20), (1, 2 << 20)]));
        let o = MkfsOptions {
            policy: PlacementPolicy::WriterLocal,
            group_blocks: 128,
            journal_blocks: 16,
            checkpoint_blocks: 32,
        };
        Fs::mkfs(&*store, &o).unwrap();
        let fs = Fs::mount(store.clone(), MountOptions::default()).unwrap();
        Run {
            rng: Rng(seed),
            store,
            fs,
            model: Model::new(),
            committed: Model::new(),
            commits: 0,
            touched: BTreeSet::new(),
            partly_synced: BTreeSet::new(),
            seed,
        }
    }

    fn pick(&mut self, v: &[u64]) -> u64 {
        v[self.rng.below(v.len() as u64) as usize]
    }

    fn name(&mut self) -> &'static [u8] {
        NAMES[self.rng.below(NAMES.len() as u64) as usize]
    }

    fn caller(&mut self) -> Caller {
        Caller::root_on(self.rng.below(2) as u32)
    }

    fn data(&mut self, len: usize) -> Vec<u8> {
        let b = self.rng.next_u64() as u8;
        (0..len)
            .map(|i| b.wrapping_add((i as u8).wrapping_mul(7)))
            .collect()
    }

    /// One random operation, mirrored in the model.
    fn step(&mut self, i: usize) {
        let ctx = format!("seed {} step {i}", self.seed);
        let dirs = self.model.of_kind(Kind::Dir);
        let files = self.model.of_kind(Kind::File);
        let c = self.caller();
        match self.rng.below(100) {
            0..=14 => {
                let d = self.pick(&dirs);
                let n = self.name();
                let r = self.fs.create(d, n, 0o644, &c);
                let exists = self.model.inodes[&d].entries.contains_key(n);
                assert_eq!(r.is_ok(), !exists, "{ctx}: create {r:?}");
                if let Ok(a) = r {
                    let mut i = MInode::new(Kind::File, 0);
                    i.home = self.model.home_for(d, Kind::File, &[]);
                    self.model.inodes.insert(a.ino, i);
                    self.model
                        .inodes
                        .get_mut(&d)
                        .unwrap()
                        .entries
                        .insert(n.to_vec(), a.ino);
                }
            }
            15..=22 => {
                let d = self.pick(&dirs);
                let n = self.name();
                let free: Vec<(u32, u64)> = self
                    .fs
                    .statfs()
                    .nodes
                    .iter()
                    .map(|u| (u.node, u.free_blocks))
                    .collect();
                let r = self.fs.mkdir(d, n, 0o755, &c);
                let exists = self.model.inodes[&d].entries.contains_key(n);
                assert_eq!(r.is_ok(), !exists, "{ctx}: mkdir {r:?}");
                if let Ok(a) = r {
                    let mut i = MInode::new(Kind::Dir, d);
                    i.home = self.model.home_for(d, Kind::Dir, &free);
                    assert_eq!(a.home, i.home, "{ctx}: mkdir home");
                    self.model.inodes.insert(a.ino, i);
                    self.model
                        .inodes
                        .get_mut(&d)
                        .unwrap()
                        .entries
                        .insert(n.to_vec(), a.ino);
                }
            }
            23..=44 if !files.is_empty() => {
                let f = self.pick(&files);
                let off = if self.rng.below(4) == 0 {
                    self.rng.below(200_000)
                } else {
                    self.rng.below(20_000)
                };
                let len = 1 + self.rng.below(12_000) as usize;
                let data = self.data(len);
                self.fs.write(f, off, &data, &c).unwrap();
                let m = &mut self.model.inodes.get_mut(&f).unwrap().data;
                let end = off as usize + len;
                if m.len() < end {
                    m.resize(end, 0);
                }
                m[off as usize..end].copy_from_slice(&data);
                self.touched.insert(f);
            }
            45..=51 if !files.is_empty() => {
                let f = self.pick(&files);
                let size = self.rng.below(60_000);
                let sa = SetAttr {
                    size: Some(size),
                    ..Default::default()
                };
                self.fs.setattr(f, &sa, &c).unwrap();
                self.model
                    .inodes
                    .get_mut(&f)
                    .unwrap()
                    .data
                    .resize(size as usize, 0);
                self.touched.insert(f);
            }
            52..=61 => {
                let (sd, dd) = (self.pick(&dirs), self.pick(&dirs));
                let (sn, dn) = (self.name(), self.name());
                let r = self.fs.rename(sd, sn, dd, dn, 0, &c);
                let ok = self.model.rename(sd, sn, dd, dn);
                assert_eq!(
                    r.is_ok(),
                    ok,
                    "{ctx}: rename {sd}/{sn:?} {dd}/{dn:?}: {r:?}"
                );
            }
            62..=66 if !files.is_empty() => {
                let f = self.pick(&files);
                let d = self.pick(&dirs);
                let n = self.name();
                let r = self.fs.link(f, d, n, &c);
                let exists = self.model.inodes[&d].entries.contains_key(n);
                assert_eq!(r.is_ok(), !exists, "{ctx}: link {r:?}");
                if r.is_ok() {
                    self.model
                        .inodes
                        .get_mut(&d)
                        .unwrap()
                        .entries
                        .insert(n.to_vec(), f);
                }
            }
            67..=76 => {
                let d = self.pick(&dirs);
                let n = self.name();
                let r = self.fs.unlink(d, n, &c);
                let e = self.model.inodes[&d].entries.get(n).copied();
                let ok = e.is_some_and(|e| self.model.inodes[&e].kind != Kind::Dir);
                assert_eq!(r.is_ok(), ok, "{ctx}: unlink {r:?}");
                if ok {
                    let e = e.unwrap();
                    self.model.inodes.get_mut(&d).unwrap().entries.remove(n);
                    self.model.drop_if_unreferenced(e);
                }
            }
            77..=81 => {
                let d = self.pick(&dirs);
                let n = self.name();
                let r = self.fs.rmdir(d, n, &c);
                let e = self.model.inodes[&d].entries.get(n).copied();
                let ok = e.is_some_and(|e| {
                    let i = &self.model.inodes[&e];
                    i.kind == Kind::Dir && i.entries.is_empty()
                });
                assert_eq!(r.is_ok(), ok, "{ctx}: rmdir {r:?}");
                if ok {
                    self.model.inodes.get_mut(&d).unwrap().entries.remove(n);
                    self.model.inodes.remove(&e.unwrap());
                }
            }
            82..=87 => {
                let all: Vec<u64> = self.model.inodes.keys().copied().collect();
                let ino = self.pick(&all);
                let name = [b"user.x".as_slice(), b"user.y"][self.rng.below(2) as usize];
                let len = self.rng.below(40) as usize;
                let v = self.data(len);
                self.fs.setxattr(ino, name, &v, 0, &c).unwrap();
                self.model
                    .inodes
                    .get_mut(&ino)
                    .unwrap()
                    .xattrs
                    .insert(name.to_vec(), v);
            }
            97 => {
                let d = self.pick(&dirs);
                let n = self.name();
                let target = format!("t{}", self.rng.below(1000)).into_bytes();
                let r = self.fs.symlink(d, n, &target, &c);
                let exists = self.model.inodes[&d].entries.contains_key(n);
                assert_eq!(r.is_ok(), !exists, "{ctx}: symlink {r:?}");
                if let Ok(a) = r {
                    let mut i = MInode::new(Kind::Symlink, 0);
                    i.home = self.model.home_for(d, Kind::Symlink, &[]);
                    i.data = target;
                    self.model.inodes.insert(a.ino, i);
                    self.model
                        .inodes
                        .get_mut(&d)
                        .unwrap()
                        .entries
                        .insert(n.to_vec(), a.ino);
                }
            }
            98 | 99 if !files.is_empty() => {
                let f = self.pick(&files);
                let off = self.rng.below(40_000);
                let len = 1 + self.rng.below(20_000);
                let size = self.model.inodes[&f].data.len() as u64;
                let mode = [
                    FALLOC_PUNCH_HOLE | FALLOC_KEEP_SIZE,
                    FALLOC_KEEP_SIZE,
                    0,
                    FALLOC_ZERO_RANGE,
                    FALLOC_ZERO_RANGE | FALLOC_KEEP_SIZE,
                ][self.rng.below(5) as usize];
                self.fs
                    .fallocate(f, off, len, mode, &c)
                    .unwrap_or_else(|e| panic!("{ctx}: fallocate {mode:#x}: {e}"));
                let m = &mut self.model.inodes.get_mut(&f).unwrap().data;
                let end = off + len;
                if mode & FALLOC_KEEP_SIZE == 0 && end > size {
                    m.resize(end as usize, 0);
                }
                if mode & (FALLOC_PUNCH_HOLE | FALLOC_ZERO_RANGE) != 0 {
                    let e = (end as usize).min(m.len());
                    if (off as usize) < e {
                        m[off as usize..e].fill(0);
                    }
                }
                self.touched.insert(f);
            }
            88..=92 if !files.is_empty() => {
                let f = self.pick(&files);
                let data_only = self.fs.sync_stats().data_only;
                self.fs.fsync(f, self.rng.below(2) == 0).unwrap();
                if self.fs.sync_stats().data_only != data_only {
                    // fdatasync without a commit: the file's size and blocks were durable,
                    // now its data is too.
                    if let (Some(c), Some(m)) =
                        (self.committed.inodes.get_mut(&f), self.model.inodes.get(&f))
                    {
                        c.data = m.data.clone();
                    }
                    let others = self.touched.iter().filter(|&&t| t != f);
                    self.partly_synced.extend(others);
                }
            }
            93..=96 => self.fs.sync().unwrap(),
            _ => {}
        }
        if self.fs.commits() != self.commits {
            self.commits = self.fs.commits();
            self.committed = self.model.clone();
            self.touched.clear();
            self.partly_synced.clear();
        }
    }

    /// Cuts the power, mounts again and checks the committed state.
    fn crash(&mut self, mode: CrashMode, i: usize) {
        let ctx = format!("seed {} crash ({mode:?}) after step {i}", self.seed);
        let img = Arc::new(self.store.crash(mode));
        let fs = Fs::mount(img.clone(), MountOptions::default())
            .unwrap_or_else(|e| panic!("{ctx}: mount: {e}"));
        let skip = if mode == CrashMode::DropUnsynced {
            self.partly_synced.clone()
        } else {
            self.touched.clone()
        };
        check(&fs, &self.committed, &skip, &ctx);
        let r = fsck(&*img, &FsckOptions { repair: false }).unwrap();
        assert!(r.errors.is_empty(), "{ctx}: fsck: {:?}", r.errors);
        // Overwrites after the last commit may have reached the disk in part: the model
        // takes what the files now hold.
        for &ino in &skip {
            if let Some(i) = self.committed.inodes.get_mut(&ino) {
                i.data = read_all(&fs, ino);
            }
        }
        self.store = img;
        self.fs = fs;
        self.model = self.committed.clone();
        self.commits = 0;
        self.touched.clear();
        self.partly_synced.clear();
    }
}

#[test]
fn random_operations_survive_power_cuts() {
    let seqs = env_u64("NUMAIO_FS_MODEL_SEQS", 200);
    let first = env_u64("NUMAIO_FS_MODEL_SEED", 1);
    let (mut ops, mut cuts, mut random_cuts) = (0, 0, 0);
    for seed in first..first + seqs {
        let mut run = Run::new(seed);
        let steps = 40 + run.rng.below(60) as usize;
        for i in 0..steps {
            run.step(i);
            ops += 1;
            if run.rng.below(25) == 0 {
                cuts += 1;
                let mode = if run.rng.below(3) == 0 {
                    random_cuts += 1;
                    CrashMode::Random {
                        seed: run.rng.next_u64(),
                    }
                } else {
                    CrashMode::DropUnsynced
                };
                run.crash(mode, i);
            }
        }
        // The live state equals the model; a clean unmount keeps all of it.
        let ctx = format!("seed {seed} live");
        check(&run.fs, &run.model, &BTreeSet::new(), &ctx);
        run.fs.sync().unwrap();
        run.committed = run.model.clone();
        run.crash(CrashMode::DropUnsynced, steps);
        cuts += 1;
    }
    eprintln!(
        "{seqs} sequences, {ops} operations, {cuts} power cuts ({random_cuts} keeping a random \
         part of the unsynced writes), all recovered to the last commit"
    );
}

#[test]
fn damaged_images_fail_to_mount_or_recover_without_panicking() {
    let mut rng = Rng(77);
    let mut run = Run::new(5);
    for i in 0..150 {
        run.step(i);
    }
    run.fs.sync().unwrap();
    let base = run.store.crash(CrashMode::DropUnsynced);
    let bs = BLOCK_SIZE;
    // Label, header, both checkpoint slots, the journal: the first blocks of device 0.
    let hot: Vec<(u16, u64)> = vec![
        (0, 0),
        (1, 0),
        (0, bs),
        (0, 5 * bs),
        (0, 5 * bs + 100),
        (0, 37 * bs),
        (0, 69 * bs),
        (0, 69 * bs + 30),
        // Node 1's checkpoint shard slots on device 1.
        (1, bs),
        (1, 33 * bs),
    ];
    let mut outcomes = BTreeMap::new();
    for k in 0..300 {
        let img = Arc::new(base.crash(CrashMode::KeepAll));
        let (dev, at) = if k < hot.len() * 8 {
            hot[k % hot.len()]
        } else {
            (rng.below(2) as u16, rng.below(85 * bs))
        };
        let at = at + rng.below(64);
        let mut b = [0u8; 1];
        img.read_at(dev, at, &mut b).unwrap();
        b[0] ^= 1 << rng.below(8);
        img.write_at(dev, at, &b).unwrap();
        let what = match Fs::mount(img.clone(), MountOptions::default()) {
            Ok(fs) => {
                // Recovered (the damage hit unused bytes, or an older commit was used).
                let _ = fs.statfs();
                "mounted"
            }
            Err(FsError::Corrupt { .. }) => "corrupt",
            Err(e) => panic!("flip at dev {dev} byte {at}: unexpected error {e}"),
        };
        *outcomes.entry(what).or_insert(0) += 1;
        let _ = fsck(&*img, &FsckOptions { repair: false });
    }
    assert!(
        outcomes.get("corrupt").copied().unwrap_or(0) > 0,
        "{outcomes:?}"
    );
    eprintln!("damaged images: {outcomes:?}");
}
