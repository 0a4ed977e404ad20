use super::*;

/// The thread that commits every interval; stopped and joined on drop.
pub(super) struct Committer {
    pub(super) every: Duration,
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Committer {
    pub(super) fn start(core: Arc<shared::FsCore>, every: Duration) -> Result<Committer, FsError> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("numaio-fs-commit".into())
            .spawn(move || {
                let mut failing = false;
                loop {
                    {
                        let mut stopped = s.0.lock();
                        if !*stopped {
                            s.1.wait_for(&mut stopped, every);
                        }
                        if *stopped {
                            return;
                        }
                    }
                    match core.commit_all() {
                        Ok(_) => failing = false,
                        // Nobody waits on this commit: say so once, and try again at the
                        // next interval (the next fsync reports the error to its caller).
                        Err(e) if !failing => {
                            failing = true;
                            eprintln!(
                                "numaio-fs: the periodic commit failed: {e}; retrying every {} s",
                                every.as_secs_f64()
                            );
                        }
                        Err(_) => {}
                    }
                }
            })
            .map_err(|e| {
                FsError::Invalid(format!(
                    "starting the periodic commit thread failed ({e}): mount without a \
                     commit interval or free some threads"
                ))
            })?;
        Ok(Committer {
            every,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Fs {
    /// Formats the devices of `store` as one volume.
    pub fn mkfs(store: &dyn BlockStore, opts: &MkfsOptions) -> Result<Header, FsError> {
        crate::mkfs::mkfs(store, opts)
    }

    /// Checks the labels of every device against the volume header; returns the header.
    pub fn check_labels(store: &dyn BlockStore) -> Result<Header, FsError> {
        let devs = store.devices();
        let Some(d0) = devs.first() else {
            return Err(FsError::Invalid("no device given".into()));
        };
        let bs = BLOCK_SIZE as usize;
        let mut b = vec![0u8; bs];
        store.read_at(0, 0, &mut b)?;
        let l0 = Label::decode(&b, &d0.path)?;
        let mut hb = vec![0u8; HEADER_BLOCKS as usize * bs];
        store.read_at(0, BLOCK_SIZE, &mut hb)?;
        let header = Header::decode(&hb, &d0.path);
        if l0.dev_index != 0 {
            return Err(FsError::Invalid(format!(
                "{} is device {} of its volume, not its first device: give the devices in \
                 the order mkfs was given them",
                d0.path.display(),
                l0.dev_index
            )));
        }
        let header = header?;
        if header.uuid != l0.uuid {
            return Err(FsError::Corrupt {
                device: d0.path.clone(),
                what: "device label and volume header belong to different volumes".into(),
            });
        }
        let names = || {
            header
                .devices
                .iter()
                .map(|d| d.path.display().to_string())
                .collect::<Vec<_>>()
                .join(" ")
        };
        if devs.len() != header.devices.len() {
            return Err(FsError::Invalid(format!(
                "the volume on {} has {} devices ({}), {} given: give all of them, in mkfs order",
                d0.path.display(),
                header.devices.len(),
                names(),
                devs.len()
            )));
        }
        for (i, d) in devs.iter().enumerate() {
            let mut b = vec![0u8; bs];
            store.read_at(i as u16, 0, &mut b)?;
            let l = Label::decode(&b, &d.path).map_err(|e| FsError::Corrupt {
                device: d.path.clone(),
                what: format!(
                    "not a device of the volume on {} ({e}); give the volume's devices: {}",
                    d0.path.display(),
                    names()
                ),
            })?;
            if l.uuid != header.uuid {
                return Err(FsError::Corrupt {
                    device: d.path.clone(),
                    what: format!(
                        "belongs to another numaio-fs volume; give this volume's devices: {}",
                        names()
                    ),
                });
            }
            if l.dev_index as usize != i {
                return Err(FsError::Invalid(format!(
                    "{} is device {} of the volume (formatted as {}), given as device {i}: give \
                     the devices in mkfs order: {}",
                    d.path.display(),
                    l.dev_index,
                    header
                        .devices
                        .get(l.dev_index as usize)
                        .map_or("?".into(), |e| e.path.display().to_string()),
                    names()
                )));
            }
            if d.bytes < header.devices[i].bytes {
                return Err(FsError::Corrupt {
                    device: d.path.clone(),
                    what: format!(
                        "{} bytes, but the volume was formatted with {} bytes on it",
                        d.bytes, header.devices[i].bytes
                    ),
                });
            }
        }
        Ok(header)
    }

    /// Loads metadata and allocator from a volume without writing anything.
    fn load(store: &dyn BlockStore) -> Result<(Header, journal::Recovered, Allocator), FsError> {
        let header = Fs::check_labels(store)?;
        let rec = journal::recover(store, &header)?;
        let alloc = Allocator::new(header.groups())?;
        let device = rec.journal.device.clone();
        for (ino, i) in &rec.meta.inodes {
            for (l, e) in &i.extents {
                alloc.mark_used(*e).map_err(|why| FsError::Corrupt {
                    device: device.clone(),
                    what: format!("inode {ino} block {l}: {why}; run `numaio fsck --repair`"),
                })?;
            }
        }
        Ok((header, rec, alloc))
    }

    /// Mounts the volume on `store`: checks the labels, loads the newest checkpoint, replays
    /// the journal, rebuilds the allocator and frees orphans (unless read-only).
    pub fn mount(store: Arc<dyn BlockStore>, opts: MountOptions) -> Result<Fs, FsError> {
        if opts.commit_interval.is_some_and(|d| d.is_zero()) {
            return Err(FsError::Invalid(
                "a commit interval of 0: give at least 1 second (MountOptions::with_commit_secs)"
                    .into(),
            ));
        }
        let (header, rec, alloc) = Fs::load(&*store)?;
        // The data the newest journal record carries goes back first, on a read-only
        // mount too (as ext4 replays its journal there): without it, blocks the metadata
        // maps could read what a power cut left of their in-place writes.
        if !rec.data.is_empty() {
            journal::write_back(&*store, &rec.data).map_err(|e| match e {
                FsError::Io { device, what, err } => FsError::Io {
                    device,
                    what: format!(
                        "{what}; the volume's newest commit carries data that recovery must write \
                         back: mount it read-write once (or run `numaio fsck --repair`)"
                    ),
                    err,
                },
                e => e,
            })?;
        }
        let alloc = Arc::new(alloc);
        let nodes = alloc.nodes();
        let info = MountInfo {
            checkpoint_seq: rec.checkpoint_seq,
            replayed: rec.replayed,
            orphans_freed: 0,
            upgraded_from: None,
        };
        let meta_bytes = journal::shard_sizes(&rec.journal.header, &rec.meta)
            .into_iter()
            .collect();
        let mut inner = Inner {
            meta: rec.meta,
            alloc: alloc.clone(),
            journal: rec.journal,
            pending: Vec::new(),
            meta_bytes,
            meta_growth: 0,
            data_dirty: BTreeSet::new(),
            open: HashMap::new(),
            commits: 0,
            nodes,
            gen: 0,
            ordered: false,
            ordered_runs: Vec::new(),
            overwrites: Default::default(),
            orphaned_at: None,
            datasync_gen: HashMap::new(),
            last_setattr: HashMap::new(),
            pending_bytes: 0,
            meta_claimed: BTreeMap::new(),
        };
        let mut info = info;
        if !opts.read_only {
            // Unlinked files that were open at the crash.
            let orphans: Vec<u64> = inner
                .meta
                .inodes
                .iter()
                .filter(|(_, i)| i.attr.nlink == 0)
                .map(|(&n, _)| n)
                .collect();
            for &ino in &orphans {
                inner.rec(Record::DelInode { ino })?;
            }
            info.orphans_freed = orphans.len() as u64;
        }
        let mut core = shared::FsCore {
            store,
            read_only: opts.read_only,
            info,
            header,
            inner: Mutex::new(inner),
            alloc,
            commit_lock: Mutex::new(super::commit::Pace::default()),
            released: Condvar::new(),
            gate: RwLock::new(()),
            inodes: super::locks::InodeLocks::new(),
            durable_gen: AtomicU64::new(0),
            sync_requests: AtomicU64::new(0),
            data_only_syncs: AtomicU64::new(0),
            periodic_commits: AtomicU64::new(0),
            space_commits: AtomicU64::new(0),
        };
        if info.orphans_freed > 0 {
            core.commit_locked(&mut core.inner.lock())?;
        }
        if !opts.read_only {
            core.info.upgraded_from = core.upgrade_format()?;
        }
        let core = Arc::new(core);
        let committer = match opts.commit_interval {
            Some(every) if !opts.read_only => Some(Committer::start(core.clone(), every)?),
            _ => None,
        };
        Ok(Fs { core, committer })
    }

    /// How often everything queued is committed without being asked, if at all.
    pub fn commit_interval(&self) -> Option<Duration> {
        self.committer.as_ref().map(|c| c.every)
    }

    /// The volume header (devices, geometry, default policy).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// What mount found.
    pub fn mount_info(&self) -> MountInfo {
        self.info
    }

    /// Stops the periodic commits, commits, writes a checkpoint and gives the volume back.
    pub fn unmount(self) -> Result<(), FsError> {
        let Fs { core, committer } = self;
        drop(committer);
        if core.read_only {
            return Ok(());
        }
        let mut g = core.inner.lock();
        core.commit_locked(&mut g)?;
        let inner = &mut *g;
        let seq = inner.journal.seq;
        inner.journal.checkpoint(&*core.store, &inner.meta, seq)
    }

    /// Reads the whole metadata of a volume without mounting it (nothing is written).
    pub fn load_meta(store: &dyn BlockStore) -> Result<(Header, Meta), FsError> {
        let header = Fs::check_labels(store)?;
        let rec = journal::recover(store, &header)?;
        Ok((header, rec.meta))
    }
}

impl shared::FsCore {
    /// Upgrades a volume of an older format version in place: the metadata is written as a
    /// checkpoint in the current layout, then the labels and header. Returns the version it
    /// had, `None` when it was current.
    fn upgrade_format(&self) -> Result<Option<u32>, FsError> {
        let v = crate::format::volume_version(&*self.store)?;
        if v >= crate::format::FORMAT_VERSION {
            return Ok(None);
        }
        let mut g = self.inner.lock();
        self.commit_locked(&mut g)?;
        // A newer sequence number than the old checkpoint's, so recovery prefers this one.
        let inner = &mut *g;
        let seq = inner.journal.seq + 1;
        inner.journal.checkpoint(&*self.store, &inner.meta, seq)?;
        crate::format::rewrite_labels(&*self.store, &self.header)?;
        Ok(Some(v))
    }
}
